#!/usr/bin/env bash
# The one-way rules between layers (docs/ARCHITECTURE.md) checked on the
# compiled objects: no symbol a lower layer's objects use is defined by a
# higher layer's objects. This catches what the #include rules cannot: a
# kernel calling Tensor::contiguous() includes only kiln/tensor.h, yet the
# method is an op front end defined in src/ops.
# Usage: link_rules.sh path/to/repository path/to/CMakeFiles/kiln-objects.dir
set -uo pipefail
src=$1 objdir=$2
violations=0

# The objects of a layer's current sources (stale objects of removed files are skipped).
objects() {
  (cd "$src" && find "src/$1" -name '*.cpp') | while read -r f; do
    [ -f "$objdir/$f.o" ] && echo "$objdir/$f.o"
  done
}
defined() { nm --defined-only -C $(objects "$1") | awk '$2 ~ /[TWVDRB]/ {sub(/^[0-9a-f]+ [A-Za-z] /, ""); print}' | sort -u; }
used() { nm -u -C $(objects "$1") | sed 's/^ *U //' | sort -u; }

# forbid LOWER "HIGHER..." WHY
forbid() {
  local lower=$1 higher=$2 why=$3 hits=""
  [ -n "$(objects "$lower")" ] || { echo "link_rules.sh: no objects for src/$lower under $objdir"; exit 2; }
  for h in $higher; do
    hits+=$(comm -12 <(used "$lower") <(defined "$h"))
  done
  if [ -n "$hits" ]; then
    echo "link rule broken: $why"
    echo "$hits"
    violations=$((violations + 1))
  fi
}

forbid kernels "ops autograd compile nn optim" "src/kernels calls an op front end (use kernels/cpu/kernel_tensors.h)"
forbid core "dispatch ops kernels autograd compile attention nn optim io" "src/core calls a layer above it"
forbid dispatch "ops autograd compile nn optim" "src/dispatch calls an op front end or a layer above it"
forbid ops "autograd compile nn optim" "src/ops calls a layer above it"
if [ "$violations" -ne 0 ]; then exit 1; fi
echo "link rules hold"
