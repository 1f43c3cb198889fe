#!/usr/bin/env bash
# `kiln train --task fashion-mnist` and `kiln eval` on a small slice of
# Debian's Fashion-MNIST (512 training, 256 test images, IDX files written
# here): two epochs straight and the same two stopped after the first
# (--time-limit) then resumed give byte-identical checkpoints; eval reads
# the accuracy back, float and int8, and a GPT checkpoint's validation
# loss; flags of the other task are refused by name.
# Usage: fashion_mnist.sh path/to/kiln
set -euo pipefail
KILN=$(realpath "$1")
SRC=/usr/share/datasets/fashion-mnist
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
mkdir data
# slice FILE HEADER COUNT_BYTES ITEM_BYTES N: the first N items of an IDX file under a header saying N.
slice() {
  local file=$1 header=$2 item=$3 n=$4
  { printf "$header"; gzip -dc "$SRC/$file" | tail -c +"$(( ${#header} / 4 + 5 ))" | head -c $((n * item)) || true; } |
    gzip >"data/$file"
}
slice train-images-idx3-ubyte.gz '\x00\x00\x08\x03\x00\x00\x02\x00\x00\x00\x00\x1c\x00\x00\x00\x1c' 784 512
slice train-labels-idx1-ubyte.gz '\x00\x00\x08\x01\x00\x00\x02\x00' 1 512
slice t10k-images-idx3-ubyte.gz '\x00\x00\x08\x03\x00\x00\x01\x00\x00\x00\x00\x1c\x00\x00\x00\x1c' 784 256
slice t10k-labels-idx1-ubyte.gz '\x00\x00\x08\x01\x00\x00\x01\x00' 1 256
RUN=(train --task fashion-mnist --data data --epochs 2 --batch 32 --threads 1)

"$KILN" "${RUN[@]}" --out straight.safetensors >out.txt 2>&1 || { cat out.txt; exit 1; }
grep -q "512 training / 256 test images" out.txt || { echo "FAIL: not the slice:"; cat out.txt; exit 1; }
grep -q "^epoch 2: .*test accuracy" out.txt || { echo "FAIL: no second epoch:"; cat out.txt; exit 1; }
"$KILN" "${RUN[@]}" --out resumed.safetensors --time-limit 1e-9 >out.txt 2>&1
grep -q "time limit reached after epoch 1" out.txt || { echo "FAIL: did not stop after epoch 1:"; cat out.txt; exit 1; }
"$KILN" "${RUN[@]}" --out resumed.safetensors --resume >out.txt 2>&1
grep -q "resumed from resumed.safetensors after epoch 1" out.txt || { echo "FAIL: no resume:"; cat out.txt; exit 1; }
cmp straight.safetensors resumed.safetensors || { echo "FAIL: the resumed run differs from the straight one"; exit 1; }
want=$(grep -o "test accuracy [0-9.]*%" out.txt)
"$KILN" eval --ckpt straight.safetensors --data data >eval.txt 2>&1
grep -q "^$want on 256 images" eval.txt || { echo "FAIL: eval does not report '$want':"; cat eval.txt; exit 1; }

expect_error() {  # expect_error TEXT ARGS...: the command fails, saying TEXT
  local text=$1; shift
  if "$KILN" "$@" >err.txt 2>&1; then echo "FAIL: '$*' succeeded"; exit 1; fi
  grep -qF -- "$text" err.txt || { echo "FAIL: '$*' did not say '$text':"; cat err.txt; exit 1; }
}
expect_error "--layers applies to the GPT task" train --task fashion-mnist --layers 2 --out x.safetensors
expect_error "--epochs applies to --task fashion-mnist" train --epochs 2 --out x.safetensors
expect_error "[safetensors] header length" eval --ckpt out.txt --data data
# int8 (the Linear layers dynamically quantized) evaluates the same checkpoint.
"$KILN" eval --ckpt straight.safetensors --data data --quantize int8 >eval.txt 2>&1
grep -q "^test accuracy [0-9.]*% on 256 images (straight.safetensors, after 2 epochs, int8)" eval.txt ||
  { echo "FAIL: int8 eval:"; cat eval.txt; exit 1; }
# A GPT checkpoint: its validation loss, float and int8.
for i in $(seq 1 200); do echo "line $i of a plain text that is not a fortune file"; done >text.txt
"$KILN" train --data text.txt --layers 1 --width 16 --heads 2 --context 16 --batch 2 --steps 2 --eval-every 2 \
  --out gpt.safetensors >/dev/null 2>&1
for q in none int8; do
  "$KILN" eval --ckpt gpt.safetensors --data text.txt --quantize $q --batches 2 >eval.txt 2>&1
  grep -q "^validation loss [0-9.]* nats/char over 2 batches" eval.txt || { echo "FAIL: GPT eval ($q):"; cat eval.txt; exit 1; }
done
expect_error "install Debian's 'dataset-fashion-mnist'" eval --ckpt straight.safetensors --data missing
echo "fashion-mnist: resumed run identical, eval agrees (float, int8, GPT), bad flags refused"
