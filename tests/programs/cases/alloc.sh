# shellcheck shell=bash
# The hooked allocator under real programs: Python (its own object allocator
# on top of malloc) building, growing, shrinking and freeing large buffers in
# threads and a fork child; redis-server (built with jemalloc, whose malloc
# the preload replaces) with values of several MiB grown by APPEND.  Results
# must equal the plain run's; in the preloaded modes the statistics must show
# the arenas in use, and XPRESS_ALLOC=0 must give the same results with none.

prepare() {
  head -c 3145728 /dev/urandom >"$DATA/value3m.bin"
  head -c 1048576 /dev/urandom >"$DATA/tail1m.bin"
  cat "$DATA/value3m.bin" "$DATA/tail1m.bin" "$DATA/tail1m.bin" >"$DATA/expected5m.bin"
}

# arena_committed FILE: the committed arena bytes in an XPRESS_STATS=1 table.
arena_committed() {
  sed -n 's/^ *arena bytes *committed \([0-9]*\),.*/\1/p' "$1" | tail -1
}

run_mode() {
  local here=$PROG_ROOT/tests/programs
  xrun python 120 "$PY" "$here/alloc_churn.py"
  record python.digest "$(cat "$D/python.out")"
  if [ "$MODE" != plain ]; then
    local c
    c=$(arena_committed "$D/python.err")
    expect_range "python arena committed bytes" "${c:-0}" 1 999999999999
    xrun python-alloc-off 120 env XPRESS_ALLOC=0 "$PY" "$here/alloc_churn.py"
    expect_eq "python digest with XPRESS_ALLOC=0" "$(cat "$D/python-alloc-off.out")" "$(cat "$D/python.out")"
    expect_eq "arena committed with XPRESS_ALLOC=0" "$(arena_committed "$D/python-alloc-off.err")" 0
  fi
  verdict "python: large buffers, realloc both ways, threads, fork child: same digest"

  local port dir
  port=$(free_port)
  mktmp dir
  start_server redis-server 60 redis-server --bind 127.0.0.1 --port "$port" --save '' \
    --appendonly no --dir "$dir" --protected-mode no --logfile '' --daemonize no
  local srv=$SERVER_PID
  wait_listen redis-server "$port" "$srv"
  local cli=(redis-cli -h 127.0.0.1 -p "$port")
  xrun set 20 "${cli[@]}" -x SET big <"$DATA/value3m.bin"
  xrun append1 20 "${cli[@]}" -x APPEND big <"$DATA/tail1m.bin"
  xrun append2 20 "${cli[@]}" -x APPEND big <"$DATA/tail1m.bin"
  xrun get 20 "${cli[@]}" --raw GET big
  head -c -1 "$D/get.out" >"$D/get.value"
  expect_file_eq "GET after SET + 2 APPENDs" "$D/get.value" "$DATA/expected5m.bin"
  xrun del 10 "${cli[@]}" DEL big
  expect_eq DEL "$(cat "$D/del.out")" 1
  stop_server redis-server "$srv"
  if [ "$MODE" != plain ]; then
    local rc
    rc=$(arena_committed "$D/redis-server.err")
    expect_range "redis-server arena committed bytes" "${rc:-0}" 1 999999999999
  fi
  verdict "redis: a 5 MiB value built by SET and APPEND, byte-exact"
  record redis.get "$(sha256 "$D/get.value")"
}
