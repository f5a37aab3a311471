#!/usr/bin/env bash
# 64 B ping-pong with the client waiting in recv, poll, epoll_wait or
# select: kernel TCP and one or more xpress builds, interleaved over rounds
# in one Soft-RoCE VM boot (server 10.77.0.1, client from 10.77.0.2).
#   bench/readiness-pingpong.sh [LIB.so ...]     (default build/libxpress.so)
# Env: RP_ROUNDS (3), RP_N (round trips per run, 1500).  Reports only.
# Under TCG the guest flips between a fast state and one where every wake-up
# waits for the 4 ms timer tick (kernel TCP too): compare within a round.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib/common.sh
source "$REPO/bench/lib/common.sh"
BIN=$REPO/build/bench/readiness-pingpong
bench_vm_setup "$BIN" "$@"
{
  echo "set -u; cd /tmp"
  echo "for round in \$(seq 1 ${RP_ROUNDS:-3}); do"
  for lib in "" "${BENCH_LIBS[@]}"; do
    tag=${lib:-tcp}
    pre=${lib:+LD_PRELOAD=$lib}
    echo "  env $pre $BIN server 10.77.0.1 7000 & srv=\$!; sleep 1.5"
    echo "  for m in block poll epoll select; do echo -n \"r\$round $tag \"; env $pre $BIN \$m 10.77.0.1 7000 ${RP_N:-1500}; done"
    echo "  kill \$srv; wait \$srv 2>/dev/null"
  done
  echo "done"
} >"$BENCH_GUEST"
"$REPO/tools/softroce/vm" run -q --timeout "${RP_VM_TIMEOUT:-900}" -- bash "$BENCH_GUEST" 2>&1 | grep '^r[0-9]'
