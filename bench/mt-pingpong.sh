#!/usr/bin/env bash
# Many threads, each with its own connection, doing 64 B request/response
# (bench/mt-pingpong.c): kernel TCP and one or more xpress builds,
# interleaved over rounds in one Soft-RoCE VM boot (server 10.77.0.1 with 4
# epoll workers, client from 10.77.0.2).
#   bench/mt-pingpong.sh [LIB.so[@VAR=VAL,VAR=VAL] ...]   (default build/libxpress.so)
# Env: MT_ROUNDS (3), MT_N (round trips per thread, 2000), MT_WARM (round
# trips per thread before those, not counted: the upgrade, 100), MT_SPECS
# (client wait, poll, epoll or block, and thread count: "poll:1 poll:4
# block:4").  Reports only:
# one line per run with mean, p50, p90, p99 and max round trip (us), the
# longest warm-up (ms from connect), the client's CPU time per round trip
# (us), its voluntary context switches per round trip (csw_rt: a thread went
# to sleep, so one wake-up each; all threads, the engine's included), its
# involuntary ones (icsw_rt: preempted, which a loaded host inflates) and the
# wall time; then the server's, per round trip over that run (srv_cpu_us_rt,
# in clock ticks of 10 ms, so only meaningful over runs of seconds;
# srv_csw_rt, srv_icsw_rt).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib/common.sh
source "$REPO/bench/lib/common.sh"
BIN=$REPO/build/bench/mt-pingpong
bench_vm_setup "$BIN" "$@"
{
  echo "set -u; cd /tmp"
  echo "for round in \$(seq 1 ${MT_ROUNDS:-3}); do"
  for item in tcp "${BENCH_LIBS[@]}"; do
    lib=${item%%@*} ev=""
    [ "$item" = "$lib" ] || ev=${item#*@}
    ev=${ev//,/ }
    tag="$(basename "$lib")${ev:+[$ev]}"
    pre=""
    [ "$lib" = tcp ] || pre="LD_PRELOAD=$lib"
    echo "  env $pre $ev $BIN server 10.77.0.1 7000 4 & srv=\$!; sleep 1.5"
    echo "  for spec in ${MT_SPECS:-poll:1 poll:4 block:4}; do"
    echo "    c0=\"\$(cat /proc/\$srv/task/*/status | awk '/^voluntary_ctxt/{v+=\$2} /^nonvoluntary_ctxt/{i+=\$2} END{print v, i}') \$(awk '{print \$14 + \$15}' /proc/\$srv/stat)\""
    # Every line the client prints (its result, xpress's warnings: no
    # connection on RDMA) gets the run's prefix, each on its own line.
    echo "    { timeout 120 env $pre $ev $BIN \${spec%:*} 10.77.0.1 7000 \${spec#*:} ${MT_N:-2000} ${MT_WARM:-100} || echo failed; } 2>&1 | sed \"s/^/r\$round $tag \${spec%:*} /\""
    echo "    c1=\"\$(cat /proc/\$srv/task/*/status | awk '/^voluntary_ctxt/{v+=\$2} /^nonvoluntary_ctxt/{i+=\$2} END{print v, i}') \$(awk '{print \$14 + \$15}' /proc/\$srv/stat)\""
    echo "    echo \"r\$round $tag \${spec%:*} \$(echo \$c0 \$c1 | awk -v n=\$(( \${spec#*:} * (${MT_N:-2000} + ${MT_WARM:-100}) )) -v hz=\$(getconf CLK_TCK) '{printf \"srv_cpu_us_rt %.1f srv_csw_rt %.2f srv_icsw_rt %.2f\", (\$6-\$3)*1e6/hz/n, (\$4-\$1)/n, (\$5-\$2)/n}')\""
    echo "  done"
    echo "  kill \$srv; wait \$srv 2>/dev/null"
  done
  echo "done"
} >"$BENCH_GUEST"
"$REPO/tools/softroce/vm" run -q --timeout "${MT_VM_TIMEOUT:-900}" -- bash "$BENCH_GUEST" 2>&1 | grep '^r[0-9]'
