#!/usr/bin/env bash
# The training demo under emulation: 20 steps of `kiln train` built for
# arm64 (run through qemu) give the losses of the x86 build's run, same
# seed, same data, within float32 tolerance (the SIMD targets sum in other
# orders: NEON against AVX-512).
# Usage: arm64_losses.sh "qemu-aarch64 -L SYSROOT" path/to/arm64/kiln path/to/x86/kiln
set -euo pipefail
read -r -a EMULATOR <<<"$1"
ARM=$(realpath "$2")
if [ ! -x "$3" ]; then
  echo "skipped: no x86 kiln at $3 to compare with (build the x86 tree first: make build)"
  exit 77
fi
X86=$(realpath "$3")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
for i in $(seq 1 400); do echo "line $i of a plain text, the same for both machines"; done >text.txt
RUN=(train --data text.txt --layers 2 --width 32 --heads 2 --context 32 --batch 4 --threads 1 --steps 20
     --eval-every 1 --seed 7 --overwrite)
"$X86" "${RUN[@]}" --out x86.safetensors >x86.txt 2>&1 || { echo "FAIL: the x86 run failed:"; cat x86.txt; exit 1; }
"${EMULATOR[@]}" "$ARM" "${RUN[@]}" --out arm64.safetensors >arm64.txt 2>&1 ||
  { echo "FAIL: the arm64 run failed:"; cat arm64.txt; exit 1; }
# "step N: train loss A, validation loss B nats/char (...)" -> N A B
losses() { sed -n 's/^step \([0-9]*\): train loss \([^,]*\), validation loss \([^ ]*\) .*/\1 \2 \3/p' "$1"; }
losses x86.txt >x86.losses
losses arm64.txt >arm64.losses
[ "$(wc -l <x86.losses)" = 20 ] || { echo "FAIL: expected 20 steps from x86:"; cat x86.txt; exit 1; }
paste x86.losses arm64.losses | awk '
  { for (k = 2; k <= 3; ++k) {
      d = $k - $(k + 3); if (d < 0) d = -d; r = d / ($k > 0 ? $k : 1);
      if (r > worst) worst = r;
      if ($1 != $4 || r > 1e-4) { printf "FAIL: step %s: x86 %s, arm64 %s\n", $1, $k, $(k + 3); bad = 1 } } }
  END { printf "20 steps: largest relative difference %.2e (tolerance 1e-4; losses as printed, 6 digits)\n", worst; exit bad }'
