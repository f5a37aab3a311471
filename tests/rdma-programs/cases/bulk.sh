# shellcheck shell=bash
# One 200 MiB TCP transfer from $A0 to $A1 (tests/rdma-programs/bulk.py),
# sha256 computed by the sender over what it sent and by the receiver over
# what it received.  Then 32 MiB between two ends configured with different
# stream windows (a sender's 1 MiB against a receiver's 16 KiB): before the
# ends told each other their window (link version 4), the sender overran
# the receiver's buffer, the channel broke and the sender got EPIPE.

transfer() {
  local sfx=$1 label=$2 bytes=$3 size=$4 port=$5 senv=$6 renv=$7 snap
  start_server "receiver$sfx" 85 xp env $renv "$PY" "$HERE/bulk.py" recv --bind "$A1" --port "$port" --timeout 30
  local srv=$SERVER
  wait_listen "receiver$sfx" "$port" "$srv" || return 1
  snap=$T/snap
  net_snap "$snap"
  local ok=1 what="$(hb "$bytes")${label:+ ($label)}"
  run_client "sender$sfx" 60 xp env $senv "$PY" "$HERE/bulk.py" send --host "$A1" --port "$port" --bytes "$size" --timeout 20 || ok=0
  local secs=$CLIENT_SECS
  # the receiver prints its line and exits once the sender closed
  end_server "receiver$sfx" "$srv" $ok
  local s r
  s=$(cat "$CD/sender$sfx.out" 2>/dev/null)
  r=$(cat "$CD/receiver$sfx.out" 2>/dev/null)
  if [ -n "$s" ] && [ "$s" = "$r" ] && [ "${s#bytes "$bytes" }" != "$s" ]; then
    pass "$what in $secs s ($(awk -v b="$bytes" -v s="$secs" 'BEGIN { if (s > 0) printf "%.0f", b * 8 / s / 1e6 }') Mbit/s): sender and receiver agree: $s"
  else
    fail "$what transfer: sender '${s:-nothing} $(tail -c 200 "$CD/sender$sfx.err" | tr '\n' ' ')', receiver '${r:-nothing} $(tail -c 200 "$CD/receiver$sfx.err" | tr '\n' ' ')'"
  fi
  if [ $ok = 1 ]; then
    check_stats_rdma "$what" "sender$sfx"
    check_stats_rdma "$what" "receiver$sfx"
    check_net "$what" "$snap" "$bytes" 1 "$(stats_before_switch "sender$sfx")"
    # A transfer without faults warns about nothing (a channel without
    # streams that ends when the sender's process exits is routine).
    local warns
    warns=$(cat "$CD"/xpress.*.log 2>/dev/null | grep -E ' (warn|error):' | head -3)
    if [ -z "$warns" ]; then
      pass "$what: no warnings or errors in either end's xpress log"
    else
      fail "$what: xpress logged: $(echo "$warns" | tr '\n' ' ')"
    fi
  else
    step_failed "$snap" "sender$sfx" "receiver$sfx"
  fi
}

run_case() {
  transfer "" "" $((200 * 1024 * 1024)) 200M 19000 "" ""
  transfer -win "stream windows 1024 and 16 KiB" $((32 * 1024 * 1024)) 32M 19001 \
    XPRESS_STREAM_WINDOW_KB=1024 XPRESS_STREAM_WINDOW_KB=16
}
