#!/usr/bin/env bash
# Runs each libFuzzer target for N seconds from its seed corpus and
# dictionary, and fails on any finding (crash, sanitizer report, leak,
# timeout, out-of-memory). Usage: run.sh BUILD_BIN_DIR SECONDS [JOBS]
# JOBS targets run side by side (default 1), each a single process.
set -uo pipefail
BIN=$1
SECONDS_EACH=$2
JOBS=${3:-1}
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=${FUZZ_WORK:-$(mktemp -d)}
# Huge sizes are refused by the library's own checks; a null from the
# allocator must come back as kiln's out-of-memory error, not an abort.
export ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1
export UBSAN_OPTIONS=print_stacktrace=1
TARGETS=(safetensors checkpoint cli_args data_files store)
mkdir -p "$WORK/artifacts"
fuzz_one() {
  local target=$1
  mkdir -p "$WORK/$target"
  "$BIN/fuzz-$target" -max_total_time="$SECONDS_EACH" -dict="$HERE/dict/$target.dict" -rss_limit_mb=4096 \
    -timeout=30 -artifact_prefix="$WORK/artifacts/$target-" -print_final_stats=1 \
    "$WORK/$target" "$HERE/corpus/$target" >"$WORK/$target.log" 2>&1
  echo $? >"$WORK/$target.rc"
}
for target in "${TARGETS[@]}"; do
  while (($(jobs -rp | wc -l) >= JOBS)); do wait -n; done
  fuzz_one "$target" &
done
wait
failed=0
for target in "${TARGETS[@]}"; do
  log="$WORK/$target.log"
  rc=$(cat "$WORK/$target.rc")
  # The last status line: executions, coverage (cov: edges, ft: features), corpus size.
  echo "fuzz-$target: $(grep -E '^#[0-9]+' "$log" | tail -n 1)"
  grep -E 'stat::number_of_executed_units|stat::peak_rss_mb' "$log" | sed 's/^/  /'
  if [[ $rc -ne 0 ]]; then
    echo "fuzz-$target FAILED (exit $rc); the end of its log ($log):"
    tail -n 60 "$log"
    ls "$WORK/artifacts"
    failed=1
  fi
done
exit $failed
