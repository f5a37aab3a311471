# shellcheck shell=bash
# Fork with an inherited RDMA stream (docs/protocol.md §7 "Moving a stream"):
# an accept-then-fork echo server (tests/rdma-programs/forkserve.py) takes a
# connection that upgraded to RDMA, echoes its first 8 MiB over it, then
# forks while the client keeps sending:
#   child   the child echoes the rest, the parent closes its copy at once
#   parent  the helper child execs /bin/true, the parent echoes the rest
# The client's sha256 of what it sent equals that of the echo it read and of
# what the server read (64 MiB); the server counts the move (recovery cause
# fork), the client its side of it (peer_moved); both had the stream on
# RDMA first.  Notes: the move's duration (the server's log), the echo's
# throughput before the fork (RDMA) and after it (TCP).

FORK_MIB=64

# recovery_cause NAME CAUSE: streams moved or resumed with CAUSE (stats)
recovery_cause() {
  local f n=0 k
  for f in "$CD/stats/$1".[0-9]*.json; do
    [ -s "$f" ] || continue
    k=$(jq ".recovery.resumed.$2 // 0" "$f" 2>/dev/null || echo 0)
    n=$((n + ${k:-0}))
  done
  echo "$n"
}

# rate FILE FROM TO: echo throughput (Mbit/s) between unix times FROM and TO
rate() {
  awk -v a="$2" -v b="$3" '$1 >= a && $1 <= b && $2 >= 1048576 { if (t0 == "") { t0 = $1; b0 = $2 } t1 = $1; b1 = $2 }
    END { if (t1 > t0) printf "%.0f", (b1 - b0) * 8 / (t1 - t0) / 1e6; else printf "?" }' "$1"
}

fork_one() {
  local who=$1 port=$2 total=$((FORK_MIB * 1024 * 1024)) name=fork-$1
  RDMA_LOG_LEVEL=$(log_at info) start_server "$name-srv" 100 xp "$PY" "$HERE/forkserve.py" serve --bind "$A1" \
    --port "$port" --who "$who" --timeout 60
  local srv=$SERVER
  wait_listen "$name-srv" "$port" "$srv" || return 1
  local ok=1
  RDMA_LOG_LEVEL=$(log_at info) run_client "$name-cli" 90 xp "$PY" "$HERE/forkserve.py" client --host "$A1" \
    --port "$port" --bytes "${FORK_MIB}M" --progress "$CD/$name.progress" --timeout 60 || ok=0
  end_server "$name-srv" "$srv" $ok
  local c r sn sh en eh rn rh
  c=$(cat "$CD/$name-cli.out" 2>/dev/null)
  r=$(cat "$CD/$name-srv.out" 2>/dev/null)
  read -r _ sn _ sh _ en _ eh <<<"$c"
  read -r _ rn _ rh <<<"$r"
  if [ "${sn:-x}" = "$total" ] && [ "$en" = "$total" ] && [ "$sh" = "$eh" ] && [ "$rn" = "$total" ] &&
    [ "$rh" = "$sh" ]; then
    pass "fork ($who uses the socket): $FORK_MIB MiB echoed across the fork, sha256 equal at both ends: $sh"
  else
    fail "fork ($who uses the socket): client '${c:-nothing} $(tail -c 200 "$CD/$name-cli.err" | tr '\n' ' ')', server '${r:-nothing} $(tail -c 300 "$CD/$name-srv.err" | tr '\n' ' ')'"
  fi
  local m p
  m=$(recovery_cause "$name-srv" fork)
  p=$(recovery_cause "$name-cli" peer_moved)
  ok_if "fork ($who): the server moved the stream to TCP at the fork (fork=$m), the client followed (peer_moved=$p)" \
    "fork ($who): moves counted: server fork=$m, client peer_moved=$p" test "$m" -ge 1 -a "$p" -ge 1
  stats_load "$name-cli"
  ok_if "fork ($who): the stream was on RDMA before the fork: $S_DESC" \
    "fork ($who): the client's stream was never on RDMA: $S_DESC" test "$S_RDMA" -ge 1 -a "$S_RRX" -gt 0
  local tf mv
  tf=$(sed -n 's/^fork at //p' "$CD/$name-srv.err" | head -n 1)
  mv=$(grep -ho 'fork: .* in [0-9]* us.*)' "$CD"/xpress."$name"-srv.*.log 2>/dev/null | head -n 1)
  if [ -n "$tf" ] && [ -s "$CD/$name.progress" ]; then
    note "fork ($who): ${mv:-no move logged}; echo $(rate "$CD/$name.progress" 0 "$tf") Mbit/s before the fork (RDMA), $(rate "$CD/$name.progress" "$(awk -v t="$tf" 'BEGIN { printf "%.3f", t + 0.5 }')" 9999999999) Mbit/s after it (TCP)"
  fi
  grep -h "moves to TCP\|resumed on TCP\|cannot resume\|failed over" "$CD"/xpress."$name"-*.log 2>/dev/null |
    sed 's/^/        /' | head -4
}

run_case() {
  fork_one child 19500
  fork_one parent 19501
}
