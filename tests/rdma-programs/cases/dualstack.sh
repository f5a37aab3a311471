# shellcheck shell=bash
# Dual-stack sockets (the JVM's, gRPC's, any server bound to `::`): a
# receiver on an AF_INET6 socket bound to `::` takes one sender on an
# AF_INET6 socket connecting to the IPv4-mapped ::ffff:$A1 (as a JVM client
# does) and one plain AF_INET sender; both connections upgrade (stream/
# listen_addr.h), every byte checked by sha256, the rxe counters carry them.

run_case() {
  local port=19400 bytes=$((16 * 1024 * 1024)) snap srv ok=1
  # The first connection to a server that just started waits for the
  # server's rdma_cm port (opened at its first accept) and its 50 ms retry:
  # half or more of its 16 MiB may cross before the switch under TCG.
  local SWITCH_MAX_PCT=80
  start_server dual-recv 80 xp "$PY" "$HERE/bulk.py" recv --bind :: --port "$port" --count 2 --timeout 30
  srv=$SERVER
  wait_listen dual-recv "$port" "$srv" || return 1
  snap=$T/snap
  net_snap "$snap"
  run_client dual-send-mapped 40 xp "$PY" "$HERE/bulk.py" send --host "::ffff:$A1" --port "$port" --bytes 16M --timeout 20 || ok=0
  run_client dual-send-v4 40 xp "$PY" "$HERE/bulk.py" send --host "$A1" --port "$port" --bytes 16M --timeout 20 || ok=0
  end_server dual-recv "$srv" $ok
  local s1 s2 r
  s1=$(cat "$CD/dual-send-mapped.out" 2>/dev/null)
  s2=$(cat "$CD/dual-send-v4.out" 2>/dev/null)
  r=$(cat "$CD/dual-recv.out" 2>/dev/null)
  if [ -n "$s1" ] && [ -n "$s2" ] && [ "$r" = "$s1"$'\n'"$s2" ] && [ "${s1#bytes "$bytes" }" != "$s1" ]; then
    pass "dualstack: a receiver on [::]:$port got 16 MiB sent to ::ffff:$A1 (AF_INET6) and 16 MiB sent to $A1 (AF_INET), both sha256 equal to what was sent"
  else
    fail "dualstack: senders '$s1' / '$s2', receiver '$(tr '\n' '|' <<<"$r")' $(tail -c 200 "$CD/dual-recv.err" | tr '\n' ' ')"
  fi
  if [ $ok = 1 ]; then
    check_stats_rdma dualstack dual-send-mapped dual-send-v4 dual-recv
    check_net dualstack "$snap" $((2 * bytes)) 2 "$(stats_before_switch dual-send-mapped dual-send-v4)"
  else
    step_failed "$snap" dual-send-mapped dual-send-v4 dual-recv
  fi
}
