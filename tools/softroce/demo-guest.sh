#!/usr/bin/env bash
# `make demo`, inside the VM (started by tools/softroce/demo.sh): the same
# unmodified programs between 10.77.0.1 and 10.77.0.2, first over kernel TCP,
# then with LD_PRELOAD=libxpress.so and XPRESS_STATS=1, with the Soft-RoCE and
# veth counters of each run.  It shows what the library does today: every
# connection's mode (rdma/tcp) and fallback reason come from the library's own
# statistics table, and the rxe counters say whether bytes went over RDMA.
set -uo pipefail
: "${XP_SOFTROCE:?run inside the VM (make demo)}"
source "$XP_SOFTROCE/faults.sh"
A0=$XP_ADDR0 A1=$XP_ADDR1
LIB=${XPRESS_DEMO_LIB:-}
DUR=${DEMO_SECONDS:-3}
W=$(mktemp -d)
declare -A res=()

hr() { printf '\n=== %s\n' "$*"; }
indent() { sed 's/^/    /'; }
sockperf_summary() {
  sed 's/\x1b\[[0-9;]*m//g' "$1" | awk '
    /avg-latency=/ { sub(/.*avg-latency=/, ""); avg = $1 }
    /percentile 50.000 =/ { p50 = $NF } /percentile 99.000 =/ { p99 = $NF }
    END { if (avg != "") printf "%.1f us avg, %.1f us p50, %.1f us p99 (one way)", avg, p50, p99 }'
}
iperf3_summary() {
  awk '/receiver$/ { for (i = 1; i <= NF; i++) if ($i ~ /bits\/sec/) { print $(i - 1), $i; exit } }' "$1"
}
counters_line() {  # the counters that tell where the bytes went
  xp_deltas "$1"
  printf 'rxe0 sent/rcvd pkts %s/%s, rxe1 sent/rcvd pkts %s/%s, veth0 tx %s B, veth1 tx %s B' \
    "${XP_DELTA[rxe0.sent_pkts]:-0}" "${XP_DELTA[rxe0.rcvd_pkts]:-0}" \
    "${XP_DELTA[rxe1.sent_pkts]:-0}" "${XP_DELTA[rxe1.rcvd_pkts]:-0}" \
    "${XP_DELTA[veth0.tx_bytes]:-0}" "${XP_DELTA[veth1.tx_bytes]:-0}"
}
stats_of() {  # the library's statistics table(s) in a log
  awk '/^xpress statistics:/ { on = 1 } on && /^$/ { on = 0 } on' "$1"
}

# run_sockperf MODE PORT  (MODE = tcp | xpress)
run_sockperf() {
  local mode=$1 port=$2 pre=() s
  [ "$mode" = tcp ] || pre=(env LD_PRELOAD="$LIB" XPRESS_STATS=1)
  rxe-counters snapshot "$W/c.$mode.sp"
  timeout -k 5 60 "${pre[@]}" sockperf server --tcp -i "$A1" -p "$port" > "$W/sp.$mode.s" 2>&1 & s=$!
  xp_wait_port "$port" 10 || xp_wait_cm_listen "$port" 5
  timeout -k 5 $((DUR + 30)) "${pre[@]}" sockperf ping-pong --tcp -i "$A1" -p "$port" --client_ip "$A0" \
    -m 64 -t "$DUR" > "$W/sp.$mode.c" 2>&1
  local rc=$?
  # SIGINT: sockperf exits through exit(), so the library prints its table.
  kill -INT "$s" 2>/dev/null; for _ in {1..30}; do kill -0 "$s" 2>/dev/null || break; sleep 0.1; done
  kill "$s" 2>/dev/null; wait "$s" 2>/dev/null
  res[sp.$mode]=$(sockperf_summary "$W/sp.$mode.c")
  [ -n "${res[sp.$mode]}" ] || res[sp.$mode]="FAILED (exit $rc): $(grep -aiE 'error' "$W/sp.$mode.c" | tail -n1 | cut -c1-100)"
  res[spc.$mode]=$(counters_line "$W/c.$mode.sp")
  echo "  result:   ${res[sp.$mode]}"
  echo "  counters: ${res[spc.$mode]}"
  if [ "$mode" = xpress ]; then
    echo "  client (sockperf ping-pong) XPRESS_STATS:"; stats_of "$W/sp.$mode.c" | indent
    echo "  server (sockperf server) XPRESS_STATS:"; stats_of "$W/sp.$mode.s" | indent
  fi
}

# run_iperf3 MODE PORT
run_iperf3() {
  local mode=$1 port=$2 pre=() s
  [ "$mode" = tcp ] || pre=(env LD_PRELOAD="$LIB" XPRESS_STATS=1)
  rxe-counters snapshot "$W/c.$mode.ip"
  timeout -k 5 60 "${pre[@]}" iperf3 -s -B "$A1" -p "$port" -1 > "$W/ip.$mode.s" 2>&1 & s=$!
  xp_wait_port "$port" 10 || xp_wait_cm_listen "$port" 5
  timeout -k 5 $((DUR + 30)) "${pre[@]}" iperf3 -c "$A1" -B "$A0" -p "$port" -t "$DUR" > "$W/ip.$mode.c" 2>&1
  local rc=$?
  for _ in {1..50}; do kill -0 "$s" 2>/dev/null || break; sleep 0.1; done
  kill -INT "$s" 2>/dev/null; wait "$s" 2>/dev/null
  res[ip.$mode]=$(iperf3_summary "$W/ip.$mode.c")
  [ -n "${res[ip.$mode]}" ] || res[ip.$mode]="FAILED (exit $rc): $(grep -aiE 'error' "$W/ip.$mode.c" | tail -n1 | cut -c1-100)"
  res[ipc.$mode]=$(counters_line "$W/c.$mode.ip")
  echo "  result:   ${res[ip.$mode]}"
  echo "  counters: ${res[ipc.$mode]}"
  if [ "$mode" = xpress ]; then
    echo "  client (iperf3 -c) XPRESS_STATS:"; stats_of "$W/ip.$mode.c" | indent
    echo "  server (iperf3 -s) XPRESS_STATS:"; stats_of "$W/ip.$mode.s" | indent
  fi
}

echo "xpress demo: unmodified programs, $A0 (veth0/rxe0) -> $A1 (veth1/rxe1), ${DUR} s each, kernel $(uname -r) under TCG"
[ -n "$LIB" ] || echo "xpress half skipped: ${XPRESS_DEMO_WHY:-no library given}"
hr "1a. sockperf ping-pong 64 B over kernel TCP"
run_sockperf tcp 11111
if [ -n "$LIB" ]; then
  hr "1b. the same with LD_PRELOAD=$LIB XPRESS_STATS=1"
  run_sockperf xpress 11112
fi
hr "2a. iperf3, 1 stream, over kernel TCP"
run_iperf3 tcp 5201
if [ -n "$LIB" ]; then
  hr "2b. the same with LD_PRELOAD=$LIB XPRESS_STATS=1"
  run_iperf3 xpress 5202
fi

# The ceiling: perftest over the same rxe pair, no sockets at all.
run_perftest() {  # run_perftest TOOL SIZE ITERS KEY
  local t=$1 sz=$2 n=$3 key=$4 gid=${XP_GID_INDEX:-1} s
  timeout -k 5 60 "$t" -d rxe1 -x "$gid" -s "$sz" -n "$n" -F ${5:-} > "$W/$t.s" 2>&1 & s=$!
  xp_wait_port 18515 10
  timeout -k 5 90 "$t" -d rxe0 -x "$gid" -s "$sz" -n "$n" -F ${5:-} "$A1" > "$W/$t.c" 2>&1
  wait "$s" 2>/dev/null
  if [ "$key" = lat ]; then
    res[pt.lat]=$(awk -v s="$sz" '$1 == s && NF >= 8 { printf "%.1f us typical, %.1f us avg, %.1f us p99 (one way)", $5, $6, $8 }' "$W/$t.c")
  else
    res[pt.bw]=$(awk -v s="$sz" '$1 == s && NF >= 4 { printf "%.2f Gbits/sec", $4 }' "$W/$t.c")
  fi
  [ -n "${res[pt.$key]}" ] || res[pt.$key]="failed: $(tail -n 1 "$W/$t.c")"
}
hr "3. raw verbs (perftest ib_write_lat 64 B, ib_write_bw 64 KiB): the ceiling of any RDMA program here"
run_perftest ib_write_lat 64 1000 lat
run_perftest ib_write_bw 65536 2000 bw --report_gbits
echo "  latency: ${res[pt.lat]}"
echo "  bandwidth: ${res[pt.bw]}"

hr "side by side"
printf '%-22s | %-58s | %s\n' "" "kernel TCP" "xpress (LD_PRELOAD)"
side() {  # side LABEL TCP_KEY XPRESS_KEY [counters]
  local x
  if [ -z "$LIB" ]; then x="not run (no library)"; else x=${res[$3]}; fi
  if [ "${4:-}" = counters ]; then
    printf '%-22s | %-58s | %s\n' "$1" "${res[$2]%%, veth0*}" "${x%%, veth0*}"
  else
    printf '%-22s | %-58s | %s\n' "$1" "${res[$2]}" "$x"
  fi
}
side "sockperf 64 B" sp.tcp sp.xpress
side "  where bytes went" spc.tcp spc.xpress counters
side "iperf3 1 stream" ip.tcp ip.xpress
side "  where bytes went" ipc.tcp ipc.xpress counters
printf '%-22s | %s\n' "raw verbs 64 B" "${res[pt.lat]}"
printf '%-22s | %s\n' "raw verbs 64 KiB bw" "${res[pt.bw]}"
echo
echo "Under emulation (qemu TCG) Soft-RoCE moves bytes several times slower than the kernel's TCP"
echo "over the same veth: raw verbs' bandwidth above is the ceiling for any RDMA program here, so"
echo "compare xpress's iperf3 with it, not with kernel TCP.  The latency rows show what RDMA buys"
echo "(no kernel TCP stack per message); on a real RDMA NIC the ceiling is the NIC's line rate."
echo "rxe packet counters that stay at 0 mean the bytes did not go over RDMA (the connection's"
echo "mode and fallback reason are in the XPRESS_STATS tables above)."
