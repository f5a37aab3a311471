# shellcheck shell=bash
# sockperf TCP ping-pong: an epoll server (default) and a poll() server on two
# ports (feed file), clients using blocking recv and select() over two
# connections; 60000-byte and 64-byte messages, both with --data-integrity.
# Rates are paced (--mps) so the message count per run is known.

SP_SECS=1

# name  mps  client-args (FEED/PORT substituted)
SP_TESTS=(
  "epoll-60000B-integrity 1000 --tcp -i 127.0.0.1 -p PORT -m 60000 --data-integrity"
  "poll-select-2conns-64B 2000 -f FEED -F s -m 64 --data-integrity"
)

# field LINE-PATTERN KEY FILE: the number after KEY= on the first matching line
sp_field() { grep -m1 -- "$1" "$3" | grep -o "$2=[0-9]*" | cut -d= -f2; }

run_mode() {
  local p1 p2 p3 feed=$D/feed.txt
  p1=$(free_port)
  p2=$(free_port)
  p3=$(free_port)
  printf 'T:127.0.0.1:%s\nT:127.0.0.1:%s\n' "$p2" "$p3" >"$feed"

  start_server sockperf-server 60 sockperf server --tcp -i 127.0.0.1 -p "$p1"
  local s1=$SERVER_PID
  start_server sockperf-server-poll 60 sockperf server -f "$feed" -F p
  local s2=$SERVER_PID
  wait_listen sockperf-server "$p1" "$s1"
  wait_listen sockperf-server-poll "$p2" "$s2"
  wait_listen sockperf-server-poll "$p3" "$s2"
  check_mapped sockperf-server "$(server_child "$s1")"
  check_mapped sockperf-server-poll "$(server_child "$s2")"

  local t name mps args all sent recv vsent vrecv want
  for t in "${SP_TESTS[@]}"; do
    read -r name mps args <<<"$t"
    args=${args//PORT/$p1}
    args=${args//FEED/$feed}
    # shellcheck disable=SC2086
    xrun "pp-$name" 20 sockperf ping-pong $args -t "$SP_SECS" --mps "$mps"
    all=$D/pp-$name.all
    cat "$D/pp-$name.out" "$D/pp-$name.err" >"$all"
    sent=$(sp_field '\[Total Run\]' SentMessages "$all")
    recv=$(sp_field '\[Total Run\]' ReceivedMessages "$all")
    vsent=$(sp_field '\[Valid Duration\]' SentMessages "$all")
    vrecv=$(sp_field '\[Valid Duration\]' ReceivedMessages "$all")
    want=$((mps * SP_SECS))
    expect_range "total sent" "$sent" $((want / 4)) $((want + want / 100 + 5))
    expect_range "total received" "$recv" $((${sent:-1} - 1)) "${sent:-0}"
    expect_range "valid-duration sent" "$vsent" 1 "$want"
    expect_eq "valid-duration received" "$vrecv" "$vsent"
    expect_eq "loss/dup/reorder" "$(grep -m1 -o 'dropped messages = [0-9]*; # duplicated messages = [0-9]*; # out-of-order messages = [0-9]*' "$all")" \
      "dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0"
    # (only sockperf's own lines: the xpress statistics table is on stderr too)
    expect_eq "sockperf errors" "$(grep '^sockperf' "$all" | grep -ci 'error\|integrity' || true)" 0
    local complete=yes
    [ ${#PROBLEMS[@]} = 0 ] || complete=no
    verdict "ping-pong $name (${mps} msg/s for ${SP_SECS}s): $sent sent, $recv received, none lost"
    record "$name" "complete=$complete $(grep -m1 -o 'dropped messages = [0-9]*; # duplicated messages = [0-9]*; # out-of-order messages = [0-9]*' "$all")"
  done
  stop_server sockperf-server "$s1" INT
  stop_server sockperf-server-poll "$s2" INT
}
