# shellcheck shell=bash
# redis-server on $A1; from $A0: redis-cli SET/GET of an 8 MiB binary value
# (NUL, CR/LF, RESP fragments, random bytes; sha256 compared) and
# redis-benchmark (50 clients, pipelining 16, SET/GET/INCR with 256-byte
# values; the INCR count must match).

RB_N=20000

run_case() {
  local port=16379 snap
  start_server redis-server 85 xp redis-server --bind "$A1" --port "$port" --save '' \
    --appendonly no --dir "$T" --protected-mode no --logfile '' --daemonize no
  local srv=$SERVER
  wait_listen redis-server "$port" "$srv" || return 1
  local cli=(redis-cli -h "$A1" -p "$port")

  # ---- binary value
  {
    # shellcheck disable=SC2016 # a literal RESP fragment inside the value
    printf 'a\0b\r\n\0\377\r\n*3\r\n$3\r\nSET\r\n'
    head -c $((8 * 1024 * 1024)) /dev/urandom
    printf '\r\n\0'
  } >"$T/value.bin"
  local size want
  size=$(stat -c %s "$T/value.bin")
  want=$(sha "$T/value.bin")
  snap=$T/snap-cli
  net_snap "$snap"
  if run_client cli-set 20 xp "${cli[@]}" -x SET blob <"$T/value.bin" &&
    run_client cli-get 20 xp "${cli[@]}" --raw GET blob; then
    head -c -1 "$CD/cli-get.out" >"$T/got.bin" # redis-cli appends a newline
    if [ "$(cat "$CD/cli-set.out")" = OK ] && [ "$(sha "$T/got.bin")" = "$want" ]; then
      pass "redis-cli SET/GET of a $(hb "$size") binary value: sha256 match ${want:0:16}"
    else
      fail "redis-cli SET/GET: SET said '$(head -c 100 "$CD/cli-set.out")', GET returned $(stat -c %s "$T/got.bin") bytes, sha256 ${want:0:16} -> $(sha "$T/got.bin" | cut -c1-16)"
    fi
    check_stats_rdma "redis-cli" cli-set cli-get
    # One 8 MiB command right after connect: its first bytes travel on TCP
    # while the upgrade runs (tens of ms under TCG, several MiB of TCP), so
    # this one-shot step only needs a quarter of its bytes on RDMA.
    RDMA_MIN_PCT=25 TCP_MAX_PCT=75 check_net "redis-cli SET+GET" "$snap" $((2 * size)) 2
  else
    step_failed "$snap" cli-set cli-get
  fi
  rm -f "$T/value.bin" "$T/got.bin"

  # ---- redis-benchmark
  snap=$T/snap-bench
  net_snap "$snap"
  if run_client bench 40 xp redis-benchmark -h "$A1" -p "$port" -c 50 -P 16 -n "$RB_N" -d 256 -q --csv -t set,get,incr; then
    local tests counter
    tests=$(cut -d, -f1 "$CD/bench.out" | tr -d '"' | tr '\n' ' ')
    run_client counter 10 xp "${cli[@]}" GET 'counter:__rand_int__'
    counter=$(cat "$CD/counter.out")
    if [ "$tests" = "test SET GET INCR " ] && [ "$counter" = "$RB_N" ]; then
      pass "redis-benchmark -c 50 -P 16 -n $RB_N SET/GET/INCR in ${CLIENT_SECS} s: $(tail -n +2 "$CD/bench.out" | cut -d, -f1,2 | tr -d '"' | tr '\n' ' ')req/s; INCR counter $counter"
    else
      fail "redis-benchmark: tests run '$tests' (want SET GET INCR), INCR counter '$counter' (want $RB_N)"
    fi
    check_stats_rdma "redis-benchmark" bench
    check_net "redis-benchmark" "$snap" "$(stats_bytes bench)" "$(stats_conns bench)"
  else
    step_failed "$snap" bench
  fi

  stop_server redis-server "$srv" TERM
  check_stats_rdma "server" redis-server
}
