# shellcheck shell=bash
# Helpers for the RDMA program tests (sourced by tests/rdma-programs/run.sh
# inside the Soft-RoCE VM, once per case worker).
#
# A case (cases/NAME.sh) defines run_case.  It starts servers bound to
# $A1 (10.77.0.2) with start_server, runs clients (which connect from $A0,
# 10.77.0.1, through the veth pair) with run_client, and checks
#   (a) the data:        pass/fail with its own comparison
#   (b) the statistics:  check_stats_rdma NAME (or check_stats_fallback)
#   (c) the counters:    net_snap before, check_net after
# Every process is started as "xp" (LD_PRELOAD=$LIB, JSON statistics at exit
# into $CD/stats/NAME.<pid>.json) or "plain" (no preload).
#
# Variables set by run.sh: CASE, CD (log dir of the case, on the host share),
# T (scratch dir of the case, guest tmpfs), LIB, XSTAT, A0, A1, RESULTS, PY.

# Thresholds, in percent of the payload a step moved (override in the
# environment): RDMA must carry at least RDMA_MIN_PCT of it (RoCE bytes on the
# veth, rxe packets, bytes counted under rdma in the statistics); TCP on the
# veth at most TCP_MAX_PCT of it plus TCP_CONN_ALLOW bytes per connection
# (handshakes, FIN), besides the bytes the statistics count as sent on TCP
# before the switch (how many depends on how fast the upgrade ran against how
# fast TCP moved meanwhile: a bulk sender on this 2-vCPU VM moves 1-20 MiB in
# the ~0.1 s it takes).  Those may be at most SWITCH_MAX_PCT of an upgraded
# connection's bytes, plus SWITCH_ALLOW per connection (its first exchange).
RDMA_MIN_PCT=${RDMA_MIN_PCT:-80}
TCP_MAX_PCT=${TCP_MAX_PCT:-20}
SWITCH_MAX_PCT=${SWITCH_MAX_PCT:-50}
SWITCH_ALLOW=${SWITCH_ALLOW:-65536}
TCP_CONN_ALLOW=${TCP_CONN_ALLOW:-4096}
# The largest RoCE MTU: a lower bound on the packets a payload needs.
ROCE_MAX_MTU=4096

# ------------------------------------------------------------------ results
_result() {
  trace "$1 $2"
  printf '%s\t%s: %s\n' "$1" "$CASE" "$2" >>"$RESULTS"
  printf '%-4s  %s: %s\n' "$1" "$CASE" "$2"
}
pass() { _result PASS "$1"; }
fail() { _result FAIL "$1"; }
note() { printf '        %s\n' "$*"; }
# ok_if DESC-PASS DESC-FAIL CONDITION...: pass or fail on a test(1) expression
ok_if() {
  local p=$1 f=$2
  shift 2
  if "$@"; then pass "$p"; else fail "$f"; fi
}

# hb BYTES: human-readable size (bash arithmetic: every fork costs ~0.1 s
# under TCG)
hb() {
  local b=${1:-0}
  if [ "$b" -ge 1048576 ]; then
    local t=$(((b * 10 + 524288) / 1048576))
    echo "$((t / 10)).$((t % 10)) MiB"
  elif [ "$b" -ge 10240 ]; then
    local t=$(((b * 10 + 512) / 1024))
    echo "$((t / 10)).$((t % 10)) KiB"
  else
    echo "$b B"
  fi
}
# pct PART WHOLE: PART as a percentage of WHOLE, one decimal
pct() {
  local a=${1:-0} b=${2:-0}
  if [ "$b" -gt 0 ]; then
    local t=$(((a * 1000 + b / 2) / b))
    echo "$((t / 10)).$((t % 10))%"
  else
    echo "n/a"
  fi
}
# deadline SECS: a point in time SECS from now (usecs); until T: not past T.
# Waits are bounded by the clock, not by a count of sleeps: a host loaded by
# spinning processes stretches every sleep and fork.
deadline() { echo $(($(usecs) + $1 * 1000000)); }
until_t() { local n=${EPOCHREALTIME/./}; [ $((10#$n)) -lt "$1" ]; }
# usecs: now in microseconds
usecs() { local t=${EPOCHREALTIME/./}; echo "$((10#$t))"; }
# secs_since USECS: seconds since, one decimal
secs_since() {
  local d=$((($(usecs) - $1 + 50000) / 100000))
  echo "$((d / 10)).$((d % 10))"
}
sha() { sha256sum "$1" 2>/dev/null | cut -c1-64; }

# trace TEXT: a time-stamped line in $CD/trace (seconds since the case
# began), so a case that runs out of time shows where it was
CASE_T0=$(usecs 2>/dev/null || echo 0)
trace() { printf '%6ss %s\n' "$(secs_since "$CASE_T0")" "$*" >>"$CD/trace"; }

# ------------------------------------------------------------------ processes
# status RC: "status N" or "killed by SIGxxx" (timeout(1) passes its child's
# death by a signal on as its own)
status() {
  if [ "$1" -gt 128 ] && [ "$1" -lt 160 ]; then echo "killed by SIG$(kill -l $(($1 - 128)) 2>/dev/null || echo $(($1 - 128)))"; else echo "status $1"; fi
}

# prefix MODE NAME: PRE=(env ...) for starting NAME in MODE (xp|xptest|plain);
# xptest preloads the test library ($TEST_LIB: fault injection, Makefile)
# log_at LEVEL: LEVEL, or the caller's RDMA_LOG_LEVEL when that says more
# (a case that asks for info lines still gets debug ones when debugging).
log_at() {
  case ${RDMA_LOG_LEVEL:-warn} in
    debug | trace) echo "$RDMA_LOG_LEVEL" ;;
    *) echo "$1" ;;
  esac
}
prefix() {
  case $1 in
    xp | xptest | xpbase) PRE=(env "LD_PRELOAD=$(case $1 in xp) echo "$LIB" ;; xptest) echo "$TEST_LIB" ;; *) echo "${BASE_LIB:?}" ;; esac)" XPRESS_STATS=json "XPRESS_STATS_FILE=$CD/stats/$2.%p.json" XPRESS_STATS_LIVE=1 "XPRESS_LOG_LEVEL=${RDMA_LOG_LEVEL:-warn}" "XPRESS_LOG_FILE=$CD/xpress.$2.%p.log") ;;
    plain) PRE=(env -u LD_PRELOAD) ;;
    *) echo "rdma-programs: bad mode $1" >&2; exit 2 ;;
  esac
}

# start_server NAME SECS MODE CMD...: CMD in the background under timeout(1)
# (its own process group; dies after SECS anyway), output in $CD/NAME.out/.err.
# Sets SERVER (the timeout wrapper's pid).
start_server() {
  local name=$1 secs=$2 mode=$3
  shift 3
  # Never before the case's own deadline: a host loaded by other work
  # stretches every step, and a server its timeout stopped in the middle of
  # a client's run fails that client (refused, reset) with no word why.
  # SECS only guards against a server outliving the case.
  [ "${CASE_SECS:-0}" -le "$secs" ] || secs=$CASE_SECS
  prefix "$mode" "$name"
  echo "$mode: $*" >"$CD/$name.cmd"
  timeout -k 3 "$secs" "${PRE[@]}" "$@" >"$CD/$name.out" 2>"$CD/$name.err" </dev/null &
  SERVER=$!
  trace "server $name started (wrapper $SERVER): $*"
  echo "$SERVER" >>"$CD/pids"
  SERVERS+=("$SERVER")
}
SERVERS=()

# children PID: the children of PID (from /proc: ps costs ~0.5 s under TCG)
children() {
  local c=""
  if [ -r "/proc/$1/task/$1/children" ]; then
    read -r c <"/proc/$1/task/$1/children" 2>/dev/null
  else
    c=$(ps -o pid= --ppid "$1" 2>/dev/null)
  fi
  # shellcheck disable=SC2086 # one line of pids
  echo $c
}
# child_of PID: the first child of PID (the server under its timeout wrapper)
child_of() {
  local c t
  t=$(deadline 5)
  while until_t "$t"; do
    c=$(children "$1")
    [ -n "$c" ] && { echo "${c%% *}"; return 0; }
    sleep 0.1
  done
  return 1
}
# tree PID: PID and all its descendants
tree() {
  local p
  echo "$1"
  for p in $(children "$1"); do tree "$p"; done
}

# wait_listen NAME PORT WRAPPER: until something listens on $A1:PORT (15 s)
wait_listen() {
  local name=$1 port=$2 w=$3 t
  t=$(deadline 15)
  while until_t "$t"; do
    [ -z "$(ss -Htln "sport = :$port" 2>/dev/null)" ] || return 0
    if ! kill -0 "$w" 2>/dev/null; then
      fail "$name exited before listening on port $port: $(tail -c 400 "$CD/$name.err" | tr '\n' ' ')"
      return 1
    fi
    sleep 0.1
  done
  fail "$name not listening on port $port after 15 s"
  return 1
}

# live_stats NAME WRAPPER: save xpress-stat --json of the server and its
# descendants (nginx workers) as $CD/stats/NAME.live.PID.json; used for a
# process that leaves no exit statistics (killed).
live_stats() {
  local name=$1 w=$2 p c
  c=$(child_of "$w") || return 0
  for p in $(tree "$c"); do
    timeout 5 "$XSTAT" --json "$p" >"$CD/stats/$name.live.$p.json" 2>/dev/null || rm -f "$CD/stats/$name.live.$p.json"
  done
}

# server_stacks [WRAPPER...]: servers (default: all still running) that hang:
# every thread's stack (gdb, ~12 s a process under TCG) and the open fds
# into $CD/stacks.NAME.PID.txt, the frames in xpress printed, so that a hang
# in CI names where it waits.  At most 3 processes.
server_stacks() {
  command -v gdb >/dev/null 2>&1 || return 0
  local w c p n=0 f ws=("$@")
  [ ${#ws[@]} -gt 0 ] || ws=("${SERVERS[@]}")
  for w in "${ws[@]}"; do
    c=$(children "$w")
    c=${c%% *}
    [ -n "$c" ] || continue
    for p in $(tree "$c"); do
      [ $n -lt 3 ] || return 0
      n=$((n + 1))
      f=$CD/stacks.$(tr -d '\0' <"/proc/$p/comm" 2>/dev/null || echo proc).$p.txt
      { ls -l "/proc/$p/fd" 2>&1; ss -tanp 2>/dev/null | grep "pid=$p,"; } >"$f.fds"
      timeout -k 2 40 gdb -batch -nx -p "$p" -ex 'set pagination off' -ex 'thread apply all bt 16' >"$f" 2>&1 </dev/null
      note "stacks of $p ($(basename "$f"); its fds in $(basename "$f").fds: $(grep -c 'socket:' "$f.fds") sockets, $(grep -c ' LISTEN ' "$f.fds") listening), frames in xpress:"
      grep -E '^Thread|xp::| at (preload|stream|flow|recover|verbs|alloc|common)/' "$f" | sed -E 's/ \(.*\) at / at /; s/^#[0-9]+ +0x[0-9a-f]+ in //' | cut -c1-160 | head -n 40 | sed 's/^/          /'
    done
  done
}

# stop_server NAME WRAPPER [SIGNAL]: live statistics, then SIGNAL (TERM) to
# the server; it must exit within 10 s (else it is killed, and that fails).
stop_server() {
  local name=$1 w=$2 sig=${3:-TERM} c rc=0
  trace "stopping $name: live statistics"
  live_stats "$name" "$w"
  trace "stopping $name: SIG$sig"
  c=$(child_of "$w" 2>/dev/null || true)
  kill "-$sig" "${c:-$w}" 2>/dev/null || true
  local t t3
  t=$(deadline 10)
  t3=$(deadline 3)
  while until_t "$t"; do
    kill -0 "$w" 2>/dev/null || break
    if [ -n "$t3" ] && ! until_t "$t3"; then
      # Still there 3 s after the signal: where does it wait?
      t3=""
      note "$name still running 3 s after SIG$sig:"
      server_stacks "$w"
    fi
    sleep 0.1
  done
  if kill -0 "$w" 2>/dev/null; then
    fail "$name did not exit within 10 s of SIG$sig: killed"
    kill -KILL -- "-$w" 2>/dev/null || true
  fi
  wait "$w" 2>/dev/null || rc=$?
  trace "$name ended: $(status "$rc")"
  # Exiting on the signal, or with a status of its own, is fine; dying of
  # another signal (SIGSEGV, SIGABRT) is a crash.
  local signum
  signum=$(kill -l "$sig")
  if [ "$rc" -gt 128 ] && [ "$rc" != $((128 + signum)) ] && [ "$rc" != 137 ]; then
    fail "$name crashed when stopped with SIG$sig: $(status "$rc") (see ${CD#"$LOG"/}/$name.err)"
  else
    note "$name stopped with SIG$sig ($(status "$rc"))"
  fi
  local keep=() p
  for p in "${SERVERS[@]}"; do [ "$p" = "$w" ] || keep+=("$p"); done
  SERVERS=("${keep[@]}")
}

# await_server NAME WRAPPER [SECS]: a server that ends by itself (one-shot
# receivers, iperf3 -1): wait up to SECS (10); then stop it, which fails.
await_server() {
  local name=$1 w=$2 secs=${3:-10} rc=0 t
  t=$(deadline "$secs")
  while until_t "$t"; do
    kill -0 "$w" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$w" 2>/dev/null; then
    fail "$name did not exit by itself within $secs s of its client's end"
    stop_server "$name" "$w" TERM
    return
  fi
  wait "$w" 2>/dev/null || rc=$?
  if [ "$rc" -gt 128 ]; then
    fail "$name crashed: $(status "$rc") (see ${CD#"$LOG"/}/$name.err)"
  elif [ "$rc" != 0 ]; then
    note "$name exited with $(status "$rc")"
  fi
  local keep=() p
  for p in "${SERVERS[@]}"; do [ "$p" = "$w" ] || keep+=("$p"); done
  SERVERS=("${keep[@]}")
}

# end_server NAME WRAPPER OK: after its client: a one-shot server must end
# by itself when the client succeeded (OK=1); after a failed client it is
# stopped (with live statistics first).
end_server() {
  if [ "$3" = 1 ]; then await_server "$1" "$2" 10; else stop_server "$1" "$2" TERM; fi
}

# cleanup: kill whatever servers (and a running client) are left (exit trap
# of the case worker; each runs under timeout(1), which leads its own
# process group)
CUR_CLIENT="" CUR_WATCHER=""
cleanup() {
  local p groups=("${SERVERS[@]}")
  [ -z "$CUR_CLIENT" ] || groups+=("$CUR_CLIENT")
  [ -z "$CUR_WATCHER" ] || kill "$CUR_WATCHER" 2>/dev/null
  [ ${#groups[@]} -gt 0 ] || return 0
  for p in "${groups[@]}"; do kill -TERM -- "-$p" 2>/dev/null || true; done
  sleep 0.3
  for p in "${groups[@]}"; do kill -KILL -- "-$p" 2>/dev/null || true; wait "$p" 2>/dev/null; done
  SERVERS=()
}

# run_client NAME SECS MODE CMD...: CMD in the foreground under timeout(1);
# stdout $CD/NAME.out, stderr $CD/NAME.err, stdin inherited (callers
# redirect).  A timeout or a non-zero exit fails (with the program's own
# words) and returns non-zero.  CLIENT_SECS: its duration.  CLIENT_WHILE
# (a function name, empty by default): called as FUNC NAME WRAPPER once the
# client started, for a case that acts while it runs (cases/exit.sh).
run_client() {
  local name=$1 secs=$2 mode=$3 rc=0 t0
  shift 3
  t0=$(usecs)
  prefix "$mode" "$name"
  echo "$mode: $*" >"$CD/$name.cmd"
  trace "client $name ($mode, ${secs} s): $*"
  timeout -k 3 "$secs" "${PRE[@]}" "$@" >"$CD/$name.out" 2>"$CD/$name.err" &
  local w=$! watcher=""
  CUR_CLIENT=$w
  echo "$w" >>"$CD/pids"
  # A client about to time out leaves no exit statistics: take live ones
  # (xpress-stat) a second before its deadline, for the failure report.
  if [ "$mode" != plain ] && [ "$secs" -gt 2 ]; then
    (
      trap 'kill $sp 2>/dev/null; exit 0' TERM
      sleep $((secs - 1)) &
      sp=$!
      wait $sp
      live_stats "$name" "$w"
    ) &
    watcher=$!
    CUR_WATCHER=$watcher
  fi
  [ -z "${CLIENT_WHILE:-}" ] || "$CLIENT_WHILE" "$name" "$w"
  wait "$w" || rc=$?
  trace "client $name ended: $(status "$rc")"
  [ -z "$watcher" ] || { kill "$watcher" 2>/dev/null; wait "$watcher" 2>/dev/null; }
  CUR_CLIENT="" CUR_WATCHER=""
  # shellcheck disable=SC2034 # read by the cases
  CLIENT_SECS=$(secs_since "$t0")
  if grep -q "cannot be preloaded" "$CD/$name.err" 2>/dev/null; then
    fail "$name: the dynamic loader could not preload $LIB: $(grep -m1 'cannot be preloaded' "$CD/$name.err")"
    return 1
  fi
  if [ $rc = 124 ] || [ $rc = 137 ]; then
    fail "$name timed out after ${secs} s: $*"
    server_stacks
    return 1
  elif [ $rc != 0 ]; then
    local why
    why=$(grep -v '^ *$' "$CD/$name.err" | tail -c 400 | tr '\n' ' ')
    [ -n "${why// /}" ] || why=$(grep -v '^ *$' "$CD/$name.out" | tail -c 400 | tr '\n' ' ')
    fail "$name exited with $(status "$rc"): $* -- $why"
    return 1
  fi
  return 0
}

# ------------------------------------------------------------------ statistics
# stats_jq LIVE FILE...: shell assignments summing the statistics in FILE...
stats_jq() {
  local live=$1
  shift
  jq -s -r --argjson live "$live" '
        def s(f): map(f // 0) | add // 0;
        { procs: length,
          rdma: s(.connections.rdma), tcp: s(.connections.tcp),
          reasons: ([.[] | .fallback_reasons // {} | to_entries[] | select(.value > 0)]
                    | group_by(.key) | map({key: .[0].key, value: (map(.value) | add)}) | from_entries),
          rtx: s(.bytes.rdma.tx), rrx: s(.bytes.rdma.rx), ttx: s(.bytes.tcp.tx), trx: s(.bytes.tcp.rx),
          ptx: s(.bytes.tcp_before_switch.tx), prx: s(.bytes.tcp_before_switch.rx),
          open: ([.[] | .open_connections // [] | .[] | "\(.mode)/\(.reason)"] | group_by(.) | map("\(.[0]) x\(length)")) }
        | .desc = "\(.procs) process(es)\(if $live > 0 then " (\($live) from live xpress-stat)" else "" end): connections rdma=\(.rdma) tcp=\(.tcp)"
            + (if (.reasons | length) > 0 then " [reasons: " + ([.reasons | to_entries[] | "\(.key)=\(.value)"] | join(" ")) + "]" else "" end)
            + "; bytes tx/rx rdma \(.rtx)/\(.rrx), tcp \(.ttx)/\(.trx), tcp before the switch \(.ptx)/\(.prx)"
            + (if (.open | length) > 0 then "; open at exit: " + (.open | join(", ")) else "" end)
        | "S_PROCS=\(.procs) S_RDMA=\(.rdma) S_TCP=\(.tcp) S_RTX=\(.rtx) S_RRX=\(.rrx) S_TTX=\(.ttx) S_TRX=\(.trx) S_PTX=\(.ptx) S_PRX=\(.prx) S_PNA=\(.reasons.peer_not_accelerated // 0) S_CDU=\(.reasons.closed_during_upgrade // 0) S_TFB=\(.reasons.too_few_bytes // 0) S_DESC=\(.desc | @sh)"
        ' "$@" 2>/dev/null
}

# stats_load NAME: sum the statistics of every process started as NAME:
# their exit dumps ($CD/stats/NAME.<pid>.json) plus the live snapshot
# (xpress-stat) of any process without one.  Sets S_PROCS S_RDMA
# S_TCP S_RTX S_RRX S_TTX S_TRX S_BYTES S_CONNS S_PNA (connections with
# reason peer_not_accelerated) and S_DESC (one human line).  One jq per
# NAME (~0.5 s under TCG), cached: call it once the processes have ended.
declare -gA STATS_CACHE=()
stats_load() {
  local name=$1 f p files=() live=0 out
  if [ -z "${STATS_CACHE[$name]:-}" ]; then
    for f in "$CD/stats/$name".[0-9]*.json; do [ -s "$f" ] && files+=("$f"); done
    for f in "$CD/stats/$name".live.*.json; do
      [ -s "$f" ] || continue
      p=${f##*.live.}
      p=${p%.json}
      [ -s "$CD/stats/$name.$p.json" ] || { files+=("$f"); live=$((live + 1)); }
    done
    if [ ${#files[@]} = 0 ]; then
      out="S_PROCS=0 S_DESC='no statistics written (not preloaded, or the process crashed)'"
    else
      out=$(stats_jq "$live" "${files[@]}") || {
        # A file that is not JSON: name it, show its first bytes (a stray
        # write of the library into a reused fd shows up here), and sum the
        # others (plus the live snapshot of that process, if any).
        local good=() bad="" alt
        for f in "${files[@]}"; do
          if jq -e . "$f" >/dev/null 2>&1; then
            good+=("$f")
          else
            bad+="${f##*/} starts with [$(od -An -tx1 -N12 "$f" | tr -s ' ' | sed 's/^ //')] "
            p=${f##*"$name".}
            p=${p%.json}
            alt=$CD/stats/$name.live.$p.json
            if [[ $p =~ ^[0-9]+$ ]] && [ -s "$alt" ]; then good+=("$alt"); live=$((live + 1)); fi
          fi
        done
        fail "$name: statistics not parsable JSON: $bad"
        out="S_PROCS=0 S_DESC='no parsable statistics'"
        [ ${#good[@]} = 0 ] || out=$(stats_jq "$live" "${good[@]}") || out="S_PROCS=0 S_DESC='no parsable statistics'"
      }
    fi
    STATS_CACHE[$name]=$out
  fi
  S_PROCS=0 S_RDMA=0 S_TCP=0 S_RTX=0 S_RRX=0 S_TTX=0 S_TRX=0 S_PTX=0 S_PRX=0 S_PNA=0 S_CDU=0 S_TFB=0 S_DESC=""
  eval "${STATS_CACHE[$name]}"
  S_BYTES=$((S_RTX + S_RRX + S_TTX + S_TRX + S_PTX + S_PRX))
  S_CONNS=$((S_RDMA + S_TCP))
}
# stats_conns NAME... / stats_bytes NAME...: connections / application bytes
# (both modes, tx+rx) the processes of NAME... counted
stats_conns() { local n t=0; for n in "$@"; do stats_load "$n"; t=$((t + S_CONNS)); done; echo $t; }
stats_bytes() { local n t=0; for n in "$@"; do stats_load "$n"; t=$((t + S_BYTES)); done; echo $t; }
# stats_before_switch NAME...: application bytes that crossed the
# connections of the processes NAME... on TCP before each direction switched
# to RDMA, both directions (name one end of each connection: the client)
stats_before_switch() { local n t=0; for n in "$@"; do stats_load "$n"; t=$((t + S_PTX + S_PRX)); done; echo $t; }

# check_stats_rdma LABEL NAME...: (b) the statistics of the processes started
# as NAME... show their connections in mode rdma: rdma > 0 connections, none
# on tcp, at least RDMA_MIN_PCT of the bytes after the switch counted under
# rdma, and at most SWITCH_MAX_PCT of the upgraded connections' bytes sent
# before it.
check_stats_rdma() {
  local label=$1 name rb tb pb
  shift
  for name in "$@"; do
    stats_load "$name"
    if [ "$S_PROCS" = 0 ]; then
      fail "$label: $name statistics: $S_DESC"
      continue
    fi
    rb=$((S_RTX + S_RRX)) tb=$((S_TTX + S_TRX)) pb=$((S_PTX + S_PRX))
    local why=()
    [ "$S_RDMA" -gt 0 ] || why+=("no connection in mode rdma")
    # Short-lived side connections (a benchmark's probe, closed before the
    # upgrade could finish) may stay on TCP: at most TCP_CONN_MAX_PCT of the
    # connections, and the bytes rule below still holds.  Connections that
    # never carried the bytes a binding proof covers (too_few_bytes: iperf3's
    # control connection, whose server sends single state bytes) stay on
    # TCP by the protocol (docs/protocol.md §2): not counted here.
    local tcp_conns=$((S_TCP - ${S_TFB:-0}))
    [ $((tcp_conns * 100)) -le $((${TCP_CONN_MAX_PCT:-10} * (S_RDMA + tcp_conns))) ] ||
      why+=("$tcp_conns connection(s) in mode tcp besides too_few_bytes (allowed: ${TCP_CONN_MAX_PCT:-10}% of $((S_RDMA + tcp_conns)))")
    [ $((rb + pb)) -gt 0 ] || why+=("no bytes on the upgraded connections")
    [ $((rb * 100)) -ge $((RDMA_MIN_PCT * (rb + tb))) ] || why+=("$(pct "$rb" $((rb + tb))) of the bytes after the switch under rdma, want >= $RDMA_MIN_PCT%")
    # A connection's first bytes go on TCP anyway (a short exchange may be
    # all of them): SWITCH_ALLOW bytes per connection are not counted.
    [ $((pb * 100)) -le $((SWITCH_MAX_PCT * (rb + pb) + 100 * SWITCH_ALLOW * S_RDMA)) ] || why+=("$(pct "$pb" $((rb + pb))) of the upgraded connections' bytes on TCP before the switch, want <= $SWITCH_MAX_PCT% + $(hb "$SWITCH_ALLOW") per connection")
    if [ ${#why[@]} = 0 ]; then
      pass "$label: $name stats in mode rdma: $S_DESC"
    else
      fail "$label: $name stats not in mode rdma ($(printf '%s; ' "${why[@]}" | sed 's/; $//')): $S_DESC"
    fi
  done
}

# step_failed SNAPSHOT NAME...: after a failed step, show what the
# statistics of NAME... (exit dumps, or live ones taken before a timeout) and
# the counters since SNAPSHOT say, without judging them.
step_failed() {
  local snap=$1 n
  shift
  for n in "$@"; do
    stats_load "$n"
    note "$n stats: $S_DESC"
  done
  net_delta "$snap"
  note "counters during the step: rxe0 sent/rcvd +${ND[rxe0.sent_pkts]:-0}/+${ND[rxe0.rcvd_pkts]:-0} pkts, rxe1 +${ND[rxe1.sent_pkts]:-0}/+${ND[rxe1.rcvd_pkts]:-0}; RoCE $(hb $((${ND[tc.veth0.roce_bytes]:-0} + ${ND[tc.veth1.roce_bytes]:-0}))), TCP $(hb $((${ND[tc.veth0.tcp_bytes]:-0} + ${ND[tc.veth1.tcp_bytes]:-0}))) on the veth"
}

# check_stats_fallback LABEL NAME: (b) for a peer without xpress: every
# connection on tcp with reason peer_not_accelerated, none on rdma.
check_stats_fallback() {
  local label=$1 name=$2
  stats_load "$name"
  if [ "$S_PROCS" = 0 ]; then
    fail "$label: $name statistics: $S_DESC"
  elif [ "$S_RDMA" = 0 ] && [ "$S_TCP" -gt 0 ] && [ "$S_PNA" -ge $((S_TCP - ${S_CDU:-0})) ]; then
    # A connection closed before the (first) answer came counts as
    # closed_during_upgrade (a 16 MiB iperf3 run can end in 0.5 s, before
    # rdma_cm's reject and its 50 ms retry: seen in CI, every connection);
    # the others must say peer_not_accelerated.  Either way: all on TCP.
    pass "$label: $name stats: all on tcp, reason peer_not_accelerated (or closed before the answer): $S_DESC"
  else
    fail "$label: $name stats: want every connection on tcp with reason peer_not_accelerated ($S_TCP on tcp, $S_PNA with that reason, $S_RDMA on rdma): $S_DESC"
  fi
}

# ------------------------------------------------------------------ counters
# net_snap FILE: the rxe and veth counters rxe-counters reads (its sysfs
# files, read here with bash builtins: rxe-counters itself takes ~1 s per
# call under TCG), plus the tc byte counters run.sh installed on the egress
# of both veth ends: every packet between the two addresses leaves through
# one of them, so their sum is all the traffic; tc.vethN.tcp_bytes is TCP,
# tc.vethN.roce_bytes RoCE v2 (UDP 4791).
NET_FILES=()
for _d in rxe0 rxe1; do
  for _c in sent_pkts rcvd_pkts; do NET_FILES+=("$_d.$_c=/sys/class/infiniband/$_d/ports/1/hw_counters/$_c"); done
done
for _d in veth0 veth1; do
  for _c in tx_bytes rx_bytes tx_packets rx_packets; do NET_FILES+=("$_d.$_c=/sys/class/net/$_d/statistics/$_c"); done
done
unset _d _c
net_snap() {
  local kv v d line kind
  {
    for kv in "${NET_FILES[@]}"; do
      v=0
      [ -r "${kv#*=}" ] && read -r v <"${kv#*=}"
      echo "${kv%%=*} $v"
    done
    # "Sent N bytes M pkt" of the filters with pref 1 and 3 (tcp over IPv4
    # and IPv6), then 2 and 4 (roce): summed per kind
    for d in veth0 veth1; do
      kind=""
      declare -A sum=() pkts=()
      while read -r line; do
        case $line in
          *"pref 1 "* | *"pref 3 "*) kind=tcp ;;
          *"pref 2 "* | *"pref 4 "*) kind=roce ;;
          "Sent "*" bytes "*) [ -z "$kind" ] || {
            line=${line#Sent }
            sum[$kind]=$((${sum[$kind]:-0} + ${line%% *}))
            line=${line#* bytes }
            pkts[$kind]=$((${pkts[$kind]:-0} + ${line%% *}))
            kind=""
          } ;;
        esac
      done < <(tc -s filter show dev "$d" egress 2>/dev/null)
      for kind in "${!sum[@]}"; do
        echo "tc.$d.${kind}_bytes ${sum[$kind]}"
        echo "tc.$d.${kind}_pkts ${pkts[$kind]}"
      done
      unset sum pkts
    done
  } >"$1"
}
# net_delta FILE: fill ND[name] = now - FILE
declare -gA ND=()
net_delta() {
  local k v
  declare -A old=()
  while read -r k v; do old[$k]=$v; done <"$1"
  net_snap "$T/snap.now"
  ND=()
  while read -r k v; do ND[$k]=$((v - ${old[$k]:-0})); done <"$T/snap.now"
}

# check_net LABEL SNAPSHOT PAYLOAD CONNS [BEFORE]: (c) since SNAPSHOT, RDMA
# carried at least RDMA_MIN_PCT of the PAYLOAD bytes sent after the switch
# (the rxe devices sent enough packets and the RoCE bytes on the veth reach
# it) and TCP on the veth at most TCP_MAX_PCT of them plus TCP_CONN_ALLOW per
# connection plus BEFORE, the bytes of PAYLOAD the statistics count as sent
# on TCP before the switch (stats_before_switch; default 0).
check_net() {
  local label=$1 snap=$2 payload=${3:-0} conns=${4:-0} before=${5:-0}
  net_delta "$snap"
  local s0=${ND[rxe0.sent_pkts]:-0} s1=${ND[rxe1.sent_pkts]:-0} r0=${ND[rxe0.rcvd_pkts]:-0} r1=${ND[rxe1.rcvd_pkts]:-0}
  local roce=$((${ND[tc.veth0.roce_bytes]:-0} + ${ND[tc.veth1.roce_bytes]:-0}))
  local tcp=$((${ND[tc.veth0.tcp_bytes]:-0} + ${ND[tc.veth1.tcp_bytes]:-0}))
  local veth=$((${ND[veth0.tx_bytes]:-0} + ${ND[veth1.tx_bytes]:-0}))
  note "counters: payload $(hb "$payload") over $conns connection(s); rxe0 sent/rcvd +$s0/+$r0 pkts, rxe1 +$s1/+$r1; veth tx $(hb "$veth"): RoCE $(hb "$roce") ($(pct "$roce" "$payload")), TCP $(hb "$tcp") ($(pct "$tcp" "$payload"))"
  if [ -z "${ND[tc.veth0.tcp_bytes]:-}" ]; then
    fail "$label: no tc byte counters on the veth (see the setup line): cannot tell RoCE from TCP"
    return
  fi
  if ! [ "$payload" -gt 0 ] 2>/dev/null; then
    fail "$label: counters not checked: payload unknown ('$payload'; no client statistics?)"
    return
  fi
  [[ $before =~ ^[0-9]+$ ]] && [ "$before" -le "$payload" ] || before=0
  # What RDMA had to carry: the payload after the switch.
  local after=$((payload - before)) pk=$((s0 + s1)) need_pk need_b what
  need_pk=$((after * RDMA_MIN_PCT / 100 / ROCE_MAX_MTU))
  need_b=$((after * RDMA_MIN_PCT / 100))
  what="the $(hb "$payload") payload"
  [ "$before" = 0 ] || what="the $(hb "$after") of the $(hb "$payload") payload sent after the switch ($(hb "$before") before it, on TCP)"
  if [ "$pk" -ge "$need_pk" ] && [ "$pk" -gt 0 ] && [ "$roce" -ge "$need_b" ]; then
    pass "$label: bytes crossed RDMA: rxe sent +$pk packets, RoCE $(hb "$roce") on the veth = $(pct "$roce" "$after") of $what"
  else
    fail "$label: bytes did not cross RDMA: rxe sent +$pk packets (want >= $need_pk), RoCE $(hb "$roce") on the veth = $(pct "$roce" "$after") of $what (want >= $RDMA_MIN_PCT%)"
  fi
  # The bytes sent before the switch cross the veth as TCP segments: their
  # Ethernet, IP and TCP headers and the returning ACKs add about 5% (54.8
  # MiB of TCP on the veth for 52.4 MiB before the switch); allow 10%.
  local limit=$((after * TCP_MAX_PCT / 100 + before * 110 / 100 + conns * TCP_CONN_ALLOW))
  if [ "$tcp" -le "$limit" ]; then
    pass "$label: TCP on the veth carried little: $(hb "$tcp") = $(pct "$tcp" "$payload") of the payload (limit $(hb "$limit"))"
  else
    fail "$label: TCP on the veth carried $(hb "$tcp") = $(pct "$tcp" "$payload") of the $(hb "$payload") payload (limit $(hb "$limit"): $TCP_MAX_PCT% of $(hb "$after") + 110% of $(hb "$before") before the switch + $(hb "$TCP_CONN_ALLOW") x $conns connections)"
  fi
}

# check_net_tcp LABEL SNAPSHOT PAYLOAD: fallback steps: the payload went over
# TCP on the veth (it was not lost and did not vanish into loopback).
check_net_tcp() {
  local label=$1 snap=$2 payload=$3
  net_delta "$snap"
  local roce=$((${ND[tc.veth0.roce_bytes]:-0} + ${ND[tc.veth1.roce_bytes]:-0}))
  local tcp=$((${ND[tc.veth0.tcp_bytes]:-0} + ${ND[tc.veth1.tcp_bytes]:-0}))
  note "counters: payload $(hb "$payload"); rxe sent +$((${ND[rxe0.sent_pkts]:-0} + ${ND[rxe1.sent_pkts]:-0})) pkts; RoCE $(hb "$roce"), TCP $(hb "$tcp") on the veth"
  if [ "$tcp" -ge "$payload" ]; then
    pass "$label: the payload crossed the veth on TCP ($(hb "$tcp") of TCP for $(hb "$payload"))"
  else
    fail "$label: only $(hb "$tcp") of TCP on the veth for a $(hb "$payload") payload"
  fi
}
