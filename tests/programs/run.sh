#!/usr/bin/env bash
# Real programs under the xpress preload.
#
# Every case in tests/programs/cases/ runs in each mode, servers AND clients
# started the same way:
#   plain         no LD_PRELOAD
#   xpress        LD_PRELOAD=$XPRESS_LIB XPRESS_STATS=1 (default rules: loopback
#                 connections stay on TCP, reason rule_denied)
#   xpress-allow  as xpress plus XPRESS_RULES='allow * *': loopback connections
#                 are eligible, so the library looks for an RDMA device, finds
#                 none (or no path) and must fall back to TCP invisibly
# Each run validates its own results against the known input data (checksums,
# counts), and every preloaded run's normalized results must be identical to
# the plain run's.
#
# Usage: tests/programs/run.sh [CASE...]        (default: all cases)
# Env:   XPRESS_LIB     library to preload (default: build/libxpress.so)
#        PROGRAMS_LOG   log directory (default: build/tests/programs)
#        PROGRAMS_MODES modes to run (default: "plain xpress xpress-allow";
#                       plain is always run first and is the reference)
# Logs:  $PROGRAMS_LOG/CASE/{data,MODE}/ - every command line (.cmd), stdout
#        (.out), stderr (.err, with the xpress statistics table), durations
#        (timings), the checks and the compared result.txt.
set -euo pipefail
export LC_ALL=C

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/programs/lib.sh
source "$HERE/lib.sh"
cd "$PROG_ROOT"

XPRESS_LIB=${XPRESS_LIB:-$PROG_ROOT/build/libxpress.so}
case "$XPRESS_LIB" in /*) ;; *) XPRESS_LIB=$PROG_ROOT/$XPRESS_LIB ;; esac
export XPRESS_LIB
PROGRAMS_LOG=${PROGRAMS_LOG:-$PROG_ROOT/build/tests/programs}
case "$PROGRAMS_LOG" in /*) ;; *) PROGRAMS_LOG=$PROG_ROOT/$PROGRAMS_LOG ;; esac
export PROGRAMS_LOG
MODE_TIMEOUT=${MODE_TIMEOUT:-75}
read -r -a MODES <<<"${PROGRAMS_MODES:-plain xpress xpress-allow}"
mapfile -t MODES < <(printf '%s\n' plain "${MODES[@]}" | awk 'NF && !seen[$0]++')

ALL_CASES=(iperf3 sockperf redis nginx python-http memcached alloc)

# ------------------------------------------------------------ worker side
# run.sh __prepare CASE | run.sh __mode CASE MODE  (internal)
if [ "${1:-}" = __prepare ] || [ "${1:-}" = __mode ]; then
  what=$1
  CASE=$2
  MODE=${3:-prepare}
  CASE_DIR=$PROGRAMS_LOG/$CASE
  DATA=$CASE_DIR/data
  D=$CASE_DIR/$MODE
  [ "$what" = __prepare ] && D=$DATA
  mkdir -p "$D"
  export CASE MODE CASE_DIR DATA D
  case "$MODE" in
    plain) PRE=(env -u LD_PRELOAD -u XPRESS_STATS -u XPRESS_RULES) ;;
    xpress) PRE=(env -u XPRESS_RULES "LD_PRELOAD=$XPRESS_LIB" XPRESS_STATS=1) ;;
    xpress-allow) PRE=(env "LD_PRELOAD=$XPRESS_LIB" XPRESS_STATS=1 "XPRESS_RULES=allow * *") ;;
    prepare) PRE=(env -u LD_PRELOAD) ;;
    *) echo "programs: unknown mode $MODE" >&2; exit 2 ;;
  esac
  trap cleanup EXIT
  trap 'exit 143' TERM INT
  # shellcheck source=/dev/null
  source "$HERE/cases/$CASE.sh"
  if [ "$what" = __prepare ]; then
    if declare -F prepare >/dev/null; then prepare; fi
  else
    : >"$D/result.txt"
    run_mode
  fi
  exit 0
fi

# ------------------------------------------------------------ driver side
if [ ! -f "$XPRESS_LIB" ]; then
  echo "programs: $XPRESS_LIB does not exist (build it with 'make build/libxpress.so' or set XPRESS_LIB)" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
PATH=$PATH:/usr/sbin:/sbin
for tool in iperf3 sockperf redis-server redis-cli redis-benchmark nginx curl wrk memcached memccp memccat jq ss timeout; do
  command -v "$tool" >/dev/null || { echo "programs: $tool not installed (run 'make deps')" >&2; echo "0 passed, 1 failed"; exit 1; }
done

cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=("${ALL_CASES[@]}")
for c in "${cases[@]}"; do
  [ -f "$HERE/cases/$c.sh" ] || { echo "programs: no such case '$c' (have: ${ALL_CASES[*]})" >&2; exit 2; }
done

mkdir -p "$PROGRAMS_LOG"
SUMMARY=$PROGRAMS_LOG/summary.txt
: >"$SUMMARY"
passed=0
failed=0
t_all=$SECONDS
echo "programs: modes ${MODES[*]}; preloading $XPRESS_LIB; logs in ${PROGRAMS_LOG#"$PROG_ROOT"/}/"

# emit STATUS TEXT: print and count one check.
emit() {
  if [ "$1" = PASS ]; then
    passed=$((passed + 1))
    printf 'ok      %s\n' "$2"
  else
    failed=$((failed + 1))
    printf 'FAILED  %s\n' "$2"
  fi
  printf '%s\t%s\n' "$1" "$2" >>"$SUMMARY"
}

# run_worker SECONDS ARGS...: one worker (a fresh bash, so that its set -e and
# traps are its own) under timeout(1); an interrupt of the driver is passed on
# so that the worker's trap stops its servers.
WPID=""
run_worker() {
  local secs=$1
  shift
  timeout -k 5 "$secs" bash "$HERE/run.sh" "$@" </dev/null &
  WPID=$!
  local rc=0
  wait "$WPID" || rc=$?
  WPID=""
  return $rc
}
on_signal() {
  if [ -n "$WPID" ]; then
    kill -TERM "$WPID" 2>/dev/null || true
    wait "$WPID" 2>/dev/null || true
  fi
  echo "programs: interrupted"
  echo "$passed passed, $((failed + 1)) failed"
  exit 130
}
trap on_signal INT TERM

for c in "${cases[@]}"; do
  t0=$SECONDS
  rm -rf "${PROGRAMS_LOG:?}/$c"
  mkdir -p "$PROGRAMS_LOG/$c"
  rc=0
  run_worker 60 __prepare "$c" || rc=$?
  if [ $rc != 0 ]; then
    emit FAIL "[prepare] $c: preparing input data failed (status $rc)"
    continue
  fi
  aborted=""
  for mode in "${MODES[@]}"; do
    rc=0
    run_worker "$MODE_TIMEOUT" __mode "$c" "$mode" || rc=$?
    chk=$PROGRAMS_LOG/$c/$mode/checks
    nfail_before=$failed
    if [ -f "$chk" ]; then
      while IFS=$'\t' read -r st text; do emit "$st" "$text"; done <"$chk"
    fi
    [ $rc = 0 ] || aborted="$aborted $mode"
    if [ $rc != 0 ] && [ $failed = "$nfail_before" ]; then
      if [ $rc = 124 ] || [ $rc = 137 ]; then
        emit FAIL "[$mode] $c: timed out after ${MODE_TIMEOUT}s (see ${PROGRAMS_LOG#"$PROG_ROOT"/}/$c/$mode/)"
      else
        emit FAIL "[$mode] $c: aborted with status $rc (see ${PROGRAMS_LOG#"$PROG_ROOT"/}/$c/$mode/)"
      fi
    fi
  done
  a=$PROGRAMS_LOG/$c/plain/result.txt
  for mode in "${MODES[@]:1}"; do
    b=$PROGRAMS_LOG/$c/$mode/result.txt
    if [[ " $aborted " == *" plain "* ]] || [[ " $aborted " == *" $mode "* ]]; then
      emit FAIL "[plain=$mode] $c: not compared, run aborted:$aborted"
    elif [ -s "$a" ] && [ -f "$b" ] && cmp -s "$a" "$b"; then
      emit PASS "[plain=$mode] $c: identical output data ($(wc -l <"$a") items)"
    else
      emit FAIL "[plain=$mode] $c: output data differs between the plain and the $mode run"
      diff -u --label plain "$a" --label "$mode" "$b" 2>&1 | head -40 | sed 's/^/        /' || true
    fi
  done
  echo "        ($c: $((SECONDS - t0))s)"
done

echo "programs: finished in $((SECONDS - t_all))s"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
