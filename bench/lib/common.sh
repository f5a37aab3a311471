# shellcheck shell=bash
# Shared helpers for bench/*.sh: ports, server lifecycle, statistics.
# Servers run under timeout(1) (which leads its own process group) and are
# stopped by bench_cleanup, which callers install as an EXIT trap.

# shellcheck disable=SC2034 # used by the bench scripts
BENCH_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ -x /usr/bin/python3 ]; then BENCH_PY=/usr/bin/python3; else BENCH_PY=$(command -v python3); fi
PATH=$PATH:/usr/sbin:/sbin

BENCH_PIDS=()

# bench_free_port: a free TCP port on 127.0.0.1 below the ephemeral range.
bench_free_port() { $BENCH_PY "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/free-port.py"; }

# bench_start LOG SECONDS CMD...: start a server in the background (stdout and
# stderr to LOG); sets BENCH_PID to its timeout(1) wrapper.
bench_start() {
  local log=$1 secs=$2
  shift 2
  timeout -k 3 "$secs" "$@" >"$log" 2>&1 </dev/null &
  BENCH_PID=$!
  BENCH_PIDS+=("$BENCH_PID")
}

# bench_wait_listen PORT PID: wait (10s max) until PORT is listening.
bench_wait_listen() {
  local port=$1 pid=$2
  for _ in $(seq 1 200); do
    [ -n "$(ss -Htln "sport = :$port" 2>/dev/null)" ] && return 0
    kill -0 "$pid" 2>/dev/null || { echo "bench: server for port $port exited early" >&2; return 1; }
    sleep 0.05
  done
  echo "bench: nothing listening on port $port after 10s" >&2
  return 1
}

# bench_stop PID [SIGNAL]: signal the server (default TERM) directly, once
# (timeout(1) would forward a signal sent to it twice), KILL its process group
# after 3s.  Prefer a signal the server handles: a process killed by a signal
# cannot run the preload's exit path.
bench_stop() {
  local pid=$1 sig=${2:-TERM} child
  child=$(ps -o pid= --ppid "$pid" | head -1 | tr -d ' ' || true)
  kill "-$sig" "${child:-$pid}" 2>/dev/null || true
  for _ in $(seq 1 30); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL -- "-$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  local keep=() p
  for p in "${BENCH_PIDS[@]}"; do [ "$p" = "$pid" ] || keep+=("$p"); done
  BENCH_PIDS=("${keep[@]}")
}

bench_cleanup() {
  local rc=$? p
  for p in "${BENCH_PIDS[@]}"; do bench_stop "$p"; done
  exit $rc
}

# median V...: median of numbers ("" if none).
median() {
  printf '%s\n' "$@" | grep -E '^[0-9.eE+-]+$' | sort -g | awk '
    { v[NR] = $1 }
    END { if (NR == 0) exit; if (NR % 2) print v[(NR + 1) / 2]; else printf "%.6g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# ratio A B: A/B with 4 decimals ("n/a" if either is missing or B is 0).
ratio() {
  awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "n/a"; else printf "%.4f\n", a / b }'
}

# bench_vm_setup BIN [LIB.so ...]: for the scripts that compare kernel TCP
# with xpress builds in one Soft-RoCE VM boot: BIN must be built; the builds
# to compare (the arguments, or build/libxpress.so) go to BENCH_LIBS, and
# BENCH_GUEST names a temporary guest script, removed at exit.
bench_vm_setup() {
  local bin=$1
  shift
  [ -x "$bin" ] || { echo "build it first: make $bin" >&2; exit 1; }
  BENCH_LIBS=("$@")
  [ ${#BENCH_LIBS[@]} -gt 0 ] || BENCH_LIBS=("$BENCH_ROOT/build/libxpress.so")
  BENCH_GUEST=$(mktemp)
  trap 'rm -f "$BENCH_GUEST"' EXIT
}
