# shellcheck shell=bash
# A peer without xpress: a preloaded client against a plain server and a
# plain client against a preloaded server, with bulk.py (16 MiB, sha256 on
# both sides) and iperf3 (-n 16M).  The data must arrive intact over TCP,
# and the preloaded side's statistics must say tcp, reason
# peer_not_accelerated, for every connection.
# And a statically linked server (busybox httpd: no dynamic loader, so
# LD_PRELOAD has no effect, as for Go programs), started with the preload in
# its environment: a preloaded curl makes 5 connections to it (busybox
# closes each after its response); every body intact, every connection on
# TCP, rdma_cm asked at most twice, the later connections answered by the
# negative cache (peer_not_accelerated), and the whole no slower than a
# plain curl's by more than STATIC_SLACK_S.

FB=16M
FB_BYTES=$((16 * 1024 * 1024))

# bulk_step LABEL SERVER-MODE CLIENT-MODE PORT CHECKED-NAME
bulk_step() {
  local label=$1 smode=$2 cmode=$3 port=$4 checked=$5 snap
  start_server "recv-$label" 60 "$smode" "$PY" "$HERE/bulk.py" recv --bind "$A1" --port "$port" --timeout 40
  local srv=$SERVER
  wait_listen "recv-$label" "$port" "$srv" || return 1
  snap=$T/snap-$label
  net_snap "$snap"
  local ok=1
  run_client "send-$label" 40 "$cmode" "$PY" "$HERE/bulk.py" send --host "$A1" --port "$port" --bytes "$FB" --timeout 20 || ok=0
  local secs=$CLIENT_SECS
  end_server "recv-$label" "$srv" $ok
  local s r
  s=$(cat "$CD/send-$label.out" 2>/dev/null)
  r=$(cat "$CD/recv-$label.out" 2>/dev/null)
  if [ -n "$s" ] && [ "$s" = "$r" ] && [ "${s#bytes "$FB_BYTES" }" != "$s" ]; then
    pass "$label: bulk.py 16 MiB in $secs s, sender and receiver agree: $s"
  else
    fail "$label: bulk.py 16 MiB: sender '${s:-nothing} $(tail -c 200 "$CD/send-$label.err" | tr '\n' ' ')', receiver '${r:-nothing} $(tail -c 200 "$CD/recv-$label.err" | tr '\n' ' ')'"
  fi
  if [ $ok = 1 ]; then
    check_stats_fallback "$label" "$checked"
    check_net_tcp "$label" "$snap" "$FB_BYTES"
    ok_if "$label: no exit warning for a peer without xpress" \
      "$label: exit warning for a peer without xpress: $(cat "$CD"/xpress.*-"$label".*.log "$CD"/*-"$label".err 2>/dev/null | grep -m1 'exit: no connection')" \
      no_exit_warning "$CD"/xpress.*-"$label".*.log "$CD"/*-"$label".err
  else
    step_failed "$snap" "$checked"
  fi
}

# iperf_step LABEL SERVER-MODE CLIENT-MODE PORT CHECKED-NAME
iperf_step() {
  local label=$1 smode=$2 cmode=$3 port=$4 checked=$5 snap js
  start_server "iperf3-server-$label" 60 "$smode" iperf3 -s -1 -B "$A1" -p "$port"
  local srv=$SERVER
  wait_listen "iperf3-server-$label" "$port" "$srv" || return 1
  snap=$T/snap-$label
  net_snap "$snap"
  local ok=1 got=$FB_BYTES
  if run_client "iperf3-client-$label" 20 "$cmode" iperf3 -c "$A1" -p "$port" -n "$FB" -J; then
    js=$CD/iperf3-client-$label.out
    local sent err
    sent=$(jq -r '.end.sum_sent.bytes // "none"' "$js" 2>/dev/null)
    # The iperf3 server stops reading at TEST_END and closes; what was
    # still in the client's send buffer is dropped (plain TCP does the
    # same).  The veth must carry what the server read.
    got=$(jq -r '.end.sum_received.bytes // 0' "$js" 2>/dev/null)
    [[ $got =~ ^[0-9]+$ ]] && [ "$got" -gt 0 ] || got=$FB_BYTES
    err=$(jq -r '.error // "none"' "$js" 2>/dev/null)
    ok_if "$label: iperf3 -n 16M in $CLIENT_SECS s: sent $sent bytes" "$label: iperf3: error '$err', sent '$sent' (want $FB_BYTES)" \
      fb_sent_ok "$err" "$sent"
  else
    ok=0
  fi
  end_server "iperf3-server-$label" "$srv" $ok
  if [ $ok = 1 ]; then
    check_stats_fallback "$label" "$checked"
    check_net_tcp "$label" "$snap" "$got"
  else
    step_failed "$snap" "$checked"
  fi
}

# iperf3 -n may overshoot by a 128 KiB block (it checks after each block;
# seen on plain kernel TCP as well).
fb_sent_ok() {
  [ "$1" = none ] && [[ $2 =~ ^[0-9]+$ ]] && [ "$2" -ge "$FB_BYTES" ] && [ "$2" -le $((FB_BYTES + 131072)) ]
}

STATIC_N=5
STATIC_SLACK_S=3

static_ok() { [ -z "$1" ] && [ "$2" = "$STATIC_N" ]; }
short_cached() { [ "$1" -ge 1 ] && [ "$1" -le 2 ] && [ "$S_PNA" -ge 1 ]; }
static_cached() { [ "$1" -ge 1 ] && [ "$1" -le 2 ] && [ $((S_PNA + S_CDU)) -eq "$STATIC_N" ]; }
# The engine's start-up line (at info and above; the process banner before
# it only says the engine lists them) gives each port's state, link layer
# and GID count.
device_line_ok() { grep -qE '^info: RDMA devices: rxe[0-9]+ port 1 active Ethernet [1-9][0-9]* GIDs?' <<<"$1"; }
# Connections to a peer without xpress are no fault: at the default level
# (warn) the exit hint stays off the program's stderr and the log.
no_exit_warning() { ! cat "$@" 2>/dev/null | grep -q 'exit: no connection went over RDMA'; }

# static_step PORT
static_step() {
  local port=$1 label=static-server snap url i args=() plain_secs bad="" tries
  local bb
  bb=$(command -v busybox)
  if [ -z "$bb" ] || ldd "$bb" >/dev/null 2>&1; then
    fail "$label: no statically linked busybox (make deps: busybox-static)"
    return 1
  fi
  mkdir -p "$T/www"
  head -c $((4 * 1024 * 1024)) /dev/urandom >"$T/www/f.bin"
  start_server "httpd-$label" 80 xp "$bb" httpd -f -p "$A1:$port" -h "$T/www"
  local srv=$SERVER
  wait_listen "httpd-$label" "$port" "$srv" || return 1
  url=http://$A1:$port/f.bin
  for i in $(seq "$STATIC_N"); do args+=(-o "$T/got.$i" "$url"); done
  if ! run_client "curl-plain-$label" 30 plain curl -sS --fail "${args[@]}"; then
    stop_server "httpd-$label" "$srv" TERM
    return 1
  fi
  plain_secs=$CLIENT_SECS
  rm -f "$T"/got.*
  snap=$T/snap-$label
  net_snap "$snap"
  # debug: the log shows each rdma_cm attempt ("rdma_cm: connect").
  if RDMA_LOG_LEVEL=debug run_client "curl-$label" 30 xp curl -sS --fail -w '%{num_connects}\n' "${args[@]}"; then
    for i in $(seq "$STATIC_N"); do cmp -s "$T/got.$i" "$T/www/f.bin" || bad+=" $i"; done
    local conns
    conns=$(awk '{s += $1} END {print s + 0}' "$CD/curl-$label.out")
    ok_if "$label: preloaded curl fetched 4 MiB $STATIC_N times from busybox httpd (static) in $CLIENT_SECS s, every body intact, over $conns connection(s)" \
      "$label: bodies that differ from the file:${bad:-none}; connections $conns (want $STATIC_N)" \
      static_ok "$bad" "$conns"
    check_stats_fallback "$label" "curl-$label"
    check_net_tcp "$label" "$snap" $((STATIC_N * 4 * 1024 * 1024))
    # Two attempts find nobody listening (the first connection's, then its
    # retry or the next connection's, held until 50 ms after the first:
    # stream/negative_cache.h); from then on the negative cache answers,
    # peer_not_accelerated without an attempt.  A fetch that ends while it
    # is held asks nobody and counts as closed_during_upgrade.
    tries=$(cat "$CD"/xpress.curl-"$label".*.log 2>/dev/null | grep -c 'rdma_cm: connect ')
    stats_load "curl-$label"
    ok_if "$label: rdma_cm asked $tries times for $STATIC_N connections, then the negative cache: $S_PNA with peer_not_accelerated, $S_CDU closed while held" \
      "$label: rdma_cm asked $tries times for $STATIC_N connections (want 1 or 2), $S_PNA with peer_not_accelerated + $S_CDU closed_during_upgrade (want $STATIC_N)" \
      static_cached "$tries"
    local devline
    devline=$(cat "$CD"/xpress.curl-"$label".*.log 2>/dev/null | grep -m1 -o 'info: RDMA devices: .*')
    ok_if "$label: the engine's start-up line: $devline" \
      "$label: the engine's start-up line: '${devline:-none}' (want each port's state, link layer, GIDs)" \
      device_line_ok "$devline"
    local slow
    slow=$(awk -v x="$CLIENT_SECS" -v p="$plain_secs" -v s="$STATIC_SLACK_S" 'BEGIN {print (x > p + s) ? 1 : 0}')
    ok_if "$label: fallback is quick: $CLIENT_SECS s preloaded against $plain_secs s plain" \
      "$label: preloaded curl took $CLIENT_SECS s against $plain_secs s plain (slack $STATIC_SLACK_S s)" \
      [ "$slow" = 0 ]
  else
    step_failed "$snap" "curl-$label"
  fi
  # Connections that close as soon as rdma_cm refused them, before their
  # own retry: the third must be answered by the negative cache (two
  # attempts at most); each used to try again.
  local name=short-$label
  if RDMA_LOG_LEVEL=debug run_client "$name" 30 xp "$PY" "$HERE/short_conns.py" "$A1" "$port" \
    "$CD/xpress.$name.*.log" 3; then
    tries=$(cat "$CD"/xpress."$name".*.log 2>/dev/null | grep -c 'rdma_cm: connect ')
    stats_load "$name"
    ok_if "$label: 3 connections closed at rdma_cm's refusal: $tries attempts, $S_PNA with peer_not_accelerated ($(cat "$CD/$name.out"))" \
      "$label: 3 connections closed at rdma_cm's refusal: $tries attempts (want <= 2), $S_PNA with peer_not_accelerated (want >= 1) ($(cat "$CD/$name.out"))" \
      short_cached "$tries"
  fi
  stop_server "httpd-$label" "$srv" TERM
  rm -rf "$T/www" "$T"/got.*
}

# hint_step PORT: an upgrade with an xpress peer that fails on a host with a
# device is what the exit hint is a warn for: a preloaded server whose
# program reads 8 s late, a preloaded client that waits at most 300 ms for
# it (slow_reader.py; 8 s: an engine thread starved for seconds under TCG on
# a loaded host still sees its deadline pass first).  The bytes arrive over TCP; the client's log has the
# warn line, with handshake_timeout among its reasons, once.
one_on_tcp() { [ "$S_RDMA" = 0 ] && [ "$S_TCP" = 1 ]; }
hint_step() {
  local port=$1 label=slow-reader srv warns
  start_server "serve-$label" 40 xp "$PY" "$HERE/slow_reader.py" serve "$A1" "$port" 8
  srv=$SERVER
  wait_listen "serve-$label" "$port" "$srv" || return 1
  run_client "warmup-$label" 20 plain "$PY" "$HERE/slow_reader.py" warmup "$A1" "$port" || {
    stop_server "serve-$label" "$srv" TERM
    return 1
  }
  if run_client "client-$label" 30 xp env XPRESS_HANDSHAKE_TIMEOUT_MS=300 XPRESS_PROGRAM_WAIT_MS=300 \
    "$PY" "$HERE/slow_reader.py" client "$A1" "$port"; then
    end_server "serve-$label" "$srv" 1
    ok_if "$label: a server program that reads 8 s late: bytes intact over TCP ($(cat "$CD/client-$label.out"))" \
      "$label: echo '$(cat "$CD/client-$label.out" 2>/dev/null)' (want 'echo ok')" \
      grep -qx 'echo ok' "$CD/client-$label.out"
    stats_load "client-$label"
    ok_if "$label: client stats: on tcp: $S_DESC" "$label: client stats: want 1 connection on tcp, none on rdma: $S_DESC" \
      one_on_tcp
    warns=$(cat "$CD"/xpress.client-"$label".*.log 2>/dev/null | grep -c 'warn: exit: no connection went over RDMA (.*handshake_timeout=1')
    ok_if "$label: the client's exit hint is a warn naming handshake_timeout, once" \
      "$label: $warns warn-level exit hints naming handshake_timeout in the client's log (want 1): $(cat "$CD"/xpress.client-"$label".*.log 2>/dev/null | tail -c 600 | tr '\n' ' ')" \
      [ "$warns" = 1 ]
  else
    stop_server "serve-$label" "$srv" TERM
  fi
}

run_case() {
  hint_step 19105
  static_step 19104
  bulk_step xp-client-plain-server plain xp 19100 send-xp-client-plain-server
  bulk_step plain-client-xp-server xp plain 19101 recv-plain-client-xp-server
  iperf_step iperf3-xp-client-plain-server plain xp 19102 iperf3-client-iperf3-xp-client-plain-server
  iperf_step iperf3-plain-client-xp-server xp plain 19103 iperf3-server-iperf3-plain-client-xp-server
}
