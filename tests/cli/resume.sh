#!/usr/bin/env bash
# `kiln train --resume` continues the exact run: training 12 steps straight
# and training the same 12 steps stopped after the first (--time-limit, with
# an evaluation and a checkpoint there) then resumed give byte-identical
# checkpoints: weights, optimizer state and the generator's position.
# Usage: resume.sh path/to/kiln
set -euo pipefail
KILN=$(realpath "$1")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
for i in $(seq 1 400); do echo "line $i of a plain text that is not a fortune file"; done >text.txt
RUN=(train --data text.txt --layers 1 --width 16 --heads 2 --context 16 --batch 2 --threads 1 --steps 12 --eval-every 6)

"$KILN" "${RUN[@]}" --out straight.safetensors >/dev/null 2>&1
"$KILN" "${RUN[@]}" --out resumed.safetensors --time-limit 1e-9 >out.txt 2>&1
grep -q "^step 1:" out.txt || { echo "FAIL: the time-limited run did not stop after step 1:"; cat out.txt; exit 1; }
"$KILN" "${RUN[@]}" --out resumed.safetensors --resume >out.txt 2>&1
grep -q "resumed from resumed.safetensors at step 1" out.txt || { echo "FAIL: no resume:"; cat out.txt; exit 1; }
cmp straight.safetensors resumed.safetensors || { echo "FAIL: the resumed run differs from the straight one"; exit 1; }
echo "resumed run identical to the straight one"
