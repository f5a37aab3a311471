# shellcheck shell=bash
# iperf3 server + client over loopback: byte-counted transfers (-n) so the
# amounts are exact; forward, reverse, parallel streams, sendfile (-Z) and
# small writes.  The sender must report exactly the requested bytes; the
# receiver's count is not exact in iperf3 (it stops counting when the test-end
# message arrives, with data still queued), so it is checked to be in (0, sent].
# With -P 4 each stream checks -n after its own 128 KiB block, so the total
# may overshoot by up to 4 blocks (seen under load, with or without xpress).

# name  expected-bytes  client options
IPERF_TESTS=(
  "forward 67108864 -n 64M"
  "reverse 67108864 -R -n 64M"
  "parallel4 67108864 -P 4 -n 64M"
  "zerocopy 67108864 -Z -n 64M"
  "smallwrites 4000000 -l 1000 -n 4000000"
)

run_mode() {
  local port
  port=$(free_port)
  start_server iperf3-server 60 iperf3 -s -B 127.0.0.1 -p "$port" -J
  local srv=$SERVER_PID
  wait_listen iperf3-server "$port" "$srv"
  check_mapped iperf3-server "$(server_child "$srv")"

  local t name want opts js sent recv
  for t in "${IPERF_TESTS[@]}"; do
    read -r name want opts <<<"$t"
    # shellcheck disable=SC2086
    xrun "client-$name" 30 iperf3 -c 127.0.0.1 -p "$port" -J $opts
    js=$D/client-$name.out
    sent=$(jq -r '.end.sum_sent.bytes' "$js")
    recv=$(jq -r '.end.sum_received.bytes' "$js")
    expect_eq error "$(jq -r '.error // "none"' "$js")" none
    local over=0 shown=$sent
    [ "$name" = parallel4 ] && over=$((4 * 131072))
    if [ "$over" -gt 0 ]; then
      expect_range sent "$sent" "$want" "$((want + over))"
      [[ $sent =~ ^[0-9]+$ ]] && [ "$sent" -ge "$want" ] && [ "$sent" -le $((want + over)) ] && shown="$want+"
    else
      expect_eq sent "$sent" "$want"
    fi
    expect_range received "$recv" 1 "$((want + over))"
    verdict "client $name (iperf3 -c $opts): $sent bytes sent"
    record "client.$name" "sent=$shown streams=$(jq -r '.start.test_start.num_streams' "$js") reverse=$(jq -r '.start.test_start.reverse' "$js")"
  done

  # The server prints one JSON report per test; stop it to flush the last one.
  stop_server iperf3-server "$srv" TERM 1 # iperf3 exits 1 when interrupted
  local out=$D/iperf3-server.out n i=0
  n=$(jq -s '[.[] | select(.end.sum_sent)] | length' "$out" 2>/dev/null || echo unparsable)
  expect_eq reports "$n" "${#IPERF_TESTS[@]}"
  for t in "${IPERF_TESTS[@]}"; do
    read -r name want opts <<<"$t"
    sent=$(jq -s -r "[.[] | select(.end.sum_sent)][$i].end.sum_sent.bytes" "$out" 2>/dev/null || echo unparsable)
    recv=$(jq -s -r "[.[] | select(.end.sum_sent)][$i].end.sum_received.bytes" "$out" 2>/dev/null || echo unparsable)
    local over=0 shown=$sent
    [ "$name" = parallel4 ] && over=$((4 * 131072))
    if [ "$name" = reverse ]; then
      expect_eq "$name sent" "$sent" "$want"
    else
      expect_range "$name received" "$recv" 1 "$((want + over))"
    fi
    [ "$over" -gt 0 ] && [[ $sent =~ ^[0-9]+$ ]] && [ "$sent" -ge "$want" ] && [ "$sent" -le $((want + over)) ] && shown="$want+"
    record "server.$name" "sent=$shown"
    i=$((i + 1))
  done
  verdict "server: a JSON report per test with the expected byte counts"
}
