# shellcheck shell=bash
# One 200 MiB TCP transfer from $A0 to $A1 (tests/rdma-programs/bulk.py),
# sha256 computed by the sender over what it sent and by the receiver over
# what it received.

BULK=200M
BULK_BYTES=$((200 * 1024 * 1024))

run_case() {
  local port=19000 snap
  start_server receiver 85 xp "$PY" "$HERE/bulk.py" recv --bind "$A1" --port "$port" --timeout 30
  local srv=$SERVER
  wait_listen receiver "$port" "$srv" || return 1
  snap=$T/snap
  net_snap "$snap"
  local ok=1
  run_client sender 60 xp "$PY" "$HERE/bulk.py" send --host "$A1" --port "$port" --bytes "$BULK" --timeout 20 || ok=0
  local secs=$CLIENT_SECS
  # the receiver prints its line and exits once the sender closed
  end_server receiver "$srv" $ok
  local s r
  s=$(cat "$CD/sender.out" 2>/dev/null)
  r=$(cat "$CD/receiver.out" 2>/dev/null)
  if [ -n "$s" ] && [ "$s" = "$r" ] && [ "${s#bytes "$BULK_BYTES" }" != "$s" ]; then
    pass "200 MiB in $secs s ($(awk -v b="$BULK_BYTES" -v s="$secs" 'BEGIN { if (s > 0) printf "%.0f", b * 8 / s / 1e6 }') Mbit/s): sender and receiver agree: $s"
  else
    fail "200 MiB transfer: sender '${s:-nothing} $(tail -c 200 "$CD/sender.err" | tr '\n' ' ')', receiver '${r:-nothing} $(tail -c 200 "$CD/receiver.err" | tr '\n' ' ')'"
  fi
  if [ $ok = 1 ]; then
    check_stats_rdma "sender" sender
    check_stats_rdma "receiver" receiver
    check_net "200 MiB" "$snap" "$BULK_BYTES" 1
    # A transfer without faults warns about nothing (a channel without
    # streams that ends when the sender's process exits is routine).
    local warns
    warns=$(cat "$CD"/xpress.*.log 2>/dev/null | grep -E ' (warn|error):' | head -3)
    if [ -z "$warns" ]; then
      pass "200 MiB: no warnings or errors in either end's xpress log"
    else
      fail "200 MiB: xpress logged: $(echo "$warns" | tr '\n' ' ')"
    fi
  else
    step_failed "$snap" sender receiver
  fi
}
