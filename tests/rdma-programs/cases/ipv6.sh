# shellcheck shell=bash
# Native IPv6: a receiver on an AF_INET6 socket bound to `::` takes two
# senders connecting to $B1 (fd77::2) from $B0 (fd77::1); the first
# connection's rdma_cm request names its IPv6 4-tuple (docs/protocol.md §1),
# the second attaches over the channel or asks rdma_cm again.  Both
# connections upgrade over the IPv6 GIDs, every byte checked by sha256, the
# rxe counters carry them.

run_case() {
  local port=19500 bytes=$((16 * 1024 * 1024)) snap srv ok=1
  local B1=${XP_ADDR6_1:-fd77::2}
  # As dualstack: the first connection waits for the server's rdma_cm port
  # (opened at its first accept) and its 50 ms retry.
  local SWITCH_MAX_PCT=80
  start_server v6-recv 80 xp "$PY" "$HERE/bulk.py" recv --bind :: --port "$port" --count 2 --timeout 30
  srv=$SERVER
  wait_listen v6-recv "$port" "$srv" || return 1
  snap=$T/snap
  net_snap "$snap"
  run_client v6-send-1 40 xp "$PY" "$HERE/bulk.py" send --host "$B1" --port "$port" --bytes 16M --timeout 20 || ok=0
  run_client v6-send-2 40 xp "$PY" "$HERE/bulk.py" send --host "$B1" --port "$port" --bytes 16M --timeout 20 || ok=0
  end_server v6-recv "$srv" $ok
  local s1 s2 r
  s1=$(cat "$CD/v6-send-1.out" 2>/dev/null)
  s2=$(cat "$CD/v6-send-2.out" 2>/dev/null)
  r=$(cat "$CD/v6-recv.out" 2>/dev/null)
  if [ -n "$s1" ] && [ -n "$s2" ] && [ "$r" = "$s1"$'\n'"$s2" ] && [ "${s1#bytes "$bytes" }" != "$s1" ]; then
    pass "ipv6: a receiver on [::]:$port got 2 x 16 MiB sent to [$B1]:$port, both sha256 equal to what was sent"
  else
    fail "ipv6: senders '$s1' / '$s2', receiver '$(tr '\n' '|' <<<"$r")' $(tail -c 200 "$CD/v6-recv.err" | tr '\n' ' ')"
  fi
  if [ $ok = 1 ]; then
    check_stats_rdma ipv6 v6-send-1 v6-send-2 v6-recv
    check_net ipv6 "$snap" $((2 * bytes)) 2 "$(stats_before_switch v6-send-1 v6-send-2)"
  else
    step_failed "$snap" v6-send-1 v6-send-2 v6-recv
  fi
}
