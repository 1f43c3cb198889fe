#!/usr/bin/env bash
# examples/mlp_digits: two epochs reach a sensible test accuracy, and a run
# stopped after the first epoch then resumed ends byte-identical to the
# straight run (weights, AdamW, OneCycleLR and the shuffling generator).
# Usage: mlp_digits.sh path/to/mlp_digits
set -euo pipefail
BIN=$(realpath "$1")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir "$WORK/straight" "$WORK/resumed"
(cd "$WORK/straight" && "$BIN" --epochs 2 >out.txt)
(cd "$WORK/resumed" && "$BIN" --epochs 2 --stop-after 1 >out.txt && "$BIN" --epochs 2 --resume >>out.txt)
cat "$WORK/straight/out.txt"
accuracy=$(sed -n 's/^epoch 2: test accuracy //p' "$WORK/straight/out.txt")
awk -v a="$accuracy" 'BEGIN { exit !(a >= 0.85) }' || { echo "FAIL: test accuracy $accuracy after 2 epochs (want >= 0.85)"; exit 1; }
cmp "$WORK/straight/out.txt" "$WORK/resumed/out.txt" || { echo "FAIL: the resumed run printed other figures"; exit 1; }
cmp "$WORK/straight/mlp_digits.safetensors" "$WORK/resumed/mlp_digits.safetensors" ||
  { echo "FAIL: the resumed run's checkpoint differs from the straight run's"; exit 1; }
echo "resumed run identical to the straight one"
