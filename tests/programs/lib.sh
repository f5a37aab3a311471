# shellcheck shell=bash
# Helpers for the real-program tests (sourced by tests/programs/run.sh).
#
# A "case" (tests/programs/cases/NAME.sh) defines
#   prepare   - optional; makes input data once in $DATA (shared by both modes)
#   run_mode  - starts its servers with start_server, drives them with clients
#               through xrun, records checks with check_* and the data that must
#               be identical in both modes with record.
# run_mode runs once per mode (plain, xpress, xpress-allow; see run.sh), each
# in its own bash process.  Every program, servers included, is started
# through the PRE prefix (env ...) of its mode.

# shellcheck disable=SC2034 # used by run.sh
PROG_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# Prefer the distribution interpreter (CI has no pyenv shims).
if [ -x /usr/bin/python3 ]; then PY=/usr/bin/python3; else PY=$(command -v python3); fi

# ---------------------------------------------------------------- results
# Check lines go to $D/checks: "PASS|FAIL <tab> [mode] case: description".
_line() { printf '%s\t[%s] %s: %s\n' "$1" "$MODE" "$CASE" "$2" >>"$D/checks"; }
pass() { _line PASS "$1"; }
failc() { _line FAIL "$1"; }
# fatal MSG: record a failure and abort this mode (trap cleans up servers).
fatal() {
  _line FAIL "$1"
  exit 1
}

# check_eq DESC GOT WANT
check_eq() {
  if [ "$2" == "$3" ]; then pass "$1"; else failc "$1 (got '$2', want '$3')"; fi
}
# check_ge DESC GOT MIN   (integers)
check_ge() {
  if [[ "$2" =~ ^[0-9]+$ ]] && [ "$2" -ge "$3" ]; then pass "$1"; else failc "$1 (got '$2', want >= $3)"; fi
}
# check_range DESC GOT MIN MAX   (integers)
check_range() {
  if [[ "$2" =~ ^[0-9]+$ ]] && [ "$2" -ge "$3" ] && [ "$2" -le "$4" ]; then
    pass "$1"
  else
    failc "$1 (got '$2', want $3..$4)"
  fi
}
# check_file_eq DESC GOT_FILE WANT_FILE   (byte-exact)
check_file_eq() {
  if cmp -s "$2" "$3"; then
    pass "$1"
  else
    failc "$1 ($(basename "$2") differs from $(basename "$3"): sha256 $(sha256 "$2") vs $(sha256 "$3"), sizes $(stat -c %s "$2" 2>/dev/null || echo missing) vs $(stat -c %s "$3"))"
  fi
}

# Several expectations folded into one check: expect_* collect problems,
# verdict DESC records one PASS or one FAIL listing them.
PROBLEMS=()
expect_eq() { [ "$2" == "$3" ] || PROBLEMS+=("$1: got '$2', want '$3'"); }
expect_range() {
  if ! [[ "$2" =~ ^[0-9]+$ ]] || [ "$2" -lt "$3" ] || [ "$2" -gt "$4" ]; then
    PROBLEMS+=("$1: got '$2', want $3..$4")
  fi
}
expect_file_eq() {
  cmp -s "$2" "$3" || PROBLEMS+=("$1: $(basename "$2") differs from $(basename "$3") (sha256 $(sha256 "$2") vs $(sha256 "$3"), sizes $(stat -c %s "$2" 2>/dev/null || echo missing) vs $(stat -c %s "$3"))")
}
verdict() {
  if [ ${#PROBLEMS[@]} = 0 ]; then
    pass "$1"
  else
    local IFS=';'
    failc "$1: ${PROBLEMS[*]}"
  fi
  PROBLEMS=()
}

# record KEY VALUE: a line of the per-mode result that must be identical in
# the plain and every preloaded run.
record() { printf '%s=%s\n' "$1" "$2" >>"$D/result.txt"; }

sha256() { sha256sum "$1" 2>/dev/null | cut -d' ' -f1; }

# ---------------------------------------------------------------- processes
SERVER_PIDS=()
TMPDIRS=()

# mktmp VAR: set VAR to a new temp dir (world-readable so unprivileged server
# workers, e.g. nginx's, can read it), removed at exit.  (Not through $(...):
# the list of dirs to remove lives in this shell.)
mktmp() {
  local t
  t=$(mktemp -d /tmp/xpress-programs.XXXXXX)
  chmod 755 "$t"
  TMPDIRS+=("$t")
  printf -v "$1" '%s' "$t"
}

# Stop every server we started: TERM to the timeout(1) wrapper (forwards it to
# the server), then KILL to its process group (timeout(1) leads its own group).
stop_servers() {
  local pid
  [ ${#SERVER_PIDS[@]} -gt 0 ] || return 0
  for pid in "${SERVER_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 1 30); do
    local alive=0
    for pid in "${SERVER_PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for pid in "${SERVER_PIDS[@]}"; do
    kill -KILL -- "-$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  SERVER_PIDS=()
}

cleanup() {
  local rc=$?
  stop_servers
  local t
  for t in "${TMPDIRS[@]}"; do rm -rf "$t"; done
  exit $rc
}

# start_server NAME SECONDS CMD...: run CMD (with the mode's prefix) in the
# background, stdout/stderr to $D/NAME.out/.err; it dies after SECONDS anyway.
# Sets SERVER_PID (pid of the timeout wrapper; the server is its child).
start_server() {
  local name=$1 secs=$2
  shift 2
  timeout -k 3 "$secs" "${PRE[@]}" "$@" >"$D/$name.out" 2>"$D/$name.err" </dev/null &
  SERVER_PID=$!
  SERVER_PIDS+=("$SERVER_PID")
  echo "$*" >"$D/$name.cmd"
}

# stop_server NAME WRAPPER_PID [SIGNAL [STATUSES]]: ask a server to exit
# (default TERM), wait up to 10s; its exit status must be 0, the signal's or
# one of STATUSES, and is recorded (so it must also be the same with and
# without the library).
stop_server() {
  local name=$1 pid=$2 sig=${3:-TERM} ok=${4:-} rc=0 signum
  signum=$(kill -l "$sig")
  ok="0 $((128 + signum)) $ok"
  # Signal the server itself, once (timeout(1) would forward a signal sent to
  # it twice: to the child and to its process group).
  local child
  child=$(ps -o pid= --ppid "$pid" | head -1 | tr -d ' ' || true)
  kill "-$sig" "${child:-$pid}" 2>/dev/null || true
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    failc "$name did not exit within 10s of SIG$sig"
    return 0
  fi
  wait "$pid" 2>/dev/null || rc=$?
  local keep=() p
  for p in "${SERVER_PIDS[@]}"; do [ "$p" = "$pid" ] || keep+=("$p"); done
  SERVER_PIDS=("${keep[@]}")
  if [[ " $ok " == *" $rc "* ]]; then
    pass "$name exits cleanly on SIG$sig (status $rc)"
  else
    failc "$name exit status $rc after SIG$sig (want one of: $ok; see $(basename "$D")/$name.err)"
  fi
  record "$name.exit" "$rc"
}

# server_child PID: the pid of the real server under the timeout wrapper.
server_child() {
  local c
  for _ in $(seq 1 50); do
    c=$(ps -o pid= --ppid "$1" | head -1 | tr -d ' ' || true)
    [ -n "$c" ] && { echo "$c"; return 0; }
    sleep 0.05
  done
  return 1
}

# wait_listen NAME PORT WRAPPER_PID: wait until something listens on PORT.
wait_listen() {
  local name=$1 port=$2 pid=$3
  for _ in $(seq 1 200); do
    if [ -n "$(ss -Htln "sport = :$port" 2>/dev/null)" ]; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      fatal "$name exited before listening on port $port: $(tail -c 600 "$D/$name.err" | tr '\n' ' ')"
    fi
    sleep 0.05
  done
  fatal "$name not listening on port $port after 10s"
}

# free_port: a TCP port on 127.0.0.1 that is free now, below the ephemeral
# range so client connections cannot grab it.
free_port() { $PY "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/free-port.py"; }

# xrun NAME SECONDS CMD...: run a client in the foreground with the mode's
# prefix; stdout -> $D/NAME.out, stderr -> $D/NAME.err (the xpress statistics
# table lands there too).  A non-zero exit or a timeout is fatal for the mode.
# Stdin is inherited (callers redirect it; default is /dev/null from the driver).
xrun() {
  local name=$1 secs=$2
  shift 2
  echo "$*" >"$D/$name.cmd"
  local rc=0 t0=$EPOCHREALTIME
  timeout -k 3 "$secs" "${PRE[@]}" "$@" >"$D/$name.out" 2>"$D/$name.err" || rc=$?
  printf '%s\t%ss\tstatus %s\n' "$name" "$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }')" "$rc" >>"$D/timings"
  check_preload_err "$name"
  if [ $rc = 124 ] || [ $rc = 137 ]; then fatal "$name timed out after ${secs}s: $*"; fi
  if [ $rc != 0 ]; then
    # The program's own complaint: stderr without the xpress statistics table,
    # or stdout when that is empty (sockperf and our Python client print there).
    local why
    why=$(sed '/^xpress statistics/,$d' "$D/$name.err" | tail -c 500 | tr '\n' ' ')
    [ -n "${why// /}" ] || why=$(grep -v '^ *$' "$D/$name.out" | tail -c 500 | tr '\n' ' ')
    fatal "$name exited with status $rc: $* -- output: $why"
  fi
}

# ld.so only warns (and runs the program without it) when a preload fails.
check_preload_err() {
  if grep -q "cannot be preloaded" "$D/$1.err" 2>/dev/null; then
    fatal "$1: the dynamic loader could not preload $XPRESS_LIB: $(grep -m1 'cannot be preloaded' "$D/$1.err")"
  fi
}

# check_mapped NAME PID: in preloaded modes the library must be mapped into PID,
# in plain mode it must not be.
check_mapped() {
  local name=$1 pid=$2 lib
  lib=$(readlink -f "$XPRESS_LIB")
  if [ ! -r "/proc/$pid/maps" ]; then
    failc "$name (pid $pid) is not running, cannot inspect its mappings"
    return
  fi
  if grep -qF "$lib" "/proc/$pid/maps"; then
    if [ "$MODE" != plain ]; then pass "$name has the library loaded"; else failc "$name has $lib loaded in plain mode"; fi
  else
    if [ "$MODE" != plain ]; then failc "$name (pid $pid) does not have $lib mapped"; else pass "$name runs without the library"; fi
  fi
}
