#!/usr/bin/env bash
# The one-way rules between layers (docs/ARCHITECTURE.md), checked on the
# sources' #include lines: an op front end never reaches a device's kernels
# (kernels bind themselves to ops by name, src/kernels/cpu/registrations.cpp),
# kernels never reach up into the op front ends, autograd or compile, core
# (storage, dtypes, allocator, threads) includes nothing above it, and the
# public headers include no source header.
# Usage: import_rules.sh path/to/repository
set -uo pipefail
cd "$1" || exit 2
violations=0

# forbid DIRS REGEX WHY [ALLOWED]: no file under DIRS (space-separated) has an #include matching
# REGEX (except one matching ALLOWED).
forbid() {
  local dir=$1 pattern=$2 why=$3 allowed=${4:-^$} hits
  # shellcheck disable=SC2086 # DIR may be several paths
  hits=$(grep -rnE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[\"<]($pattern)" $dir | grep -vE "$allowed" || true)
  if [ -n "$hits" ]; then
    echo "import rule broken: $why"
    echo "$hits"
    violations=$((violations + 1))
  fi
}

forbid src/ops 'kernels/' "src/ops includes a kernel header (kernels register themselves by op name)"
forbid src/kernels 'ops/|autograd/|compile/|kiln/(ops|autograd|compile|nn|optim|gpt)\.h' \
  "src/kernels includes an op front end, autograd or compile header"
forbid src/core 'ops/|kernels/|dispatch/|autograd/|compile/|attention/|nn/|optim/|io/|data/|kiln/(ops|dispatch|autograd|autograd_function|compile|nn|optim|gpt|io|data|attention[a-z_]*|paged_attention)\.h' \
  "src/core includes a header above it"
# The public headers have the sources' layers too: the op level (tensors,
# dispatch, ops, autograd) never includes the model level (nn, optim, data,
# io, compile), in the headers or in the sources that implement the op
# level. One exception: kiln/quantization.h holds both levels (quantized
# tensors and observers, which src/ops implements, and the quantized
# nn::Linear), so src/ops includes it until it is split.
op_level_headers=$(printf 'include/kiln/%s.h ' tensor dtype device error dispatch schema call_op ops linalg runtime \
  autograd autograd_function profiler)
model_level='kiln/(nn|gpt|moe|data_parallel|optim|lr_scheduler|data|io|compile|attention|paged_attention)\.h'
forbid "src/ops src/autograd src/dispatch $op_level_headers" "$model_level" \
  "an op-level header or source includes a model-level public header (nn, optim, data, io, compile)"
# Public headers include only public headers (their internals are under
# include/kiln/detail/, shipped with them) and never the sources' headers.
forbid include/kiln '(core|ops|kernels|dispatch|autograd|compile|attention|io|data|nn|optim)/' \
  "a public header includes a header from src/"

# The stable headers are what extensions compile against: they include only
# each other (the C shim), never the rest of kiln, whose C++ types may change;
# kiln/export.h, macros alone (KILN_API), is the one exception.
forbid include/kiln/stable 'kiln/[a-z_]+\.h|kiln/detail/' "a stable header includes a non-stable kiln header" \
  '#include "kiln/export\.h"'

# The rules must see the tree: a wrong path would pass vacuously.
[ -f src/kernels/cpu/registrations.cpp ] && [ -d src/ops ] || { echo "import_rules.sh: not a kiln tree: $PWD"; exit 2; }
if [ "$violations" -ne 0 ]; then exit 1; fi
echo "import rules hold"
