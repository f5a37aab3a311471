# shellcheck shell=bash
# Python asyncio streams with many connections (tests/rdma-programs/
# aio_pair.py): 200 concurrent connections between two event loops (the
# server listens on every address), 10 echoed exchanges of 1 KiB each,
# every echo checked:
# first over kernel TCP, then both preloaded: every connection on RDMA.

AIO_N=200
AIO_ROUNDS=10

# aio_run MODE PORT: sets AIO_MS
aio_run() {
  local mode=$1 port=$2 srv ok=1
  start_server "aio-server-$mode" 150 "$mode" "$PY" "$HERE/aio_pair.py" server "$port" "$AIO_N"
  srv=$SERVER
  wait_listen "aio-server-$mode" "$port" "$srv" || return 1
  run_client "aio-client-$mode" 120 "$mode" "$PY" "$HERE/aio_pair.py" client "$A1" "$port" "$AIO_N" "$AIO_ROUNDS" 1024 || ok=0
  end_server "aio-server-$mode" "$srv" $ok
  AIO_MS=$(sed -n 's/^ms //p' "$CD/aio-client-$mode.err" 2>/dev/null)
  if [ $ok = 1 ] && grep -q "^ok $AIO_N connections $AIO_ROUNDS rounds\$" "$CD/aio-client-$mode.out"; then
    pass "asyncio ($mode): $AIO_N concurrent connections x $AIO_ROUNDS echoed exchanges of 1 KiB in ${AIO_MS:-?} ms, every echo checked"
    return 0
  fi
  fail "asyncio ($mode): $(tail -c 300 "$CD/aio-client-$mode.err" | tr '\n' ' ')"
  return 1
}

run_case() {
  aio_run plain 19700 || return 1
  local tcp_ms=$AIO_MS
  if aio_run xp 19701; then
    note "asyncio: $AIO_N connections x $AIO_ROUNDS rounds: kernel TCP $tcp_ms ms, xpress $AIO_MS ms"
    check_stats_rdma asyncio aio-server-xp aio-client-xp
  else
    step_failed "" aio-server-xp aio-client-xp
  fi
}
