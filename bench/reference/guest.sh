#!/usr/bin/env bash
# Reference numbers for the Soft-RoCE test bed, run INSIDE the VM by
# bench/softroce-reference.sh: raw verbs (perftest), kernel TCP (sockperf,
# iperf3) and rsocket's preload (same programs) between 10.77.0.1 and
# 10.77.0.2, one after the other in one boot so they can be compared.
# stdout: the Markdown table; stderr: progress and the raw tool output of
# failed cases.  Every command has a deadline; a failure is a table row.
set -uo pipefail
: "${XP_SOFTROCE:?run inside the VM (bench/softroce-reference.sh)}"
source "$XP_SOFTROCE/faults.sh"
A0=$XP_ADDR0 A1=$XP_ADDR1 GID=$XP_GID_INDEX
RS=${RSPRELOAD:-/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so}
FIX=${RS_SENDTO_FIX:-}  # bench/reference/rs-sendto-fix.c, built by the host script
DUR=${BENCH_SECONDS:-5}
W=$(mktemp -d)
rows=()
row() { rows+=("| $1 | $2 | $3 | $4 | $5 |"); echo "[bench] $1 / $2: $4" >&2; }
err_of() {  # the most telling line of a failed run's log
  grep -aiE 'error|fail|abort|smash|unsupported|not supported|refused|terminated' "$1" | grep -av '^\s*$' | tail -n 1 | cut -c1-140 | tr '|' '/'
}
dump() { echo "[bench] --- $1" >&2; tail -n 15 "$2" | sed 's/^/[bench]   /' >&2; }

srv_pid=""
server() {  # server LOG CMD...: background server with a deadline
  local log=$1; shift
  timeout -k 5 120 "$@" > "$log" 2>&1 &
  srv_pid=$!
}
stop_server() {
  [ -n "$srv_pid" ] || return 0
  for _ in {1..20}; do kill -0 "$srv_pid" 2>/dev/null || break; sleep 0.1; done
  kill "$srv_pid" 2>/dev/null; wait "$srv_pid" 2>/dev/null; srv_pid=""
}
trap stop_server EXIT

# ---- raw verbs: perftest, RC, GID index of the IPv4 address --------------------
# Latency tests print one-way latency (half the round trip).
perf_lat() {  # perf_lat TOOL SIZE ITERS
  local t=$1 s=$2 n=$3 out
  server "$W/$t.s" "$t" -d rxe1 -x "$GID" -s "$s" -n "$n" -F
  xp_wait_port 18515 10
  if timeout -k 5 90 "$t" -d rxe0 -x "$GID" -s "$s" -n "$n" -F "$A1" > "$W/$t.c" 2>&1 &&
     out=$(awk -v s="$s" '$1 == s && NF >= 8 { printf "%.1f / %.1f / %.1f", $5, $6, $8 }' "$W/$t.c") && [ -n "$out" ]; then
    row "raw verbs \`$t\` $s B, $n iters" "rxe0 -> rxe1, RC" "one-way latency, us (typical / avg / p99)" "$out" "perftest; avg includes TCG scheduling outliers"
  else
    dump "$t" "$W/$t.c"; row "raw verbs \`$t\` $s B" "rxe0 -> rxe1, RC" "one-way latency, us" "FAILED" "$(err_of "$W/$t.c")"
  fi
  stop_server
}
perf_bw() {  # perf_bw TOOL SIZE ITERS
  local t=$1 s=$2 n=$3 out
  server "$W/$t.s" "$t" -d rxe1 -x "$GID" -s "$s" -n "$n" -F --report_gbits
  xp_wait_port 18515 10
  if timeout -k 5 120 "$t" -d rxe0 -x "$GID" -s "$s" -n "$n" -F --report_gbits "$A1" > "$W/$t.c" 2>&1 &&
     out=$(awk -v s="$s" '$1 == s && NF >= 4 { printf "%.2f", $4 }' "$W/$t.c") && [ -n "$out" ]; then
    row "raw verbs \`$t\` $((s / 1024)) KiB, $n iters" "rxe0 -> rxe1, RC" "bandwidth, Gb/s (average)" "$out" "perftest"
  else
    dump "$t" "$W/$t.c"; row "raw verbs \`$t\` $((s / 1024)) KiB" "rxe0 -> rxe1, RC" "bandwidth, Gb/s" "FAILED" "$(err_of "$W/$t.c")"
  fi
  stop_server
}

# ---- sockperf ping-pong 64 B (one-way latency = RTT / 2, blocking recvfrom) ----
# sockperf PATH_LABEL PORT WAIT PRELOAD: WAIT is xp_wait_port (kernel TCP
# listener) or xp_wait_cm_listen (rsocket listens through rdma_cm).
sockperf_pp() {
  local label=$1 port=$2 wait=$3 pre=$4 note=$5 tag out
  tag=sockperf-$port
  server "$W/$tag.s" env ${pre:+LD_PRELOAD=$pre} sockperf server --tcp -i "$A1" -p "$port"
  "$wait" "$port" 10
  if timeout -k 5 $((DUR + 40)) env ${pre:+LD_PRELOAD=$pre} sockperf ping-pong --tcp -i "$A1" -p "$port" \
       --client_ip "$A0" -m 64 -t "$DUR" > "$W/$tag.c" 2>&1 &&
     out=$(sed 's/\x1b\[[0-9;]*m//g' "$W/$tag.c" | awk '
       /avg-latency=/ { sub(/.*avg-latency=/, ""); avg = $1 + 0 }
       /percentile 50.000 =/ { p50 = $NF } /percentile 99.000 =/ { p99 = $NF }
       END { if (avg > 0) printf "%.1f / %.1f / %.1f", p50, avg, p99 }') && [ -n "$out" ]; then
    row "sockperf ping-pong 64 B, ${DUR} s" "$label" "one-way latency, us (p50 / avg / p99)" "$out" "$note"
  else
    dump "$tag" "$W/$tag.c"
    row "sockperf ping-pong 64 B" "$label" "one-way latency, us" "FAILED" "$(err_of "$W/$tag.c")${note:+; $note}"
  fi
  stop_server
}

# ---- iperf3, one stream ----------------------------------------------------------
iperf3_bw() {
  local label=$1 port=$2 wait=$3 pre=$4 note=$5 tag out rc=0
  tag=iperf3-$port
  server "$W/$tag.s" env ${pre:+LD_PRELOAD=$pre} iperf3 -s -B "$A1" -p "$port" -1
  "$wait" "$port" 10
  timeout -k 5 $((DUR + 25)) env ${pre:+LD_PRELOAD=$pre} iperf3 -c "$A1" -B "$A0" -p "$port" -t "$DUR" -J \
    > "$W/$tag.c" 2> "$W/$tag.e" || rc=$?
  stop_server  # before reading its log: iperf3 buffers stdout until exit
  out=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.2f" % (d["end"]["sum_received"]["bits_per_second"] / 1e9))' \
          "$W/$tag.c" 2>/dev/null || true)
  if [ $rc = 0 ] && [ -n "$out" ]; then
    row "iperf3 1 stream, ${DUR} s" "$label" "throughput, Gb/s (received)" "$out" "$note"
  else
    local why
    # iperf3 -J repeats the "error" key; keep every distinct message, in order.
    why=$(python3 -c '
import json, sys
errs = []
def hook(pairs):
    for k, v in pairs:
        if k == "error" and v not in errs: errs.append(v)
    return dict(pairs)
json.load(open(sys.argv[1]), object_pairs_hook=hook)
print("; then ".join(errs))' "$W/$tag.c" 2>/dev/null || true)
    cat "$W/$tag.e" >> "$W/$tag.c"
    dump "$tag" "$W/$tag.c"
    [ -n "$why" ] || why=$(err_of "$W/$tag.c")
    [ $rc != 124 ] || why="client got no result within $((DUR + 25)) s, killed${why:+ (errors: $why)}"
    # Did any payload reach the server? (iperf3 prints KBytes/MBytes/GBytes per interval.)
    grep -qE 'sec +[0-9.]+ [KMG]Bytes' "$W/$tag.s" || why="$why; server received 0 bytes"
    [ -n "$why" ] || why="exit status $rc"
    row "iperf3 1 stream" "$label" "throughput, Gb/s" "FAILED" "$why${note:+; $note}"
  fi
}

# ---- rstream: rsocket's own API, no preload (what rsocket can do at best) -------
rstream_case() {  # rstream_case SIZE COUNT PORT METRIC
  local s=$1 c=$2 port=$3 out
  server "$W/rstream-$port.s" rstream -b "$A1" -S "$s" -C "$c" -p "$port"
  xp_wait_cm_listen "$port" 10
  if timeout -k 5 90 rstream -s "$A1" -b "$A0" -S "$s" -C "$c" -p "$port" > "$W/rstream-$port.c" 2>&1 &&
     out=$(awk '$1 == "custom" { print $(NF - 1), $NF }' "$W/rstream-$port.c") && [ -n "$out" ]; then
    read -r gbs us <<<"$out"
    row "rstream ping-pong $s B x $c" "rsocket API (no preload)" "one-way us per transfer; Gb/s (both directions)" "$us; $gbs" "rdmacm-utils rstream, blocking calls"
  else
    dump rstream "$W/rstream-$port.c"; row "rstream ping-pong $s B x $c" "rsocket API" "-" "FAILED" "$(err_of "$W/rstream-$port.c")"
  fi
  stop_server
}

echo "[bench] kernel $(uname -r), $(nproc) vCPUs (TCG), ${DUR} s per timed case" >&2
perf_lat ib_send_lat 64 1000
perf_lat ib_write_lat 64 1000
perf_bw ib_write_bw 65536 1000
perf_bw ib_send_bw 65536 1000
sockperf_pp "kernel TCP over veth" 11111 xp_wait_port "" ""
iperf3_bw "kernel TCP over veth" 5201 xp_wait_port "" ""
sockperf_pp "rsocket preload" 11112 xp_wait_cm_listen "$RS" "plain LD_PRELOAD=librspreload.so"
if [ -n "$FIX" ] && [ -f "$FIX" ]; then
  sockperf_pp "rsocket preload + sendto shim" 11113 xp_wait_cm_listen "$FIX:$RS" \
    "bench/reference/rs-sendto-fix.c drops the address on connected sockets"
else
  row "sockperf ping-pong 64 B" "rsocket preload + sendto shim" "-" "SKIPPED" "shim not built (needs gcc)"
fi
iperf3_bw "rsocket preload" 5202 xp_wait_cm_listen "$RS" "plain LD_PRELOAD=librspreload.so"
rstream_case 64 1000 7501
rstream_case 65536 1000 7502

echo "| case | path | metric | result | notes |"
echo "|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
