# shellcheck shell=bash
# sockperf TCP server on $A1; from $A0 a ping-pong with --data-integrity
# (1 KiB messages) and a throughput run (16 KiB messages), 3 s each.

SP_SECS=3

# sp_field PATTERN KEY FILE: the number after KEY= on the first line matching PATTERN
sp_field() { grep -m1 -- "$1" "$3" | grep -o "$2=[0-9]*" | cut -d= -f2; }

run_case() {
  local port=11111 snap all sent recv vsent vrecv n
  start_server sockperf-server 55 xp sockperf server --tcp -i "$A1" -p "$port"
  local srv=$SERVER
  wait_listen sockperf-server "$port" "$srv" || return 1

  snap=$T/snap-pp
  net_snap "$snap"
  if run_client pingpong 20 xp sockperf ping-pong --tcp -i "$A1" -p "$port" -m 1024 -t "$SP_SECS" --data-integrity; then
    all=$T/pp.all
    cat "$CD/pingpong.out" "$CD/pingpong.err" >"$all"
    sent=$(sp_field '\[Total Run\]' SentMessages "$all")
    recv=$(sp_field '\[Total Run\]' ReceivedMessages "$all")
    vsent=$(sp_field '\[Valid Duration\]' SentMessages "$all")
    vrecv=$(sp_field '\[Valid Duration\]' ReceivedMessages "$all")
    local loss errs
    loss=$(grep -m1 -o 'dropped messages = [0-9]*; # duplicated messages = [0-9]*; # out-of-order messages = [0-9]*' "$all")
    errs=$(grep '^sockperf' "$all" | grep -ci 'error\|integrity' || true)
    if [[ ${vsent:-} =~ ^[0-9]+$ ]] && [ "$vsent" -gt 0 ] && [ "$vsent" = "$vrecv" ] && [ "$errs" = 0 ] &&
      [ "$loss" = "dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0" ]; then
      pass "ping-pong 1 KiB --data-integrity ${SP_SECS} s: $sent sent, $recv received, none lost, $(grep -o 'avg-latency=[0-9.]*' "$all" | head -1) us"
    else
      fail "ping-pong 1 KiB --data-integrity: valid-duration sent '$vsent' received '$vrecv', '$loss', $errs error line(s): $(grep -i 'error\|integrity' "$all" | head -2 | tr '\n' ' ')"
    fi
    check_stats_rdma ping-pong pingpong
    check_net ping-pong "$snap" "$(stats_bytes pingpong)" "$(stats_conns pingpong)"
  else
    step_failed "$snap" pingpong
  fi

  snap=$T/snap-tp
  net_snap "$snap"
  if run_client throughput 20 xp sockperf throughput --tcp -i "$A1" -p "$port" -m 16384 -t "$SP_SECS"; then
    all=$T/tp.all
    cat "$CD/throughput.out" "$CD/throughput.err" >"$all"
    n=$(grep -m1 -o 'Total of [0-9]* messages sent' "$all" | grep -o '[0-9]*')
    if [[ ${n:-} =~ ^[0-9]+$ ]] && [ "$n" -gt 0 ] && [ "$(grep '^sockperf' "$all" | grep -ci error || true)" = 0 ]; then
      pass "throughput 16 KiB ${SP_SECS} s: $n messages sent, $(grep -o 'BandWidth is [0-9.]* MBps' "$all")"
    else
      fail "throughput 16 KiB: messages sent '$n': $(grep -i error "$all" | head -2 | tr '\n' ' ')"
    fi
    check_stats_rdma throughput throughput
    check_net throughput "$snap" "$(stats_bytes throughput)" "$(stats_conns throughput)"
  else
    step_failed "$snap" throughput
  fi
  stop_server sockperf-server "$srv" INT
  # Data: the server received every byte the two clients sent (sockperf's
  # throughput mode has no check of its own), by the statistics of both ends.
  local srx ctx=0
  stats_load sockperf-server
  srx=$((S_RRX + S_TRX + S_PRX))
  for n in pingpong throughput; do
    stats_load "$n"
    ctx=$((ctx + S_RTX + S_TTX + S_PTX))
  done
  ok_if "server received every byte the clients sent ($srx)" \
    "server received $srx bytes, the clients sent $ctx" [ "$srx" = "$ctx" -a "$ctx" -gt 0 ]
  check_stats_rdma "server (both runs)" sockperf-server
}
