# shellcheck shell=bash
# A stream that resumed on TCP (its channel failed) and is then shared by
# a parent and its fork child (docs/protocol.md §7 "Moving a stream",
# "At the fork"): tests/rdma-programs/forkshare.py.  The server's QP is
# forced into error once 4 MiB went over RDMA (the stream resumes on TCP,
# framed; the server sends until its log says so), then the server forks and
#   child-first   the child writes 1 MiB and exits, then the parent 1 MiB
#   parent-first  the parent writes 1 MiB, then the child 1 MiB
#   split-read    the child reads the client's first 1 MiB and exits, the
#                 parent the second
# and split-read once more with a stream still on RDMA at the fork (it
# moves: the peer's RESUME must be read before the fork, once).
# Every byte must arrive once and in order (fixed pseudo-random blocks
# compared at the reading end).  Before the fork the stream is turned back
# into plain kernel TCP (a RAW frame each way), so both processes share a
# kernel socket; both ends count the resume, and log the turn.

# resumed_by NAME CAUSE: streams resumed with CAUSE (stats)
resumed_by() {
  local f n=0 k
  for f in "$CD/stats/$1".[0-9]*.json; do
    [ -s "$f" ] || continue
    k=$(jq ".recovery.resumed.$2 // 0" "$f" 2>/dev/null || echo 0)
    n=$((n + ${k:-0}))
  done
  echo "$n"
}

# fork_share MODE PORT [moved]: moved: no fault, the stream is on RDMA at
# the fork and moves (docs/protocol.md §7 "Moving a stream").
fork_share() {
  local mode=$1 port=$2 moved=${3:-} name=fshare-$1${3:+-moved}
  local env=(XPRESS_REUPGRADE_MS=0) fault=("XPRESS_FAULT_QP_ERROR_AT=$((4 << 20))") extra=()
  local kind=resumed
  [ -z "$moved" ] || { fault=(); extra=(--moved); kind=moved; }
  RDMA_LOG_LEVEL=$(log_at info) start_server "$name-srv" 60 xptest env "${fault[@]}" \
    "${env[@]}" "$PY" "$HERE/forkshare.py" serve --bind "$A1" --port "$port" --mode "$mode" --timeout 20 "${extra[@]}"
  local srv=$SERVER
  wait_listen "$name-srv" "$port" "$srv" || return 1
  local ok=1
  RDMA_LOG_LEVEL=$(log_at info) run_client "$name-cli" 50 xp env "${env[@]}" "$PY" "$HERE/forkshare.py" client \
    --host "$A1" --port "$port" --mode "$mode" --timeout 20 || ok=0
  end_server "$name-srv" "$srv" $ok
  local c s
  c=$(cat "$CD/$name-cli.out" 2>/dev/null)
  s=$(cat "$CD/$name-srv.out" 2>/dev/null)
  if [ "$c" = "client ok" ] && [ "$s" = "server ok" ]; then
    pass "fork ($mode, $kind stream shared by parent and child): every byte once, in order"
  else
    fail "fork ($mode, $kind stream shared): client '${c:-nothing} $(tail -c 200 "$CD/$name-cli.err" | tr '\n' ' ')', server '${s:-nothing} $(tail -c 300 "$CD/$name-srv.err" | tr '\n' ' ')'"
  fi
  local rs rc
  if [ -n "$moved" ]; then
    rs=$(resumed_by "$name-srv" fork)
    rc=$(resumed_by "$name-cli" peer_moved)
    ok_if "fork ($mode, moved): the stream moved at the fork (server fork=$rs, client peer_moved=$rc)" \
      "fork ($mode, moved): no move counted (server fork=$rs, client peer_moved=$rc)" test "$rs" -ge 1 -a "$rc" -ge 1
    return 0
  fi
  rs=$(resumed_by "$name-srv" completion_error)
  rc=$(resumed_by "$name-cli" peer_resumed)
  ok_if "fork ($mode): the stream had resumed on TCP before the fork (server completion_error=$rs, client peer_resumed=$rc)" \
    "fork ($mode): no resume by the fault (server completion_error=$rs, client peer_resumed=$rc): the case tests nothing" \
    test "$rs" -ge 1 -a "$rc" -ge 1
  local tf tt
  tf=$(sed -n 's/^fork at //p' "$CD/$name-srv.err" | head -n 1)
  tt=$(grep -ho 'fork: [0-9]* resumed stream(s) turned to plain TCP.*' "$CD"/xpress."$name"-srv.*.log 2>/dev/null | head -n 1)
  note "fork ($mode) at ${tf:-?}: ${tt:-no turn logged}"
  grep -h "resumed on TCP\|plain TCP\|cannot resume\|reset" "$CD"/xpress."$name"-*.log 2>/dev/null |
    sed 's/^/        /' | head -6
}

run_case() {
  fork_share child-first 19520
  fork_share parent-first 19521
  fork_share split-read 19522
  fork_share split-read 19523 moved
}
