#!/usr/bin/env bash
# Two machines, for real as far as the network goes: two network namespaces
# made here, joined by a veth pair (10.213.x.1 and .2), one node of two
# ranks in each, started by its own `kiln run --nnodes 2`. The process-group
# suite runs across them on backend "auto" (symm inside each node, gloo
# between them) and on "gloo", and must give the same results as on one
# machine: its references are the same single-process ones. Exits 77 (ctest: skipped), saying why, where
# namespaces cannot be made (not root, no CAP_SYS_ADMIN, no iproute2).
set -uo pipefail
kiln=$1
tests=$2
skip() { echo "SKIPPED: $1"; exit 77; }
command -v ip >/dev/null || skip "no 'ip' command (Debian's iproute2) to make network namespaces"
# Names unique to this run: several jobs may run at once.
id=$(( $$ % 60000 ))
ns_a=kiln-node0-$id ns_b=kiln-node1-$id if_a=kv0-$id if_b=kv1-$id
net=10.213.$(( id % 250 ))
logs=$(mktemp -d)
cleanup() { ip netns del "$ns_a" 2>/dev/null; ip netns del "$ns_b" 2>/dev/null; rm -rf "$logs"; }
trap cleanup EXIT
ip netns add "$ns_a" 2>/dev/null || skip "cannot create a network namespace here (needs root with CAP_SYS_ADMIN)"
ip netns add "$ns_b" || exit 1
ip netns exec "$ns_a" true 2>/dev/null || skip "cannot enter a network namespace here (ip netns exec)"
ip link add "$if_a" type veth peer name "$if_b" || skip "cannot create a veth pair here"
ip link set "$if_a" netns "$ns_a" && ip link set "$if_b" netns "$ns_b" || exit 1
for side in "$ns_a $if_a $net.1" "$ns_b $if_b $net.2"; do
  set -- $side
  ip -n "$1" addr add "$3/24" dev "$2" && ip -n "$1" link set "$2" up && ip -n "$1" link set lo up || exit 1
done
filter='ProcessGroup*:DistributedDataParallel*:MoE*'
master=$net.1:29500
# One secret for both nodes: their ranks prove with it to the store that they belong to the job.
export KILN_STORE_SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d " \n")
export KILN_DIST_TIMEOUT_MS=60000
fail=0
# backend: auto (symm inside each node, gloo across), then gloo alone.
for backend in auto gloo; do
  export KILN_TEST_BACKEND=$backend
  ip netns exec "$ns_a" "$kiln" run --nproc 2 --nnodes 2 --node-rank 0 --master "$master" "$tests" \
    --gtest_filter="$filter" >"$logs/node0.log" 2>&1 &
  node0=$!
  ip netns exec "$ns_b" "$kiln" run --nproc 2 --nnodes 2 --node-rank 1 --master "$master" "$tests" \
    --gtest_filter="$filter" >"$logs/node1.log" 2>&1
  status1=$?
  wait $node0
  status0=$?
  for n in 0 1; do
    log=$logs/node$n.log
    passed=$(grep -c '^\[  PASSED  \]' "$log")
    echo "--- $backend, node $n: $passed of 2 ranks passed"
    if [[ $passed -ne 2 ]] || grep -q FAILED "$log"; then cat "$log"; fail=1; fi
  done
  if [[ $status0 -ne 0 || $status1 -ne 0 ]]; then echo "FAIL $backend: launchers exited $status0 and $status1"; fail=1; fi
done
exit $fail
