#!/usr/bin/env bash
# What the README promises about the code, checked on the sources: every
# KILN_* environment variable the code reads is in its Configuration table
# (and every one there is read), kiln.h includes every public header, and
# the Layout names each of them.
# Usage: docs_rules.sh path/to/repository
set -uo pipefail
cd "$1" || exit 2
[ -f README.md ] && [ -f include/kiln/kiln.h ] || { echo "docs_rules.sh: not a kiln tree: $PWD"; exit 2; }
failures=0
fail() {
  echo "$1"
  failures=$((failures + 1))
}

# Variables: each "KILN_..." string literal of the library, its headers and
# the CLI names one (they are read through getenv or world.cpp's helper).
read_by_code=$(grep -rhoE '"KILN_[A-Z0-9_]+"' src include tools | tr -d '"' | sort -u)
in_table=$(grep -E '^\|' README.md | grep -oE '`KILN_[A-Z0-9_]+`' | tr -d '`' | sort -u)
[ -n "$read_by_code" ] || fail "no KILN_ variable found in the sources: the pattern is wrong"
for v in $read_by_code; do
  grep -qx "$v" <<<"$in_table" || fail "README.md's Configuration table misses $v, which the code reads"
done
for v in $in_table; do
  grep -qx "$v" <<<"$read_by_code" || fail "README.md's Configuration table lists $v, which no code reads"
done

# Public headers: kiln.h includes each, directly or through another, and the
# README's Layout names each.
included=""
frontier="kiln/kiln.h"
while [ -n "$frontier" ]; do
  next=""
  for f in $frontier; do
    for g in $(grep -oE '^#include "kiln/[a-z_/]+\.h"' "include/$f" | grep -oE 'kiln/[a-z_/]+\.h'); do
      grep -qx "$g" <<<"$included" && continue
      included+="$g"$'\n'
      next+=" $g"
    done
  done
  frontier=$next
done
layout=$(sed -n '/^## Layout/,/^How an op call flows/p' README.md)
for h in include/kiln/*.h; do
  name=$(basename "$h")
  [ "$name" = kiln.h ] && continue
  grep -qx "kiln/$name" <<<"$included" || fail "include/kiln/kiln.h does not include kiln/$name"
  grep -qE "(^|[^a-z_])${name//./\\.}([^a-z_]|$)" <<<"$layout" || fail "README.md's Layout does not name include/kiln/$name"
done

if [ "$failures" -ne 0 ]; then exit 1; fi
echo "the README's configuration table and layout match the code"
