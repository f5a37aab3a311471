# shellcheck shell=bash
# redis-server forks for BGSAVE while redis-benchmark keeps 20 clients busy
# over RDMA (issue 29; docs/protocol.md §7 "After a fork: who else holds the
# socket").  At the fork every client stream moves to TCP; the parent then
# watches who else holds each socket and logs when the BGSAVE child has let
# go.  Checked: every request answered (no error from redis-benchmark), the
# parent found every moved socket its own again after the child exited,
# and the kernel's byte counts told it that the child read and wrote none
# of them (stream/fork_bytes.h: the first step of their return).
# Reported: rxe packets against TCP segments in 8 s of traffic before the
# BGSAVE and in the 8 s after the child exited (a stream moved at a fork
# stays on plain TCP: its return is not built, docs/protocol.md §7 "Not
# built"), and how long after the child was done the parent saw its
# sockets free.

RF_CLIENTS=20

# seg_window LABEL SECS: rxe packets and TCP segments on the veth over SECS
seg_window() {
  local snap=$T/snap-$1
  net_snap "$snap"
  sleep "$2"
  net_delta "$snap"
  local rxe=$((${ND[rxe0.sent_pkts]:-0} + ${ND[rxe1.sent_pkts]:-0}))
  local tcp=$((${ND[tc.veth0.tcp_pkts]:-0} + ${ND[tc.veth1.tcp_pkts]:-0}))
  local tcpb=$((${ND[tc.veth0.tcp_bytes]:-0} + ${ND[tc.veth1.tcp_bytes]:-0}))
  local roce=$((${ND[tc.veth0.roce_bytes]:-0} + ${ND[tc.veth1.roce_bytes]:-0}))
  note "$1: in $2 s, rxe sent $rxe packets (RoCE $(hb "$roce")), TCP $tcp segments ($(hb "$tcpb")) on the veth"
  WIN_RXE=$rxe WIN_TCP=$tcp
}

run_case() {
  local port=16380 name=redisfork
  RDMA_LOG_LEVEL=$(log_at info) start_server "$name-srv" 150 xp redis-server --bind "$A1" --port "$port" \
    --save '' --appendonly no --dir "$T" --protected-mode no --logfile '' --daemonize no
  local srv=$SERVER
  wait_listen "$name-srv" "$port" "$srv" || return 1
  local cli=(env -u LD_PRELOAD redis-cli -h "$A1" -p "$port")

  # The load: one SET run on the same 20 connections, far longer than the
  # case (-l would open new connections for every round), stopped below.
  prefix xp "$name-bench"
  timeout -k 3 100 "${PRE[@]}" redis-benchmark -h "$A1" -p "$port" -c $RF_CLIENTS -P 16 -d 256 \
    -t set -n 100000000 -q >"$CD/$name-bench.out" 2>"$CD/$name-bench.err" </dev/null &
  local bench=$!
  echo "$bench" >>"$CD/pids"
  SERVERS+=("$bench")
  sleep 5
  seg_window "before the BGSAVE" 8
  local before_rxe=$WIN_RXE before_tcp=$WIN_TCP

  local t0 t1 n=0
  t0=$(usecs)
  "${cli[@]}" BGSAVE >"$CD/bgsave.out" 2>&1
  trace "BGSAVE: $(cat "$CD/bgsave.out")"
  while [ $n -lt 300 ]; do
    "${cli[@]}" INFO persistence 2>/dev/null | grep -q '^rdb_bgsave_in_progress:0' && break
    sleep 0.1
    n=$((n + 1))
  done
  t1=$(usecs)
  note "BGSAVE: '$(tr -d '\r\n' <"$CD/bgsave.out")', the child was done after $(((t1 - t0) / 1000)) ms"
  seg_window "after the child exited" 8
  local after_rxe=$WIN_RXE after_tcp=$WIN_TCP

  kill -INT "$bench" 2>/dev/null
  wait "$bench" 2>/dev/null
  local errs
  errs=$(grep -ci 'error' "$CD/$name-bench.err" "$CD/$name-bench.out" 2>/dev/null | awk -F: '{ s += $NF } END { print s + 0 }')
  ok_if "redis-benchmark ($RF_CLIENTS clients) across the BGSAVE fork: no error" \
    "redis-benchmark across the BGSAVE fork: $errs error line(s): $(grep -i error "$CD/$name-bench".* | head -3 | tr '\n' ' ')" \
    test "$errs" = 0
  stop_server "$name-srv" "$srv" TERM

  local moved freed back alone other
  moved=$(grep -ho 'fork: [0-9]* stream(s) moved.*' "$CD"/xpress."$name"-srv.*.log 2>/dev/null | head -n 1)
  # Log lines carry the wall clock: when the first and the last socket were
  # seen free, against the child's last log line (its exit follows it).
  local seen last_c done_at
  seen=$(cat "$CD"/xpress."$name"-srv.*.log 2>/dev/null | grep 'no other process holds the socket' |
    awk 'NR == 1 { a = $2 } { b = $2 } END { if (NR) print a, b }')
  last_c=$(grep -h '^[0-9]*:C ' "$CD/$name-srv.out" | tail -n 1 | awk '{ print $2, $3, $4, $5 }')
  done_at=$(date -d "$last_c" +%s.%3N 2>/dev/null)
  if [ -n "$seen" ] && [ -n "$done_at" ]; then
    note "the parent saw the sockets free $(awk -v s="$seen" -v d="$done_at" 'BEGIN { split(s, t, " "); printf "%.0f-%.0f", (t[1] - d) * 1000, (t[2] - d) * 1000 }') ms after the child's last log line ('${last_c}'); INFO said the BGSAVE was over $(((t1 - t0) / 1000)) ms after it started"
  fi
  freed=$(cat "$CD"/xpress."$name"-srv.*.log 2>/dev/null | grep -c 'no other process holds the socket since the fork')
  back=$(cat "$CD"/xpress."$name"-srv.*.log 2>/dev/null | grep -c 'back on RDMA after')
  alone=$(cat "$CD"/xpress."$name"-srv.*.log 2>/dev/null | grep -c 'no other process read or wrote it')
  other=$(cat "$CD"/xpress."$name"-srv.*.log 2>/dev/null | grep -c 'another process read or wrote it')
  note "the move at the fork: ${moved:-not logged}"
  ok_if "after the BGSAVE child exited, the parent found $freed socket(s) its own again (of $RF_CLIENTS clients)" \
    "after the BGSAVE child exited, the parent found $freed socket(s) its own again (want $RF_CLIENTS)" \
    test "$freed" -ge $RF_CLIENTS
  ok_if "the kernel's byte counts: the BGSAVE child read and wrote none of the $alone moved stream(s) ($other used by another process)" \
    "the kernel's byte counts: $alone moved stream(s) untouched by the child, $other used by another process (want $RF_CLIENTS and 0)" \
    test "$alone" -ge $RF_CLIENTS -a "$other" = 0
  note "rxe packets / TCP segments: $before_rxe / $before_tcp before the BGSAVE, $after_rxe / $after_tcp in the 8 s after the child exited; streams back on RDMA: $back (the return of a stream moved at a fork is not built)"
}
