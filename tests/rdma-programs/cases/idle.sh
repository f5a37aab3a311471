# shellcheck shell=bash
# An idle server uses no CPU: one upgraded connection whose server blocks in
# recv while the client is quiet for 3 s; the server's CPU time over that
# window (all threads, the engine's included) must stay below 2%.

run_case() {
  local port=19200
  start_server idle-server 40 xp "$PY" "$HERE/idle.py" server "$A1" "$port"
  local srv=$SERVER
  wait_listen idle-server "$port" "$srv" || return 1
  local pid
  pid=$(child_of "$srv" 2>/dev/null || echo "$srv")
  local ok=1
  run_client idle-client 30 xp "$PY" "$HERE/idle.py" client "$A1" "$port" "$pid" || ok=0
  end_server idle-server "$srv" $ok
  local line cpu
  line=$(cat "$CD/idle-client.out" 2>/dev/null)
  cpu=$(awk '{print $3}' <<<"$line")
  if [ $ok = 1 ] && [ -n "$cpu" ] && awk -v c="$cpu" 'BEGIN { exit !(c < 0.06) }'; then
    pass "idle: $line (limit 0.06 s = 2%)"
  else
    fail "idle: ${line:-no measurement} $(tail -c 200 "$CD/idle-client.err" | tr '\n' ' ') (limit 0.06 s = 2%)"
  fi
  [ $ok = 1 ] && check_stats_rdma "idle" idle-server idle-client
}
