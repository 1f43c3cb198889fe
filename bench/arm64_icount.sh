#!/usr/bin/env bash
# Instructions per element of kiln's kernels on emulated Arm CPUs: a proxy
# for speed (which qemu cannot give), so that a kernel that stops being
# vectorised, or a path that stops being chosen, shows. Debian 12's qemu has
# no TCG plugins (no instruction-count plugin), so the count comes from its
# own logs: -d in_asm lists each translated block's instructions, -d
# exec,nochain logs every block executed; their product summed is the
# instructions executed. Each kernel runs once and nine times
# (bench/icount_kernels.cpp); the difference over 8 x 65536 elements is its
# count per element (per multiply-add for the GEMMs), dispatch included.
# Start-up does not execute the same count twice (timer calibration, ...):
# one run to the next moves by a few thousand instructions, below 0.01 per
# element here; ASLR off and OpenBLAS on one thread keep it that small.
# Prints one JSON line per case, ratio = the NEON machine's count over this
# one's (> 1: fewer instructions).
# Usage: bench/arm64_icount.sh [BUILD_ARM64_DIR ["KERNEL..."]]   (make icount-arm64)
set -euo pipefail
build=$(realpath "${1:-build-arm64}")
program=$build/bin/kiln-icount-kernels
[ -x "$program" ] || { echo "arm64_icount: no $program (make arm64 builds it)"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# instructions CPU CAPABILITY KERNEL REPS: the guest instructions one run executes.
instructions() {
  local fifo="$work/log.$$.$RANDOM"
  mkfifo "$fifo"
  awk '
    /^IN:/ { block = 1; pc = ""; n = 0; next }
    block && /^0x[0-9a-f]+:/ { if (pc == "") { pc = substr($1, 3, length($1) - 3); sub(/^0+/, "", pc) } n++; next }
    block && /^$/ { if (pc != "") size[pc] = n; block = 0; next }
    /^Trace / { split(substr($0, index($0, "[") + 1), f, "/"); pc = f[2]; sub(/^0+/, "", pc); total += size[pc] }
    END { printf "%d\n", total }' "$fifo" > "$fifo.count" &
  local reader=$!
  OPENBLAS_NUM_THREADS=1 QEMU_CPU=$1 KILN_CPU_CAPABILITY=$2 setarch -R qemu-aarch64 -L "$build/sysroot" -d in_asm,exec,nochain -D "$fifo" \
    "$program" "$3" "$4" > /dev/null
  wait "$reader"
  cat "$fifo.count"
  rm -f "$fifo" "$fifo.count"
}

# name, qemu CPU, kiln capability: NEON without and with dotprod (Cortex-A72,
# Neoverse N1), NEON with i8mm and bf16 (qemu's max, SVE not used), SVE of
# 128, 256 and 512 bits.
machines=("neon-a72 cortex-a72 neon" "neon-n1 neoverse-n1 neon" "neon-max max neon"
          "sve128 max,sve128=on sve" "sve256 max,sve256=on sve" "sve512 max,sve512=on sve")
read -r -a kernels <<<"${2:-add exp relu sum softmax int8_gemm bf16_gemm}"
# Every run (two at a time: one per core), then the table.
export -f instructions
export build program work
for machine in "${machines[@]}"; do
  read -r name cpu capability <<<"$machine"
  for kernel in "${kernels[@]}"; do
    for reps in 1 9; do echo "$name $cpu $capability $kernel $reps"; done
  done
done | xargs -P 2 -L 1 bash -c 'instructions "$1" "$2" "$3" "$4" > "$work/$0.$3.$4"'
for machine in "${machines[@]}"; do
  read -r name cpu capability <<<"$machine"
  for kernel in "${kernels[@]}"; do
    awk -v m="$name" -v k="$kernel" -v one="$(cat "$work/$name.$kernel.1")" -v nine="$(cat "$work/$name.$kernel.9")" \
        -v b1="$(cat "$work/neon-a72.$kernel.1")" -v b9="$(cat "$work/neon-a72.$kernel.9")" 'BEGIN {
      v = (nine - one) / (8 * 65536); b = (b9 - b1) / (8 * 65536)
      printf "{\"bench\":\"arm64_icount\",\"case\":\"%s_%s\",\"unit\":\"instructions/element\",\"kiln\":%.3f,", k, m, v
      printf "\"baseline\":\"neon-a72\",\"baseline_value\":%.3f,\"ratio\":%.3f}\n", b, (v > 0 ? b / v : 0) }'
  done
done
