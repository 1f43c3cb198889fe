#!/usr/bin/env bash
# `kiln train --nproc 2` (data-parallel, half of every batch per rank) must
# give the loss curve of one process training on the whole batches:
# every reported train and validation loss within 1e-3 (float32 sums in
# another order), and both must learn (the last validation loss below the
# first).
set -uo pipefail
kiln=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for i in $(seq 1 3000); do echo "line $i: the quick brown fox $((i * 7919 % 1000)) jumps over the lazy dog"; done >"$work/text.txt"
args=(--data "$work/text.txt" --layers 2 --width 32 --heads 2 --context 32 --batch 8 --steps 60 --eval-every 10 --seed 5)
"$kiln" train "${args[@]}" --threads 1 --out "$work/one.safetensors" >"$work/one.txt" 2>"$work/one.err" || { cat "$work/one.err"; exit 1; }
"$kiln" train "${args[@]}" --nproc 2 --out "$work/two.safetensors" >"$work/two.txt" 2>"$work/two.err" || { cat "$work/two.err"; exit 1; }
cat "$work/one.txt" "$work/two.txt"
grep -q "2 ranks" "$work/two.err" || { echo "FAIL: the data-parallel run did not say it ran 2 ranks"; exit 1; }
paste -d' ' <(grep '^step' "$work/one.txt") <(grep '^step' "$work/two.txt") | awk '
  { n++; a = $5 + 0; b = $15 + 0; c = $8 + 0; d = $18 + 0
    if ($2 != $12) { print "FAIL: steps differ: " $2 " " $12; bad = 1 }
    if (a - b > 1e-3 || b - a > 1e-3 || c - d > 1e-3 || d - c > 1e-3) { print "FAIL: " $0; bad = 1 }
    if (n == 1) first = d; last = d }
  END { if (n != 6) { print "FAIL: " n " loss lines, expected 6"; bad = 1 }
        if (!(last < first)) { print "FAIL: validation loss did not fall: " first " -> " last; bad = 1 }
        exit bad }'
