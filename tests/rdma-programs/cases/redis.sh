# shellcheck shell=bash
# redis-server on $A1; from $A0: redis-cli SET/GET of an 8 MiB binary value
# (NUL, CR/LF, RESP fragments, random bytes; sha256 compared; each command
# three times on one connection, 0.5 s apart, so that the later ones run after
# the upgrade whatever its time) and
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
  snap=$T/snap-cli
  net_snap "$snap"
  # A one-shot 8 MiB command right after connect could travel mostly on TCP
  # while the upgrade runs (70-150 ms under TCG, when TCP moves several MiB),
  # and whether it did would depend on timing. Repeating it on the same
  # connection (-r 3 -i 0.5) puts at most the first copy on TCP.
  local reps=3
  if run_client cli-set 20 xp "${cli[@]}" -r $reps -i 0.5 -x SET blob <"$T/value.bin" &&
    run_client cli-get 20 xp "${cli[@]}" -r $reps -i 0.5 --raw GET blob; then
    # redis-cli prints each reply followed by a newline
    want=$(for _ in $(seq $reps); do cat "$T/value.bin" && echo; done | sha /dev/stdin)
    if [ "$(cat "$CD/cli-set.out")" = "$(printf 'OK\n%.0s' $(seq $reps))" ] &&
      [ "$(sha "$CD/cli-get.out")" = "$want" ]; then
      pass "redis-cli SET/GET of a $(hb "$size") binary value, $reps times each: sha256 match ${want:0:16}"
    else
      fail "redis-cli SET/GET: SET said '$(head -c 100 "$CD/cli-set.out")', GET returned $(stat -c %s "$CD/cli-get.out") bytes for $reps copies of $size, sha256 ${want:0:16} -> $(sha "$CD/cli-get.out" | cut -c1-16)"
    fi
    check_stats_rdma "redis-cli" cli-set cli-get
    RDMA_MIN_PCT=55 TCP_MAX_PCT=45 check_net "redis-cli SET+GET" "$snap" $((2 * reps * size)) 2
  else
    step_failed "$snap" cli-set cli-get
  fi
  rm -f "$T/value.bin"

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
