#!/usr/bin/env bash
# `kiln train --nproc 2` (data-parallel, half of every batch per rank) must
# give the loss curve of one process training on the whole batches: every
# reported train and validation loss within a tolerance (float32 sums in
# another order), and both must learn (the last validation loss below the
# first). Then the same for a mixture-of-experts GPT whose 4 experts are
# sharded over the 2 ranks (tokens exchanged with all_to_all_v), whose
# gathered checkpoint must load and generate in one process.
set -uo pipefail
kiln=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for i in $(seq 1 3000); do echo "line $i: the quick brown fox $((i * 7919 % 1000)) jumps over the lazy dog"; done >"$work/text.txt"
base=(--data "$work/text.txt" --layers 2 --width 32 --heads 2 --context 32 --batch 8 --eval-every 10 --seed 5)
fail=0

# compare NAME TOLERANCE LINES ARGS...: one process vs --nproc 2
compare() {
  local name=$1 tol=$2 lines=$3
  shift 3
  "$kiln" train "${base[@]}" "$@" --threads 1 --out "$work/$name-one.safetensors" >"$work/one.txt" 2>"$work/one.err" ||
    { cat "$work/one.err"; fail=1; return; }
  "$kiln" train "${base[@]}" "$@" --nproc 2 --out "$work/$name-two.safetensors" >"$work/two.txt" 2>"$work/two.err" ||
    { cat "$work/two.err"; fail=1; return; }
  echo "--- $name"
  cat "$work/one.txt" "$work/two.txt"
  grep -q "2 ranks" "$work/two.err" || { echo "FAIL $name: the data-parallel run did not say it ran 2 ranks"; fail=1; }
  paste -d' ' <(grep '^step' "$work/one.txt") <(grep '^step' "$work/two.txt") | awk -v tol="$tol" -v lines="$lines" -v name="$name" '
    { n++; a = $5 + 0; b = $15 + 0; c = $8 + 0; d = $18 + 0
      if ($2 != $12) { print "FAIL " name ": steps differ: " $2 " " $12; bad = 1 }
      if (a - b > tol || b - a > tol || c - d > tol || d - c > tol) { print "FAIL " name ": " $0; bad = 1 }
      if (n == 1) first = d; last = d }
    END { if (n != lines) { print "FAIL " name ": " n " loss lines, expected " lines; bad = 1 }
          if (!(last < first)) { print "FAIL " name ": validation loss did not fall: " first " -> " last; bad = 1 }
          exit bad }' || fail=1
}

compare dense 1e-3 6 --steps 60
# The gradient norm for clipping spans every rank's experts (clip_sharded_grad_norm).
compare experts 1e-3 4 --steps 40 --experts 4
grep -q "sharded over the ranks" "$work/two.err" || { echo "FAIL experts: not sharded"; fail=1; }
"$kiln" generate --ckpt "$work/experts-two.safetensors" --prompt "line" --tokens 20 >"$work/gen.txt" 2>&1 ||
  { echo "FAIL: the gathered mixture-of-experts checkpoint does not generate:"; cat "$work/gen.txt"; fail=1; }
exit $fail
