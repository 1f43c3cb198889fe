#!/usr/bin/env bash
# `kiln info --ops`: every public op with its schema, every dispatcher op
# with its gradient, fusion and kernels; the counts match the lines, and a
# few ops whose answers are known say them; docs/OPS.md is what it prints.
# Usage: info_ops.sh path/to/kiln path/to/repository
set -uo pipefail
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$1" info --ops >"$out" || { echo "FAIL: kiln info --ops exited $?"; exit 1; }
failures=0
expect_line() {  # a line equal to $1 after its indentation
  grep -qxF -- "  $1" "$out" || { echo "FAIL: no line '$1'"; failures=$((failures + 1)); }
}
public=$(sed -n 's/^public ops (kiln::<name>, call_op): \([0-9]*\)$/\1/p' "$out")
dispatcher=$(sed -n 's/^dispatcher ops: \([0-9]*\) .*/\1/p' "$out")
listed_public=$(sed -n '/^public ops/,/^dispatcher ops/p' "$out" | grep -c '^  ')
listed_dispatcher=$(sed -n '/^dispatcher ops/,$p' "$out" | grep -c '^  ')
if [[ -z $public || -z $dispatcher || $public -lt 300 || $public -ne $listed_public || $dispatcher -ne $listed_dispatcher ]]; then
  echo "FAIL: counts: public '$public' (listed $listed_public), dispatcher '$dispatcher' (listed $listed_dispatcher)"
  failures=$((failures + 1))
fi
expect_line "repeat_interleave.self_int(Tensor self, int repeats, int? dim=None, *, int? output_size=None) -> Tensor"
expect_line "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"
expect_line "sort(Tensor self, int dim=-1, bool descending=False, *, bool stable=True) -> (Tensor values, Tensor indices)"
grep -qE '^  relu\(Tensor self\) -> Tensor  \[grad, fused, kernels: cpu\]$' "$out" ||
  { echo "FAIL: relu is not listed as differentiable, fused, with a CPU kernel"; failures=$((failures + 1)); }
grep -qE '^  multinomial\(.*\[no grad, kernels: cpu\]$' "$out" ||
  { echo "FAIL: multinomial is not listed as without gradient, not fused"; failures=$((failures + 1)); }
grep -qE '^  sort\(.*\[grad, kernels: cpu\]$' "$out" ||
  { echo "FAIL: sort is not listed as differentiable, not fused"; failures=$((failures + 1)); }
grep -qE '^  permute\(.*\[grad, fused, kernels: view\]$' "$out" ||
  { echo "FAIL: permute is not listed as a differentiable view"; failures=$((failures + 1)); }
if ! diff -q <(bash "$2/tools/ops_doc.sh" "$1") "$2/docs/OPS.md" >/dev/null; then
  echo "FAIL: docs/OPS.md is not what kiln info --ops prints; regenerate it:"
  echo "  bash tools/ops_doc.sh build/bin/kiln > docs/OPS.md"
  diff <(bash "$2/tools/ops_doc.sh" "$1") "$2/docs/OPS.md" | head -20
  failures=$((failures + 1))
fi
if [[ $failures -ne 0 ]]; then
  grep -E '^  (relu|multinomial|permute|sort|add)' "$out" | head -20
  exit 1
fi
echo "kiln info --ops lists $public public and $dispatcher dispatcher ops"
