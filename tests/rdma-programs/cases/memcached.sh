# shellcheck shell=bash
# memcached (4 threads) on $A1; from $A0 libmemcached's memccp/memccat store
# and fetch twelve 900 KiB binary values per run (text and binary protocol;
# sha256 compared) and memcslap loads it (4 threads, set then get).

MS_N=1000

run_case() {
  local port=11311 snap
  start_server memcached 55 xp memcached -l "$A1" -p "$port" -U 0 -t 4 -m 128 -c 1024 -u nobody
  local srv=$SERVER
  wait_listen memcached "$port" "$srv" || return 1
  local servers=--servers=$A1:$port

  # ---- memccp / memccat: 12 values of 900 KiB per run, each run one
  # connection (the first values travel on TCP while the upgrade runs).
  local files=() keys=() i
  mkdir -p "$T/got"
  for i in $(seq 1 12); do
    head -c 921600 /dev/urandom >"$T/v$i.bin"
    files+=("$T/v$i.bin")
    keys+=("v$i.bin")
  done
  # memccat prints each value followed by a newline.
  for i in "${files[@]}"; do cat "$i"; printf '\n'; done >"$T/all.bin"
  snap=$T/snap-cp
  net_snap "$snap"
  if run_client memccp-text 40 xp memccp "$servers" "${files[@]}" &&
    run_client memccat-text 40 xp memccat "$servers" "${keys[@]}" &&
    cp "$CD/memccat-text.out" "$T/got/text.bin" &&
    run_client memccp-binary 40 xp memccp --binary "$servers" "${files[@]}" &&
    run_client memccat-binary 40 xp memccat --binary "$servers" "${keys[@]}" &&
    cp "$CD/memccat-binary.out" "$T/got/binary.bin"; then
    if cmp -s "$T/all.bin" "$T/got/text.bin" && cmp -s "$T/all.bin" "$T/got/binary.bin"; then
      pass "memccp/memccat 12 x 900 KiB (text and binary protocol): sha256 match $(sha "$T/all.bin" | cut -c1-16)"
    else
      fail "memccp/memccat: sha256 text $(sha "$T/got/text.bin" | cut -c1-16), binary $(sha "$T/got/binary.bin" | cut -c1-16) (want $(sha "$T/all.bin" | cut -c1-16))"
    fi
    check_stats_rdma "memccp/memccat" memccp-text memccat-text memccp-binary memccat-binary
    # The bytes sent before each connection switched crossed as TCP
    # (check_stats_rdma bounds their share): allowed, as iperf3's are.
    check_net "memccp/memccat" "$snap" $((4 * 12 * 921600)) 4 \
      "$(stats_before_switch memccp-text memccat-text memccp-binary memccat-binary)"
  else
    step_failed "$snap" memccp-text memccat-text memccp-binary memccat-binary
  fi

  # ---- memcslap
  snap=$T/snap-slap
  net_snap "$snap"
  if run_client memcslap-set 25 xp memcslap "$servers" --concurrency=4 --execute-number="$MS_N" --test=set &&
    run_client memcslap-get 25 xp memcslap "$servers" --binary --concurrency=4 --execute-number="$MS_N" --test=get; then
    local keys=$((4 * MS_N)) op line why=()
    for op in set get; do
      line=$(grep -Eo "Time to $op +[0-9]+ keys by +4 threads: +[0-9.]+ seconds" "$CD/memcslap-$op.out" | tr -s ' ')
      if [[ $line != "Time to $op $keys keys by 4 threads:"* ]]; then
        why+=("$op: '${line:-no summary line}' (want $keys keys); $(grep -m1 -i 'error' "$CD/memcslap-$op.err" | cut -c1-160)")
      fi
    done
    if [ ${#why[@]} = 0 ]; then
      pass "memcslap 4 threads: set and get (binary protocol) $keys keys: $(grep -hEo 'Time to (set|get) +[0-9]+ keys by +4 threads: +[0-9.]+ seconds' "$CD/memcslap-set.out" "$CD/memcslap-get.out" | tr -s ' ' | sed 's/Time to //; s/ keys by 4 threads:/ keys in/' | tr '\n' ' ')"
    else
      fail "memcslap: $(printf '%s | ' "${why[@]}")"
      server_stacks
    fi
    check_stats_rdma "memcslap" memcslap-set memcslap-get
    check_net "memcslap" "$snap" $(($(stats_bytes memcslap-set) + $(stats_bytes memcslap-get))) \
      $(($(stats_conns memcslap-set) + $(stats_conns memcslap-get)))
  else
    step_failed "$snap" memcslap-set memcslap-get
  fi

  stop_server memcached "$srv" TERM
  check_stats_rdma "server" memcached
}
