#!/usr/bin/env bash
# Threads that cannot be started: kiln-internal-tests' Runtime.AThreadThatCannotStart*
# as user nobody under a process limit (root has none: RLIMIT_NPROC does not
# apply to it), with a timeout, since the failure once hung the pool. Skipped
# (77) where it cannot run as nobody: not root, or a build folder nobody may
# not enter.
# Usage: thread_limit.sh path/to/kiln-internal-tests
set -uo pipefail
tests=$1
if [ "$(id -u)" != 0 ] || ! command -v runuser > /dev/null || ! runuser -u nobody -- true 2> /dev/null; then
  echo "thread-limit: cannot run as user nobody here (needs root and runuser): skipped"
  exit 77
fi
if ! runuser -u nobody -- test -x "$tests"; then
  echo "thread-limit: user nobody cannot run $tests (a private folder above it): skipped"
  exit 77
fi
# About 4 of nobody's 8 processes are this shell, the test, OpenBLAS's and
# the pool's first thread: a pool of 60 cannot start.
timeout 120 runuser -u nobody -- bash -c "ulimit -u 8 && cd /tmp && KILN_TEST_NPROC_LIMITED=1 '$tests' \
  --gtest_filter='Runtime.AThreadThatCannotStart*'" > /tmp/kiln-thread-limit.$$ 2>&1
rc=$?
cat /tmp/kiln-thread-limit.$$
if grep -q "\[  SKIPPED \]" /tmp/kiln-thread-limit.$$; then rc=1; fi
rm -f /tmp/kiln-thread-limit.$$
[ $rc -eq 124 ] && echo "thread-limit: no answer within 120 s (a hang)"
exit $rc
