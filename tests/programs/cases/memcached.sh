# shellcheck shell=bash
# memcached (2 worker threads) with a Python text-protocol client (binary-safe
# values up to 512 KiB, multi-get, incr/decr, append, cas, delete, noreply,
# 500 pipelined sets), libmemcached's memccp/memccat (text and binary
# protocol) and memcslap; the server's counters must account for every command.

prepare() {
  {
    printf 'a\r\nb\0c\r\nEND\r\n'
    head -c 40 /dev/urandom
  } >"$DATA/tiny.bin"
  head -c 3072 /dev/urandom | base64 -w0 >"$DATA/text4k.txt"
  head -c 524288 /dev/urandom >"$DATA/big.bin"
  head -c 200000 /dev/urandom >"$DATA/copy-text.bin"
  head -c 300000 /dev/urandom >"$DATA/copy-binary.bin"
}

MC_STATS=(cmd_get cmd_set get_hits get_misses delete_hits delete_misses incr_hits decr_hits cas_hits cas_badval curr_items total_items)

run_mode() {
  local port
  port=$(free_port)
  local user=()
  [ "$(id -u)" != 0 ] || user=(-u nobody)
  start_server memcached 60 memcached -l 127.0.0.1 -p "$port" -U 0 -t 2 -m 64 -c 256 "${user[@]}"
  local srv=$SERVER_PID
  wait_listen memcached "$port" "$srv"
  check_mapped memcached "$(server_child "$srv")"

  xrun text-client 30 "$PY" "$HERE/mc_client.py" "$port" "$DATA/tiny.bin" "$DATA/text4k.txt" "$DATA/big.bin"
  check_eq "text protocol client: all values byte-exact, every reply as expected" \
    "$(tail -1 "$D/text-client.out")" "failures: 0"
  record text-client "$(sha256 "$D/text-client.out")"

  local servers=--servers=127.0.0.1:$port
  xrun memccp-text 20 memccp "$servers" "$DATA/copy-text.bin"
  xrun memccat-text 20 memccat "$servers" --file="$D/copy-text.bin" copy-text.bin
  check_file_eq "memccp/memccat (text protocol) 200000 bytes" "$D/copy-text.bin" "$DATA/copy-text.bin"
  xrun memccp-binary 20 memccp --binary "$servers" "$DATA/copy-binary.bin"
  xrun memccat-binary 20 memccat --binary "$servers" --file="$D/copy-binary.bin" copy-binary.bin
  check_file_eq "memccp/memccat (binary protocol) 300000 bytes" "$D/copy-binary.bin" "$DATA/copy-binary.bin"
  record memccat "$(sha256 "$D/copy-text.bin") $(sha256 "$D/copy-binary.bin")"

  xrun memcslap-set 30 memcslap "$servers" --concurrency=2 --execute-number=1000 --test=set
  xrun memcslap-get 30 memcslap "$servers" --binary --concurrency=2 --execute-number=1000 --test=get
  check_eq "memcslap set: 2000 keys by 2 threads" "$(grep -c 'Time to set *2000 keys by *2 threads' "$D/memcslap-set.out")" 1
  check_eq "memcslap get (binary protocol): 2000 keys by 2 threads" "$(grep -c 'Time to get *2000 keys by *2 threads' "$D/memcslap-get.out")" 1

  # The server's counters (cmd_get/cmd_set/hits/items...) must be identical in
  # both runs; the only misses and cas failures are the client's deliberate ones.
  xrun stats 10 "$PY" "$HERE/mc_client.py" --stats "$port" "${MC_STATS[@]}"
  local st
  st=$(tr '\n' ' ' <"$D/stats.out")
  check_eq "server counters: no get misses besides the client's 2, cas mismatch exactly 1" \
    "$(grep -E '^(get_misses|cas_badval) ' "$D/stats.out" | tr '\n' ' ')" "get_misses 2 cas_badval 1 "
  record stats "$st"

  stop_server memcached "$srv"
}
