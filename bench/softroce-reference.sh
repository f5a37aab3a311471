#!/usr/bin/env bash
# Reference numbers of the Soft-RoCE test bed (`make bench-reference`; not part
# of `make test`): raw Soft-RoCE verbs latency/bandwidth, kernel TCP over the
# same veth, and rsocket's preload with the same programs, in one VM boot.
# Prints a Markdown table and writes it to results/softroce-reference.md.
#
#   bench/softroce-reference.sh [--seconds N] [--timeout SECS] [--idle-poll]
#
# --idle-poll boots the guest with idle=poll: idle vCPUs spin instead of
# sleeping in the host, so blocking programs (sockperf, iperf3, rstream) stop
# paying host scheduler wake-ups (~1-3 ms per wake-up when other jobs load the
# host's cores).  Busy-polling perftest barely changes.  Costs 2 host cores
# for the whole run.
#
# Numbers under TCG are 10x+ below native and vary +-30% between boots (more
# when the host is busy): compare rows of one run, not runs of different days.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
secs=5 timeout_s=900 idle=""
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) secs=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --idle-poll) idle=idle=poll; shift ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "softroce-reference: unknown argument $1" >&2; exit 2 ;;
  esac
done

# The sockperf-over-rsocket workaround (see bench/reference/rs-sendto-fix.c).
fix=$repo/build/bench-reference/rs-sendto-fix.so
mkdir -p "$(dirname "$fix")" "$repo/results"
if [ ! -f "$fix" ] || [ "$here/reference/rs-sendto-fix.c" -nt "$fix" ]; then
  ${CC:-gcc} -O2 -shared -fPIC -Wall -Wextra -o "$fix" "$here/reference/rs-sendto-fix.c" -ldl ||
    { echo "softroce-reference: cannot build the sendto shim; that row is skipped" >&2; fix=""; }
fi

out=$repo/results/softroce-reference${idle:+-idle-poll}.md
table=$(mktemp)
trap 'rm -f "$table"' EXIT
rc=0
XP_KERNEL_ARGS="${XP_KERNEL_ARGS:-} $idle" "$repo/tools/softroce/vm" run --timeout "$timeout_s" -e "BENCH_SECONDS=$secs" -e "RS_SENDTO_FIX=$fix" \
  -- bash "$here/reference/guest.sh" > "$table" || rc=$?
if [ $rc != 0 ] || ! grep -q '^| case |' "$table"; then
  cat "$table"
  echo "softroce-reference: the benchmark VM failed (exit $rc)" >&2
  exit $(( rc == 0 ? 1 : rc ))
fi
kver=$(cat "${XPRESS_SOFTROCE_DIR:-$repo/build/softroce}/kernel/.ok" 2>/dev/null || echo '?')
{
  echo "# Soft-RoCE reference numbers"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), guest kernel $kver${idle:+ ($idle)} under qemu TCG (2 vCPUs, $(nproc) host cores," \
       "host load average $(cut -d' ' -f1-3 /proc/loadavg)); ${secs} s per timed case; 10.77.0.1 (veth0/rxe0) <-> 10.77.0.2 (veth1/rxe1)."
  echo "Produced by \`make bench-reference\` (bench/softroce-reference.sh). Everything is 10x+ slower than native under TCG"
  echo "and varies +-30% between boots: compare rows of one run. Latencies are one way (half the round trip)."
  echo
  cat "$table"
} > "$out"
cat "$out"
echo
echo "softroce-reference: written to ${out#"$repo"/}" >&2
