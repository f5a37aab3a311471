# shellcheck shell=bash
# Many concurrent connections between two asyncio processes (issue 28;
# tests/rdma-programs/scale_pair.py): SCALE_N connections (default 2000; a
# list runs each) open at once, SCALE_ROUNDS echoed exchanges of 1 KiB
# each, every echo checked; first over kernel TCP, then both preloaded.
# Reports per N and mode: time to open all (each after its first
# exchange), total time, peak RSS of both ends, the client's RC queue
# pairs with all connections open, and connections on RDMA by the
# statistics.  Passes when every run finished with every echo right and,
# preloaded, every connection on RDMA.  Not in the default list (run it
# with RDMA_CASES=scale).  BASE_LIB=PATH also runs that library (mode
# xpbase: an earlier build, to compare in one boot); SCALE_PERF=1 records
# a system-wide CPU profile (perf, cpu-clock) of each preloaded run into
# $CD/perf-MODE-N.data.

SCALE_N=${SCALE_N:-2000}
SCALE_ROUNDS=${SCALE_ROUNDS:-3}

# scale_run MODE PORT N: sets SC_LINE (the table's cells)
scale_run() {
  local mode=$1 port=$2 n=$3 srv ok=1 ms open qps crss srss
  start_server "scale-server-$mode-$n" 560 "$mode" "$PY" "$HERE/scale_pair.py" server "$port" "$n"
  srv=$SERVER
  wait_listen "scale-server-$mode-$n" "$port" "$srv" || return 1
  local perf=""
  if [ "$mode" != plain ] && [ -n "${SCALE_PERF:-}" ] && command -v perf >/dev/null; then
    perf record -q -e cpu-clock -F 200 -a -g -o "$T/perf-$mode-$n.data" >/dev/null 2>&1 &
    perf=$!
  fi
  run_client "scale-client-$mode-$n" 500 "$mode" "$PY" "$HERE/scale_pair.py" client "$A1" "$port" "$n" "$SCALE_ROUNDS" 1024 || ok=0
  if [ -n "$perf" ]; then
    kill -INT "$perf" 2>/dev/null
    wait "$perf" 2>/dev/null
    cp "$T/perf-$mode-$n.data" "$CD/" 2>/dev/null
  fi
  end_server "scale-server-$mode-$n" "$srv" $ok
  ms=$(sed -n 's/^ms //p' "$CD/scale-client-$mode-$n.err")
  open=$(sed -n 's/^open_ms //p' "$CD/scale-client-$mode-$n.err")
  qps=$(sed -n 's/^qps //p' "$CD/scale-client-$mode-$n.err")
  crss=$(sed -n 's/^maxrss //p' "$CD/scale-client-$mode-$n.err")
  srss=$(sed -n 's/^maxrss //p' "$CD/scale-server-$mode-$n.err")
  SC_LINE="$n | $mode | ${open:-?} | ${ms:-?} | $((${crss:-0} / 1024)) | $((${srss:-0} / 1024)) | ${qps:-?}"
  if [ $ok = 1 ] && grep -q "^ok $n connections $SCALE_ROUNDS rounds\$" "$CD/scale-client-$mode-$n.out"; then
    pass "scale ($mode): $n concurrent connections x $SCALE_ROUNDS exchanges of 1 KiB: all open in ${open:-?} ms, done in ${ms:-?} ms, RSS client $((${crss:-0} / 1024)) MiB server $((${srss:-0} / 1024)) MiB, client RC QPs ${qps:-?}"
    return 0
  fi
  fail "scale ($mode, $n): $(tail -c 300 "$CD/scale-client-$mode-$n.err" | tr '\n' ' ')"
  return 1
}

run_case() {
  ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
  local n port=19800 rows=()
  for n in $SCALE_N; do
    scale_run plain $port "$n" && rows+=("$SC_LINE | -")
    port=$((port + 1))
    if [ -n "${BASE_LIB:-}" ] && scale_run xpbase $port "$n"; then
      stats_load "scale-server-xpbase-$n"
      local b_r=$S_RDMA b_t=$S_TCP
      stats_load "scale-client-xpbase-$n"
      rows+=("$SC_LINE | client $S_RDMA rdma $S_TCP tcp, server $b_r rdma $b_t tcp")
    fi
    port=$((port + 1))
    if scale_run xp $port "$n"; then
      stats_load "scale-server-xp-$n"
      local s_r=$S_RDMA s_t=$S_TCP
      stats_load "scale-client-xp-$n"
      rows+=("$SC_LINE | client $S_RDMA rdma $S_TCP tcp, server $s_r rdma $s_t tcp")
      if [ "$S_RDMA" = "$n" ] && [ "$s_r" = "$n" ]; then
        pass "scale: all $n connections on RDMA at both ends"
      else
        fail "scale: $n connections: client $S_RDMA on RDMA ($S_TCP tcp: $S_DESC), server $s_r ($s_t tcp)"
      fi
    fi
    port=$((port + 1))
  done
  note "scale: N | mode | all open ms | total ms | client RSS MiB | server RSS MiB | client RC QPs | connections"
  for r in "${rows[@]}"; do note "scale: $r"; done
}
