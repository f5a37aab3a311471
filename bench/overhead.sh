#!/usr/bin/env bash
# Overhead of the xpress preload on the pass-through path (loopback, no RDMA):
# sockperf TCP ping-pong latency (mean, p99; p50 too) and iperf3 TCP throughput
# (and its CPU cost per GB), each measured without and with LD_PRELOAD (server
# AND client preloaded), the two modes interleaved round by round
# (plain,xpress / xpress,plain / ...) so that drift of the machine cancels.  Prints a Markdown table of medians and the
# xpress/plain ratio and saves it to results/overhead.md and .json.
# Reports only: it never fails because of the numbers (target: within 2%).
#
# Env: XPRESS_LIB (default build/libxpress.so), ROUNDS (5), SP_SECS (3),
#      SP_MSG (64), IPERF_SECS (3), PIN (auto|0|1: server on CPU 0, client on
#      CPU 1), NICE (auto: -15 when root, else 0; niceness of the measured
#      processes, to shield them from other load on the machine), XPRESS_ENV
#      (extra VAR=value settings for the xpress runs),
#      RESULTS (results/), BENCH_LOG (build/bench/overhead/).
set -euo pipefail
export LC_ALL=C
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench/lib/common.sh
source "$HERE/lib/common.sh"
cd "$BENCH_ROOT"

XPRESS_LIB=${XPRESS_LIB:-$BENCH_ROOT/build/libxpress.so}
case "$XPRESS_LIB" in /*) ;; *) XPRESS_LIB=$BENCH_ROOT/$XPRESS_LIB ;; esac
ROUNDS=${ROUNDS:-5}
SP_SECS=${SP_SECS:-3}
SP_MSG=${SP_MSG:-64}
IPERF_SECS=${IPERF_SECS:-3}
PIN=${PIN:-auto}
NICE=${NICE:-auto}
XPRESS_ENV=${XPRESS_ENV:-}
RESULTS=${RESULTS:-$BENCH_ROOT/results}
BENCH_LOG=${BENCH_LOG:-$BENCH_ROOT/build/bench/overhead}

[ -f "$XPRESS_LIB" ] || { echo "overhead: $XPRESS_LIB does not exist (make build/libxpress.so)" >&2; exit 1; }
for t in sockperf iperf3 jq ss taskset timeout; do
  command -v "$t" >/dev/null || { echo "overhead: $t not installed (make deps)" >&2; exit 1; }
done

if [ "$PIN" = auto ]; then
  if [ "$(nproc)" -ge 2 ]; then PIN=1; else PIN=0; fi
fi
if [ "$NICE" = auto ]; then
  if [ "$(id -u)" = 0 ]; then NICE=-15; else NICE=0; fi
fi
NICE_CMD=()
[ "$NICE" = 0 ] || NICE_CMD=(nice -n "$NICE")
if [ "$PIN" = 1 ]; then
  # (nice and taskset run before env, so they are never preloaded)
  mapfile -t CPUS < <(taskset -pc $$ | sed 's/.*: //' | tr ',' '\n' |
    awk -F- '{ if (NF == 2) for (i = $1; i <= $2; i++) print i; else print $1 }')
  SRV_PIN=("${NICE_CMD[@]}" taskset -c "${CPUS[0]}")
  CLI_PIN=("${NICE_CMD[@]}" taskset -c "${CPUS[1]:-${CPUS[0]}}")
  PIN_DESC="server on CPU ${CPUS[0]}, client on CPU ${CPUS[1]:-${CPUS[0]}} (taskset)"
else
  SRV_PIN=("${NICE_CMD[@]}")
  CLI_PIN=("${NICE_CMD[@]}")
  PIN_DESC="not pinned"
fi
[ "$NICE" = 0 ] || PIN_DESC="$PIN_DESC, nice $NICE"

rm -rf "$BENCH_LOG"
mkdir -p "$BENCH_LOG" "$RESULTS"
trap bench_cleanup EXIT
trap 'exit 143' TERM INT

# mode_env MODE: the env(1) prefix of a mode.
mode_env() {
  if [ "$1" = xpress ]; then
    # shellcheck disable=SC2206
    ENV=(env "LD_PRELOAD=$XPRESS_LIB" $XPRESS_ENV)
  else
    ENV=(env -u LD_PRELOAD)
  fi
}

ERRORS=0
declare -A SAMPLES # "metric mode" -> space-separated values in round order
declare -A VAL     # "metric mode round" -> value

# add METRIC MODE ROUND VALUE
add() {
  SAMPLES["$1 $2"]="${SAMPLES["$1 $2"]:-} $4"
  VAL["$1 $2 $3"]=$4
}

# run_sockperf MODE ROUND
run_sockperf() {
  local mode=$1 r=$2 port log=$BENCH_LOG/sockperf-$1-$2
  mode_env "$mode"
  port=$(bench_free_port)
  bench_start "$log.server" $((SP_SECS + 30)) "${SRV_PIN[@]}" "${ENV[@]}" sockperf server --tcp -i 127.0.0.1 -p "$port"
  local srv=$BENCH_PID
  if bench_wait_listen "$port" "$srv" &&
    timeout -k 3 $((SP_SECS + 20)) "${CLI_PIN[@]}" "${ENV[@]}" \
      sockperf ping-pong --tcp -i 127.0.0.1 -p "$port" -t "$SP_SECS" -m "$SP_MSG" >"$log.client" 2>&1 </dev/null; then
    local mean p50 p99
    mean=$(grep -m1 -o 'avg-latency=[0-9.]*' "$log.client" | cut -d= -f2)
    p50=$(grep -m1 'percentile 50.000 =' "$log.client" | awk '{print $NF}')
    p99=$(grep -m1 'percentile 99.000 =' "$log.client" | awk '{print $NF}')
    if [ -n "$mean" ] && [ -n "$p50" ] && [ -n "$p99" ]; then
      add sp_mean "$mode" "$r" "$mean"
      add sp_p50 "$mode" "$r" "$p50"
      add sp_p99 "$mode" "$r" "$p99"
      printf '  round %s %-6s sockperf  mean %8.3f us  p50 %8.3f us  p99 %8.3f us\n' "$r" "$mode" "$mean" "$p50" "$p99"
    else
      echo "  round $r $mode sockperf: no latency in output ($log.client)" >&2
      ERRORS=$((ERRORS + 1))
    fi
  else
    echo "  round $r $mode sockperf: failed (see $log.client, $log.server)" >&2
    ERRORS=$((ERRORS + 1))
  fi
  bench_stop "$srv" INT
}

# run_iperf3 MODE ROUND
run_iperf3() {
  local mode=$1 r=$2 port log=$BENCH_LOG/iperf3-$1-$2
  mode_env "$mode"
  port=$(bench_free_port)
  bench_start "$log.server" $((IPERF_SECS + 30)) "${SRV_PIN[@]}" "${ENV[@]}" iperf3 -s -1 -B 127.0.0.1 -p "$port"
  local srv=$BENCH_PID
  if bench_wait_listen "$port" "$srv" &&
    timeout -k 3 $((IPERF_SECS + 20)) "${CLI_PIN[@]}" "${ENV[@]}" \
      iperf3 -c 127.0.0.1 -p "$port" -t "$IPERF_SECS" -J >"$log.json" 2>"$log.client.err" </dev/null; then
    local gbps cpu
    gbps=$(jq -r '.end.sum_received.bits_per_second / 1e9 * 1000 | round / 1000' "$log.json" 2>/dev/null || true)
    # CPU seconds (client + server, user + system) per GB received: less
    # sensitive to other load on the machine than the throughput.
    cpu=$(jq -r '(.end.cpu_utilization_percent.host_total + .end.cpu_utilization_percent.remote_total) / 100
      * .end.sum_received.seconds / (.end.sum_received.bytes / 1e9) * 10000 | round / 10000' "$log.json" 2>/dev/null || true)
    if [[ "$gbps" =~ ^[0-9.]+$ ]] && [[ "$cpu" =~ ^[0-9.]+$ ]]; then
      add ip_gbps "$mode" "$r" "$gbps"
      add ip_cpu "$mode" "$r" "$cpu"
      printf '  round %s %-6s iperf3    %8.3f Gbit/s  %6.4f CPU s/GB\n' "$r" "$mode" "$gbps" "$cpu"
    else
      echo "  round $r $mode iperf3: no throughput in $log.json" >&2
      ERRORS=$((ERRORS + 1))
    fi
  else
    echo "  round $r $mode iperf3: failed (see $log.json, $log.client.err, $log.server)" >&2
    ERRORS=$((ERRORS + 1))
  fi
  bench_stop "$srv"
}

echo "overhead: $ROUNDS rounds, sockperf ${SP_SECS}s x ${SP_MSG} B, iperf3 ${IPERF_SECS}s; $PIN_DESC"
echo "overhead: preloading $XPRESS_LIB${XPRESS_ENV:+ with $XPRESS_ENV}"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$SECONDS
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order=(plain xpress); else order=(xpress plain); fi
  for mode in "${order[@]}"; do run_sockperf "$mode" "$r"; done
  for mode in "${order[@]}"; do run_iperf3 "$mode" "$r"; done
done

# ------------------------------------------------------------------ report
# metric key | label | unit | better
METRICS=(
  "sp_mean|sockperf TCP ping-pong ${SP_MSG} B, ${SP_SECS} s: mean latency|us|lower"
  "sp_p50|sockperf TCP ping-pong ${SP_MSG} B, ${SP_SECS} s: median latency|us|lower"
  "sp_p99|sockperf TCP ping-pong ${SP_MSG} B, ${SP_SECS} s: p99 latency|us|lower"
  "ip_gbps|iperf3 TCP 1 stream, ${IPERF_SECS} s: throughput|Gbit/s|higher"
  "ip_cpu|iperf3 TCP 1 stream, ${IPERF_SECS} s: CPU time, client + server|s/GB|lower"
)

git_rev=$(git -C "$BENCH_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
git_dirty=""
if git -C "$BENCH_ROOT" status --porcelain 2>/dev/null | grep -q .; then git_dirty="+changes"; fi
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//' || echo unknown)
when=$(date -u +%Y-%m-%dT%H:%M:%SZ)

load_after=$(cut -d' ' -f1-3 /proc/loadavg)
md=$BENCH_LOG/overhead.md
json_metrics=()
{
  echo "## xpress pass-through overhead (loopback)"
  echo
  echo "$when, $(uname -sr), $(nproc) CPUs ($cpu), git $git_rev$git_dirty."
  echo "Library \`${XPRESS_LIB#"$BENCH_ROOT"/}\`${XPRESS_ENV:+ with \`$XPRESS_ENV\`}; server and client both preloaded;"
  echo "$ROUNDS rounds, modes interleaved (plain,xpress / xpress,plain / ...); $PIN_DESC;"
  echo "load average $load_before before, $load_after after."
  # (only the load before counts: during the run the benchmark itself adds ~2)
  if awk -v l="${load_before%% *}" -v n="$(nproc)" 'BEGIN { exit !(l > n / 2) }'; then
    echo
    echo "**Warning: the machine was busy before the run (1-minute load average above $(nproc)/2); the numbers may be noisy.**"
  fi
  echo "Medians over the rounds; xpress/plain is the ratio of the medians, overhead > 0 means"
  echo "xpress is slower (target: within 2%); the paired ratio is the median of the per-round"
  echo "ratios (each round's two runs are adjacent in time, so it resists drift best)."
  echo
  echo "| benchmark | plain | xpress | xpress/plain | overhead | paired ratio |"
  echo "|---|---:|---:|---:|---:|---:|"
  for m in "${METRICS[@]}"; do
    IFS='|' read -r key label unit better <<<"$m"
    # shellcheck disable=SC2086
    p=$(median ${SAMPLES["$key plain"]:-})
    # shellcheck disable=SC2086
    x=$(median ${SAMPLES["$key xpress"]:-})
    rt=$(ratio "$x" "$p")
    if [ "$rt" = n/a ]; then
      ov=n/a
    elif [ "$better" = lower ]; then
      ov=$(awk -v r="$rt" 'BEGIN { printf "%+.1f%%", (r - 1) * 100 }')
    else
      ov=$(awk -v r="$rt" 'BEGIN { printf "%+.1f%%", (1 / r - 1) * 100 }')
    fi
    per_round=()
    for r in $(seq 1 "$ROUNDS"); do per_round+=("$(ratio "${VAL["$key xpress $r"]:-}" "${VAL["$key plain $r"]:-}")"); done
    pmed=$(median "${per_round[@]}")
    pmed=$(awk -v v="$pmed" 'BEGIN { if (v == "") print "n/a"; else printf "%.4f\n", v }')
    echo "| $label ($unit, $better is better) | ${p:-n/a} | ${x:-n/a} | $rt | $ov | $pmed |"
    json_metrics+=("$(jq -n --arg key "$key" --arg lbl "$label" --arg unit "$unit" --arg better "$better" \
      --arg p "${SAMPLES["$key plain"]:-}" --arg x "${SAMPLES["$key xpress"]:-}" \
      --arg pm "${p:-}" --arg xm "${x:-}" --arg ratio "$rt" --arg ov "$ov" --arg pr "${per_round[*]}" \
      --arg pmed "$pmed" '
      def nums: [splits(" +") | select(length > 0) | tonumber];
      {key: $key, label: $lbl, unit: $unit, better: $better,
       plain: ($p | nums), xpress: ($x | nums),
       plain_median: (if $pm == "" then null else ($pm | tonumber) end),
       xpress_median: (if $xm == "" then null else ($xm | tonumber) end),
       ratio: (if $ratio == "n/a" then null else ($ratio | tonumber) end),
       paired_ratio: (if $pmed == "n/a" then null else ($pmed | tonumber) end),
       per_round_ratios: [$pr | splits(" +") | select(length > 0) | if . == "n/a" then null else tonumber end],
       overhead: $ov}')")
  done
  echo
  echo "Runs in order of rounds:"
  echo
  for m in "${METRICS[@]}"; do
    IFS='|' read -r key label unit better <<<"$m"
    per_round=()
    for r in $(seq 1 "$ROUNDS"); do per_round+=("$(ratio "${VAL["$key xpress $r"]:-}" "${VAL["$key plain $r"]:-}")"); done
    # shellcheck disable=SC2086 # the samples are space-separated numbers
    echo "- $label ($unit): plain$(printf ' %s' ${SAMPLES["$key plain"]:-}); xpress$(printf ' %s' ${SAMPLES["$key xpress"]:-}); per-round xpress/plain$(printf ' %s' "${per_round[@]}")"
  done
  if [ "$ERRORS" != 0 ]; then
    echo
    echo "**$ERRORS measurement(s) failed to run; see ${BENCH_LOG#"$BENCH_ROOT"/}/.**"
  fi
} >"$md"

printf '%s\n' "${json_metrics[@]}" | jq -s --arg when "$when" --arg kernel "$(uname -sr)" --arg cpu "$cpu" \
  --arg git "$git_rev$git_dirty" --arg lib "$XPRESS_LIB" --arg xenv "$XPRESS_ENV" --arg pin "$PIN_DESC" \
  --arg lb "$load_before" --arg la "$load_after" \
  --argjson rounds "$ROUNDS" --argjson sp_secs "$SP_SECS" --argjson sp_msg "$SP_MSG" \
  --argjson iperf_secs "$IPERF_SECS" --argjson errors "$ERRORS" --argjson ncpu "$(nproc)" '
  {date: $when, kernel: $kernel, cpu: $cpu, cpus: $ncpu, git: $git, library: $lib, xpress_env: $xenv,
   pinning: $pin, loadavg_before: $lb, loadavg_after: $la, rounds: $rounds, sockperf_seconds: $sp_secs, sockperf_msg_size: $sp_msg,
   iperf3_seconds: $iperf_secs, failed_measurements: $errors, metrics: .}' >"$BENCH_LOG/overhead.json"

cp "$md" "$RESULTS/overhead.md"
cp "$BENCH_LOG/overhead.json" "$RESULTS/overhead.json"
echo
cat "$md"
echo
echo "overhead: ${SECONDS}s total ($((SECONDS - t0))s measuring); saved ${RESULTS#"$BENCH_ROOT"/}/overhead.md and overhead.json, raw output in ${BENCH_LOG#"$BENCH_ROOT"/}/"
[ "$ERRORS" = 0 ]
