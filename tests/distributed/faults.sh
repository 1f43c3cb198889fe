#!/usr/bin/env bash
# A two-rank job per stage (symmetric memory's and the gloo group's), rank 1
# killed with SIGKILL there: the launcher
# must exit non-zero naming rank 1 and the signal, rank 0 must have got a
# DistributedError naming rank 1 and the operation within the timeout (the
# fault program checks the message and exits 0), and /dev/shm must hold
# nothing of the job afterwards.
set -uo pipefail
kiln=$1
fault=$2
export KILN_DIST_TIMEOUT_MS=5000
# Ranks inherit an ignored SIGTERM: rank 0 must report by itself even when
# rank 1 dies before rank 0 has started (setup), and the launcher stops it.
trap "" TERM
fail=0
before=$(ls /dev/shm | grep '^kiln-' | sort)
# job MODE GRACE: runs the two-rank job, sets out, ms; fails it if the
# launcher exits 0 (a rank always dies or hangs) or it takes over 15 s.
job() {
  local start status
  start=$(date +%s%N)
  out=$("$kiln" run --nproc 2 --grace "$2" "$fault" "$1" 2>&1)
  status=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  echo "--- $1 ($ms ms): launcher status $status"
  echo "$out"
  if [[ $status -eq 0 ]]; then echo "FAIL $1: the launcher exited 0"; fail=1; fi
  if (( ms > 15000 )); then echo "FAIL $1: took $ms ms"; fail=1; fi
}
for mode in setup one_shot two_shot barrier signal all_reduce gloo_setup gloo_all_reduce gloo_broadcast \
            gloo_all_gather gloo_reduce_scatter gloo_all_to_all_v gloo_send_recv; do
  # Well inside the 20 s grace: rank 0 answers by itself, not by SIGKILL.
  job "$mode" 20
  if ! grep -q "rank 1 was killed by signal 9 (SIGKILL)" <<<"$out"; then echo "FAIL $mode: the launcher did not name rank 1's signal"; fail=1; fi
  if ! grep -q "^rank 0 after .*rank 1" <<<"$out"; then echo "FAIL $mode: rank 0 did not report an error naming rank 1"; fail=1; fi
  if grep -q "rank 0 exited with status\|rank 0 was killed" <<<"$out"; then echo "FAIL $mode: rank 0 did not exit cleanly"; fail=1; fi
done
# A hung peer (stopped, alive): rank 0 times out naming it and exits 3; the
# launcher then stops the job (SIGKILL after --grace ends the stopped rank).
# gloo: rank 1's heartbeat to the store stops with it.
job hang 1
if ! grep -q "^rank 0 after .*waited 5000 ms.*rank 1 .*(hung?)" <<<"$out"; then echo "FAIL hang: rank 0 did not time out naming rank 1"; fail=1; fi
if ! grep -q "rank 0 exited with status 3" <<<"$out"; then echo "FAIL hang: rank 0 did not report the hang"; fail=1; fi
job gloo_hang 1
if ! grep -q "^rank 0 after .*barrier.*rank 1 has not answered for .*(hung?).*5000ms" <<<"$out"; then echo "FAIL gloo_hang: rank 0 did not time out naming rank 1"; fail=1; fi
if ! grep -q "rank 0 exited with status 3" <<<"$out"; then echo "FAIL gloo_hang: rank 0 did not report the hang"; fail=1; fi
after=$(ls /dev/shm | grep '^kiln-' | sort)
if [[ "$before" != "$after" ]]; then echo "FAIL: /dev/shm gained: $(comm -13 <(echo "$before") <(echo "$after"))"; fail=1; fi
exit $fail
