# shellcheck shell=bash
# A gRPC server and client (tests/rdma-programs/grpc_pair.py: Python grpcio,
# gRPC's C core with its own epoll poller; the server listens on [::]),
# unary calls and one bidirectional stream of 64 KiB messages, every answer
# checked: first over kernel TCP, then both preloaded, the connection on
# RDMA at both ends and the bytes on the rxe counters.

GRPC_N=200
GRPC_SIZE=65536

# grpc_run MODE PORT: sets GRPC_MS (the unary calls' time)
grpc_run() {
  local mode=$1 port=$2 srv ok=1
  start_server "grpc-server-$mode" 120 "$mode" "$PY" "$HERE/grpc_pair.py" server "$port"
  srv=$SERVER
  wait_listen "grpc-server-$mode" "$port" "$srv" || return 1
  run_client "grpc-client-$mode" 90 "$mode" "$PY" "$HERE/grpc_pair.py" client "$A1" "$port" "$GRPC_N" "$GRPC_SIZE" || ok=0
  stop_server "grpc-server-$mode" "$srv" TERM
  GRPC_MS=$(sed -n 's/^ms //p' "$CD/grpc-client-$mode.err" 2>/dev/null)
  if [ $ok = 1 ] && grep -q "^ok unary $GRPC_N stream $GRPC_N\$" "$CD/grpc-client-$mode.out"; then
    pass "grpc ($mode): $GRPC_N unary calls of $(hb "$GRPC_SIZE") in ${GRPC_MS:-?} ms and a stream of $GRPC_N, every answer checked"
    return 0
  fi
  fail "grpc ($mode): $(tail -c 300 "$CD/grpc-client-$mode.err" | tr '\n' ' ')"
  return 1
}

run_case() {
  "$PY" -c 'import grpc' 2>/dev/null || { fail "grpc: no grpcio for $PY (make deps: python3-grpcio)"; return 1; }
  grpc_run plain 19600 || return 1
  local tcp_ms=$GRPC_MS snap
  snap=$T/snap
  net_snap "$snap"
  if grpc_run xp 19601; then
    note "grpc: $GRPC_N unary calls of 64 KiB: kernel TCP $tcp_ms ms, xpress $GRPC_MS ms"
    check_stats_rdma grpc grpc-server-xp grpc-client-xp
    check_net grpc "$snap" $((4 * GRPC_N * GRPC_SIZE)) 1 "$(stats_before_switch grpc-client-xp)"
  else
    step_failed "$snap" grpc-server-xp grpc-client-xp
  fi
}
