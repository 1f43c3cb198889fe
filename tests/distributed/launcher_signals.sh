#!/usr/bin/env bash
# `kiln run` stopped by SIGTERM or SIGINT while its job is setting up (Note
# [The launcher's signals]): rank 0 has created its shared-memory segment and
# waits for rank 1, which has not started kiln yet. The launcher must forward
# the signal, end within its grace period, die by that signal, and leave
# neither ranks nor segments behind.
# Usage: launcher_signals.sh path/to/kiln path/to/kiln-distributed-tests
set -uo pipefail
kiln=$1
tests=$2
export KILN_DIST_TIMEOUT_MS=60000
fail=0
before=$(ls /dev/shm | grep '^kiln-' | sort)
for sig in TERM INT; do
  # Rank 1 sleeps in place of its program (a marker argument finds it below).
  marker="kiln-launcher-signal-test-$$-$sig"
  # (a background job starts with SIGINT ignored: env gives it back its default)
  env --default-signal=INT,TERM "$kiln" run --nproc 2 --grace 2 bash -c \
    'if [[ $RANK == 1 ]]; then exec -a "$1" sleep 60; fi; exec "$0" --gtest_filter=SymmetricMemory.OneShot*' \
    "$tests" "$marker" >/dev/null 2>&1 &
  launcher=$!
  # Wait for rank 0's segment (at most 10 s).
  for _ in $(seq 100); do
    now=$(ls /dev/shm | grep '^kiln-' | sort)
    [[ -n "$(comm -13 <(echo "$before") <(echo "$now"))" ]] && break
    sleep 0.1
  done
  if [[ -z "$(comm -13 <(echo "$before") <(echo "$now"))" ]]; then
    echo "FAIL $sig: rank 0 never created its segment"
    fail=1
  fi
  start=$(date +%s%N)
  kill -"$sig" "$launcher"
  wait "$launcher"
  status=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  want=$(( 128 + $(kill -l "$sig") ))
  echo "SIG$sig during set-up: the launcher ended in $ms ms with status $status"
  if [[ $status -ne $want ]]; then echo "FAIL $sig: status $status, expected $want (killed by SIG$sig)"; fail=1; fi
  if (( ms > 10000 )); then echo "FAIL $sig: took $ms ms"; fail=1; fi
  if pgrep -f "$marker" >/dev/null; then echo "FAIL $sig: rank 1 outlived the launcher"; pkill -f "$marker"; fail=1; fi
  after=$(ls /dev/shm | grep '^kiln-' | sort)
  if [[ "$before" != "$after" ]]; then
    echo "FAIL $sig: /dev/shm kept: $(comm -13 <(echo "$before") <(echo "$after"))"
    fail=1
  fi
done
exit $fail
