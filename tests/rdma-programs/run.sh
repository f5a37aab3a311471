#!/usr/bin/env bash
# RDMA program tests: real programs under xpress on both ends, across the
# Soft-RoCE test bed (server on 10.77.0.2, client from 10.77.0.1, traffic
# through the veth pair and rxe0/rxe1).  Every case checks
#   (a) the data (checksums, expected outputs),
#   (b) the statistics of client AND server processes (XPRESS_STATS=json at
#       exit, xpress-stat --json for servers before they are stopped): their
#       connections in mode rdma, the bytes counted under rdma,
#   (c) the counters: the rxe devices sent packets and RoCE (UDP 4791) bytes
#       on the veth reach the payload; TCP on the veth carried little.
# The fallback case checks the opposite: a peer without xpress keeps TCP,
# reason peer_not_accelerated, the data intact.
#
# Usage: tests/rdma-programs/run.sh [CASE...]     (default: all cases)
#   On the host it boots the VM once (tools/softroce/vm) and runs itself
#   inside; inside the VM it runs the cases.  Prints PASS/FAIL per check and
#   ends with "N passed, M failed"; exits 1 on any failure.
# Env: XPRESS_LIB (default build/libxpress.so), XPRESS_TEST_LIB (the test
#   library, for fault injection: default build/test/libxpress.so), XPRESS_STAT (default
#   build/xpress-stat), RDMA_PROGRAMS_LOG (logs, default
#   build/tests/rdma-programs), RDMA_PROGRAMS_VM_TIMEOUT (whole VM, 1560 s),
#   RDMA_PROGRAMS_BUDGET (the cases together, 1440 s: a case's deadline is
#   cut to what is left, a case with less than 20 s left is not run),
#   RDMA_MIN_PCT / TCP_MAX_PCT / TCP_CONN_ALLOW (thresholds, see lib.sh);
#   FORGER_N / FORGER_REPORT (cases/forger.sh: flood size, print numbers);
#   SCALE_N / SCALE_ROUNDS / BASE_LIB / SCALE_PERF (cases/scale.sh); IPERF_ONLY (cases/iperf3.sh);
#   PG_RUNS (cases/postgres.sh: preloaded runs in the one boot);
#   the caller's XPRESS_* (e.g. XPRESS_LOG_LEVEL) reach the programs.
# Logs: $RDMA_PROGRAMS_LOG/CASE/: each command (.cmd, .out, .err), the
#   statistics (stats/NAME.PID.json), results.tsv.
set -uo pipefail # no -e: a failed check is counted, not fatal
export LC_ALL=C

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SELF=$HERE/run.sh
REPO=$(cd "$HERE/../.." && pwd)
# postgres runs before kfeat: its server is an unprivileged user, who cannot
# list IPsec policies, so once kfeat has loaded esp4 in this boot xpress keeps
# its connections on TCP (reason ipsec), as it must.
ALL_CASES=(iperf3 sockperf redis nginx memcached node bulk zerocopy exit idle fallback recovery fork postgres kfeat probe dualstack ipv6 java grpc asyncio forger forkshare redisfork)
# per-case deadline (seconds) of the case worker; the steps inside have their own
declare -A CASE_TIMEOUT=([iperf3]=150 [sockperf]=60 [redis]=90 [nginx]=90 [memcached]=120 [node]=150 [bulk]=150 [zerocopy]=150 [exit]=240 [fallback]=300 [recovery]=540 [fork]=240 [forkshare]=180 [redisfork]=150 [postgres]=$((300 + 60 * (${PG_RUNS:-1} - 1))) [scale]=580 [kfeat]=150 [probe]=90 [dualstack]=120 [java]=300 [grpc]=150 [asyncio]=240 [forger]=$((${FORGER_N:-2000} > 2000 ? 900 : 240)))

LIB=${XPRESS_LIB:-$REPO/build/libxpress.so}
case $LIB in /*) ;; *) LIB=$REPO/$LIB ;; esac
TEST_LIB=${XPRESS_TEST_LIB:-$REPO/build/test/libxpress.so}
case $TEST_LIB in /*) ;; *) TEST_LIB=$REPO/$TEST_LIB ;; esac
XSTAT=${XPRESS_STAT:-$REPO/build/xpress-stat}
case $XSTAT in /*) ;; *) XSTAT=$REPO/$XSTAT ;; esac
LOG=${RDMA_PROGRAMS_LOG:-$REPO/build/tests/rdma-programs}
case $LOG in /*) ;; *) LOG=$REPO/$LOG ;; esac
export XPRESS_LIB=$LIB XPRESS_TEST_LIB=$TEST_LIB XPRESS_STAT=$XSTAT RDMA_PROGRAMS_LOG=$LOG

for c in "$@"; do
  case $c in __case) break ;; esac
  [ -f "$HERE/cases/$c.sh" ] || { echo "rdma-programs: no such case '$c' (have: ${ALL_CASES[*]})"; echo "0 passed, 1 failed"; exit 2; }
done

# ====================================================================== host
if [ -z "${XPRESS_SOFTROCE_VM:-}" ]; then
  for f in "$LIB" "$XSTAT"; do
    [ -f "$f" ] || { echo "rdma-programs: $f missing (make $LIB build/xpress-stat)"; echo "0 passed, 1 failed"; exit 1; }
  done
  out=$(mktemp)
  trap 'rm -f "$out"' EXIT
  start=$SECONDS
  # The VM passes the caller's XPRESS_* on by itself; our own knobs too:
  envs=(-e "RDMA_PROGRAMS_LOG=$LOG")
  for v in RDMA_PROGRAMS_BUDGET RDMA_MIN_PCT TCP_MAX_PCT TCP_CONN_ALLOW RDMA_LOG_LEVEL RECOVERY_RUNS FORGER_N FORGER_REPORT SCALE_N SCALE_ROUNDS BASE_LIB SCALE_PERF IPERF_ONLY PG_RUNS; do
    [ -z "${!v:-}" ] || envs+=(-e "$v=${!v}")
  done
  "$REPO/tools/softroce/vm" run -q --timeout "${RDMA_PROGRAMS_VM_TIMEOUT:-1560}" "${envs[@]}" -- bash "$SELF" "$@" | tee "$out"
  rc=${PIPESTATUS[0]}
  echo "test-rdma-programs: $((SECONDS - start)) s wall clock (VM boot included)"
  if ! grep -qE '^[0-9]+ passed, [0-9]+ failed$' "$out"; then
    case $rc in
      77) echo "rdma-programs: the Soft-RoCE kernel is not prepared (make deps)" ;;
      124) echo "rdma-programs: the VM timed out (RDMA_PROGRAMS_VM_TIMEOUT=${RDMA_PROGRAMS_VM_TIMEOUT:-1560})" ;;
      *) echo "rdma-programs: the VM did not run the tests to their end (exit $rc)" ;;
    esac
    echo "$(grep -c '^PASS ' "$out") passed, $(($(grep -c '^FAIL ' "$out") + 1)) failed"
    exit 1
  fi
  [ "$rc" = 0 ] || exit 1
  exit 0
fi

# ====================================================================== VM
PY=/usr/bin/python3
[ -x $PY ] || PY=$(command -v python3)
A0=${XP_ADDR0:-10.77.0.1}
A1=${XP_ADDR1:-10.77.0.2}
WORK=${TMPDIR:-/tmp}/rdma-programs
RESULTS=$WORK/results.tsv
export PY A0 A1 WORK RESULTS LIB XSTAT LOG

# ---------------------------------------------------------------- case worker
# run.sh __case NAME: one case, in its own bash under the case deadline.
if [ "${1:-}" = __case ]; then
  CASE=$2
  CD=$LOG/$CASE
  T=$WORK/$CASE
  export CASE CD T
  # shellcheck source=tests/rdma-programs/lib.sh
  source "$HERE/lib.sh"
  trap cleanup EXIT
  trap 'exit 143' TERM INT
  # shellcheck source=/dev/null
  source "$HERE/cases/$CASE.sh"
  run_case
  exit 0
fi

# ---------------------------------------------------------------- driver
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=("${ALL_CASES[@]}")
mkdir -p "$WORK" "$LOG"
: >"$RESULTS"
t_all=$SECONDS
BUDGET=${RDMA_PROGRAMS_BUDGET:-1440}
summary=()
# harness failures count like checks
hfail() { printf 'FAIL\t%s\n' "$1" >>"$RESULTS"; echo "FAIL  $1"; }

echo "rdma-programs: cases ${cases[*]}; preloading $LIB; server $A1, client $A0; logs in ${LOG#"$REPO"/}/"
echo "rdma-programs: thresholds: RDMA >= ${RDMA_MIN_PCT:-80}% of the payload, TCP <= ${TCP_MAX_PCT:-20}% + ${TCP_CONN_ALLOW:-4096} B per connection"

# Prerequisites.
missing=()
for t in iperf3 sockperf redis-server redis-cli redis-benchmark nginx curl wrk memcached memccp memccat memcslap jq ss tc rxe-counters sha256sum; do
  command -v "$t" >/dev/null || missing+=("$t")
done
[ ${#missing[@]} = 0 ] || hfail "setup: not installed: ${missing[*]} (make deps)"
[ -f "$LIB" ] || hfail "setup: $LIB missing"

# tc byte counters on the egress of both veth ends: TCP (pref 1, IPv6: 3)
# and RoCE v2, UDP port 4791 (pref 2, IPv6: 4).  rxe counts packets only; these count bytes and
# separate the two kinds of traffic on the same wire.
setup_tc() {
  local d
  modprobe -d "$XP_KROOT" -a sch_ingress cls_u32 act_gact || return 1
  for d in veth0 veth1; do
    tc qdisc replace dev $d clsact &&
      tc filter add dev $d egress protocol ip pref 1 u32 match ip protocol 6 0xff action pass &&
      tc filter add dev $d egress protocol ip pref 2 u32 match ip protocol 17 0xff match ip dport 4791 0xffff action pass &&
      tc filter add dev $d egress protocol ipv6 pref 3 u32 match ip6 protocol 6 0xff action pass &&
      tc filter add dev $d egress protocol ipv6 pref 4 u32 match ip6 protocol 17 0xff match ip6 dport 4791 0xffff action pass ||
      return 1
  done
}
if setup_tc 2>"$WORK/tc.err"; then
  echo "rdma-programs: tc byte counters on veth0/veth1 egress (TCP, RoCE v2 UDP/4791)"
else
  hfail "setup: tc counters on the veth could not be installed: $(tr '\n' ' ' <"$WORK/tc.err")"
fi
echo "rdma-programs: rxe devices: $(cd /sys/class/infiniband 2>/dev/null && echo *) ($(ibv_devinfo -d rxe0 2>/dev/null | grep -o 'active_mtu:.*' | tr -s '\t ' ' '))"

# Interrupted (the VM's own deadline, Ctrl-C): stop the running case (its
# exit trap stops its servers) and still end with the summary line.
WORKER=""
on_signal() {
  if [ -n "$WORKER" ]; then
    kill -TERM "$WORKER" 2>/dev/null
    wait "$WORKER" 2>/dev/null
  fi
  echo "FAIL  rdma-programs: interrupted"
  echo "$(grep -c '^PASS' "$RESULTS") passed, $(($(grep -c '^FAIL' "$RESULTS") + 1)) failed"
  exit 130
}
trap on_signal INT TERM

for c in "${cases[@]}"; do
  t0=$SECONDS
  rm -rf "${LOG:?}/$c" "${WORK:?}/$c"
  mkdir -p "$LOG/$c/stats" "$WORK/$c"
  # servers that drop root (memcached -u nobody) still write their statistics
  chmod 1777 "$LOG/$c/stats"
  n0=$(grep -c '^FAIL' "$RESULTS")
  p0=$(grep -c '^PASS' "$RESULTS")
  secs=${CASE_TIMEOUT[$c]:-90}
  left=$((BUDGET - (SECONDS - t_all)))
  if [ "$left" -lt 20 ]; then
    hfail "$c: not run: only $left s left of the ${BUDGET} s budget"
    summary+=("$(printf '%-10s not run (time budget)' "$c")")
    continue
  fi
  [ "$secs" -le "$left" ] || secs=$left
  echo "---- $c (deadline ${secs} s)"
  rc=0
  CASE_SECS=$secs timeout -k 5 "$secs" bash "$SELF" __case "$c" </dev/null &
  WORKER=$!
  wait "$WORKER" || rc=$?
  WORKER=""
  if [ $rc = 124 ] || [ $rc = 137 ]; then
    hfail "$c: case timed out after ${secs} s (see ${LOG#"$REPO"/}/$c/); its last steps, and the busiest processes now:"
    tail -n 4 "$LOG/$c/trace" 2>/dev/null | cut -c1-200 | sed 's/^/        trace /'
    ps -eo pid,pcpu,etimes,args --sort=-pcpu 2>/dev/null |
      awk 'NR == 1 || ($4 !~ /^(ps|awk|head|cut|sed)$/ && $4 !~ /^\[/)' | head -6 | cut -c1-150 | sed 's/^/        /'
  elif [ $rc != 0 ] && [ "$(grep -c '^FAIL' "$RESULTS")" = "$n0" ]; then
    hfail "$c: case aborted with status $rc (see ${LOG#"$REPO"/}/$c/)"
  fi
  # Servers or clients left by a case that was killed: their process groups.
  if [ -f "$LOG/$c/pids" ]; then
    while read -r p; do
      if kill -0 "$p" 2>/dev/null; then
        kill -KILL -- "-$p" 2>/dev/null && hfail "$c: process group $p (a server or client of the case) still running after it: killed"
      fi
    done <"$LOG/$c/pids"
  fi
  np=$(($(grep -c '^PASS' "$RESULTS") - p0))
  nf=$(($(grep -c '^FAIL' "$RESULTS") - n0))
  summary+=("$(printf '%-10s %3d passed %3d failed %4d s' "$c" "$np" "$nf" $((SECONDS - t0)))")
  echo "        ($c: $((SECONDS - t0)) s)"
  rm -rf "${WORK:?}/$c"
done

cp "$RESULTS" "$LOG/results.tsv" 2>/dev/null
echo "---- summary ($((SECONDS - t_all)) s in the VM)"
printf '  %s\n' "${summary[@]}"
# CI keeps only the head and the tail of a long log: repeat the failed
# checks here, after the summary, so the tail alone names them.
if grep -q '^FAIL' "$RESULTS"; then
  echo "---- failed checks"
  grep '^FAIL' "$RESULTS" | cut -f2- | cut -c1-400 | sed 's/^/  FAIL  /'
fi
passed=$(grep -c '^PASS' "$RESULTS")
failed=$(grep -c '^FAIL' "$RESULTS")
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
