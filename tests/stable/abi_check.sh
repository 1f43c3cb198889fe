#!/usr/bin/env bash
# The stable C ABI against its 1.0 baseline (tests/stable/abi/, written by
# libabigail's abidw from the 1.0 library): every function of the frozen 1.0
# header (tests/stable/v1.0) must still be exported with the same types.
# Functions added since are not compared. abidiff exits non-zero on any
# change to those functions (a removed one, a changed parameter or result
# type, a changed KilnValue layout).
# Usage: abi_check.sh SOURCE_DIR path/to/libkiln.so
#        abi_check.sh SOURCE_DIR path/to/libkiln.so --write-baseline   (only when the ABI's version changes)
set -euo pipefail
src=$1 lib=$2
header="$src/tests/stable/v1.0/kiln/stable/c/shim.h"
baseline="$src/tests/stable/abi/kiln-stable-1.0.abi"
command -v abidiff > /dev/null || { echo "abi_check.sh: abidiff not found (Debian package abigail-tools)"; exit 1; }
list=$(mktemp)
trap 'rm -f "$list"' EXIT
{
  echo "[abi_whitelist]"
  sed 's|/\*.*\*/||' "$header" | grep -oE '\bkiln_[a-z_0-9]+\(' | tr -d '(' | sort -u | sed 's/^/  /'
} > "$list"
functions=$(($(wc -l < "$list") - 1))
[ "$functions" -gt 30 ] || { echo "abi_check.sh: only $functions functions read from $header"; exit 2; }
if [ "${3:-}" = "--write-baseline" ]; then
  abidw --kmi-whitelist "$list" --no-show-locs --no-corpus-path --drop-undefined-syms "$lib" > "$baseline"
  echo "wrote $baseline"
  exit 0
fi
report=$(mktemp)
trap 'rm -f "$list" "$report"' EXIT
abidiff --kmi-whitelist "$list" --no-show-locs --no-unreferenced-symbols "$baseline" "$lib" > "$report" && status=0 ||
  status=$?
# Status bits: 1 and 2 a failure of abidiff itself, 8 an incompatible change,
# 4 any change: a change to a 1.0 function ([C], or [D] removed) fails; a
# new soname (the library's own version) alone does not.
if [ $((status & 11)) -ne 0 ] || grep -qE "^\s*\[(C|D)\] 'function" "$report"; then
  cat "$report"
  echo "abi_check.sh: the stable C ABI 1.0 changed (abidiff status $status)"
  exit 1
fi
echo "stable C ABI: the $functions functions of 1.0 are unchanged"
