# shellcheck shell=bash
# redis-server with redis-cli (SET/GET of a 4 KiB text value, a binary value
# with NULs/CR/LF/high bytes and a 512 KiB value; mass insert with --pipe) and
# redis-benchmark (plain and pipelined); the data left in the server must
# account for every request.

prepare() {
  head -c 3072 /dev/urandom | base64 -w0 >"$DATA/text4k.txt" # 4096 bytes
  {
    # shellcheck disable=SC2016 # a literal RESP fragment inside the value
    printf 'a\0b\r\n\0\377\r\n*3\r\n$3\r\nSET\r\n'
    head -c 3000 /dev/urandom
    printf '\r\n\0'
  } >"$DATA/binary.dat"
  head -c 524288 /dev/urandom >"$DATA/big.dat"
  # 2000 SETs in the wire protocol, for redis-cli --pipe
  "$PY" - "$DATA/mass.resp" <<'EOF'
import sys
with open(sys.argv[1], "wb") as f:
    for i in range(2000):
        k, v = b"mass:%d" % i, b"value-%d-" % i + b"x" * (i % 300)
        f.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, len(v), v))
EOF
}

run_mode() {
  local port dir
  port=$(free_port)
  mktmp dir
  start_server redis-server 60 redis-server --bind 127.0.0.1 --port "$port" --save '' \
    --appendonly no --dir "$dir" --protected-mode no --logfile '' --daemonize no
  local srv=$SERVER_PID
  wait_listen redis-server "$port" "$srv"
  check_mapped redis-server "$(server_child "$srv")"
  local cli=(redis-cli -h 127.0.0.1 -p "$port")

  xrun ping 10 "${cli[@]}" PING
  check_eq "PING" "$(cat "$D/ping.out")" PONG

  # SET from stdin (-x), GET back byte-exact (redis-cli appends a newline).
  local v
  for v in text4k.txt binary.dat big.dat; do
    xrun "set-$v" 10 "${cli[@]}" -x SET "$v" <"$DATA/$v"
    xrun "get-$v" 10 "${cli[@]}" --raw GET "$v"
    xrun "strlen-$v" 10 "${cli[@]}" STRLEN "$v"
    head -c -1 "$D/get-$v.out" >"$D/get-$v.value"
    expect_eq "SET reply" "$(cat "$D/set-$v.out")" OK
    expect_eq STRLEN "$(cat "$D/strlen-$v.out")" "$(stat -c %s "$DATA/$v")"
    expect_file_eq "GET value" "$D/get-$v.value" "$DATA/$v"
    verdict "redis-cli SET/GET $v ($(stat -c %s "$DATA/$v") bytes) byte-exact"
    record "get.$v" "$(sha256 "$D/get-$v.out") $(cat "$D/strlen-$v.out")"
  done
  xrun getrange 10 "${cli[@]}" --raw GETRANGE binary.dat 0 15
  record getrange.binary "$(od -An -tx1 "$D/getrange.out" | tr -d ' \n')"

  # Mass insert through the wire protocol.
  xrun pipe 20 "${cli[@]}" --pipe <"$DATA/mass.resp"
  xrun get-mass 10 "${cli[@]}" --raw GET mass:1999
  expect_eq "--pipe summary" "$(grep -o 'errors: [0-9]*, replies: [0-9]*' "$D/pipe.out")" "errors: 0, replies: 2000"
  expect_eq "GET mass:1999" "$(cat "$D/get-mass.out")" "value-1999-$(printf 'x%.0s' $(seq 1 $((1999 % 300))))"
  verdict "redis-cli --pipe: 2000 SETs, 0 errors"
  record pipe "$(grep -o 'errors: [0-9]*, replies: [0-9]*' "$D/pipe.out")"

  # redis-benchmark: 10 clients, then 4 clients pipelining 16 requests.
  xrun bench 60 redis-benchmark -h 127.0.0.1 -p "$port" -n 2000 -c 10 -q --csv -t set,get,incr,lpush
  xrun bench-pipelined 60 redis-benchmark -h 127.0.0.1 -p "$port" -n 4000 -c 4 -P 16 -q --csv -t incr
  expect_eq "tests run" "$(cut -d, -f1 "$D/bench.out" | tr -d '"' | tr '\n' ' ')" "test SET GET INCR LPUSH "
  expect_eq "pipelined tests run" "$(cut -d, -f1 "$D/bench-pipelined.out" | tr -d '"' | tr '\n' ' ')" "test INCR "
  xrun counter 10 "${cli[@]}" GET 'counter:__rand_int__'
  xrun llen 10 "${cli[@]}" LLEN mylist
  xrun dbsize 10 "${cli[@]}" DBSIZE
  expect_eq "INCR count (2000 + 4000 pipelined)" "$(cat "$D/counter.out")" 6000
  expect_eq "LPUSH count" "$(cat "$D/llen.out")" 2000
  expect_eq "DBSIZE" "$(cat "$D/dbsize.out")" 2006
  verdict "redis-benchmark: every request applied (INCR=6000, LLEN=2000, DBSIZE=2006)"
  record bench.tests "$(cut -d, -f1 "$D/bench.out" "$D/bench-pipelined.out" | tr -d '"' | tr '\n' ' ')"
  record bench.state "counter=$(cat "$D/counter.out") llen=$(cat "$D/llen.out") dbsize=$(cat "$D/dbsize.out")"

  stop_server redis-server "$srv"
}
