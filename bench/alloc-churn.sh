#!/usr/bin/env bash
# Allocator churn: build/bench/alloc-churn plain (glibc malloc) and under the
# preload (the hooked allocator), interleaved ROUNDS times; prints each run
# and the median ratios (throughput and peak RSS, preload / glibc).  Both
# runs are the same binary with the same arguments and seed: the same
# workload and threads, only the allocator differs.
# Knobs: ROUNDS (3), THREADS (2), OPS (30000 per thread), LIVE (64), XPRESS_LIB.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/bench/alloc-churn
LIB=${XPRESS_LIB:-$PWD/build/libxpress.so}
ROUNDS=${ROUNDS:-3}
args=(--threads "${THREADS:-2}" --ops "${OPS:-30000}" --live "${LIVE:-64}")
plain=() hooked=()
for r in $(seq 1 "$ROUNDS"); do
  p=$(env -u LD_PRELOAD "$BIN" "${args[@]}" --seed "$r")
  h=$(env LD_PRELOAD="$LIB" "$BIN" "${args[@]}" --seed "$r")
  echo "round $r glibc:  $p"
  echo "round $r xpress: $h"
  plain+=("$p")
  hooked+=("$h")
done
python3 - "${plain[@]}" -- "${hooked[@]}" <<'PY'
import json, statistics, sys
a = sys.argv[1:]
i = a.index("--")
plain = [json.loads(x) for x in a[:i]]
hooked = [json.loads(x) for x in a[i + 1:]]
def med(rows, key):
    return statistics.median(r[key] for r in rows)
print("| metric | glibc | xpress | xpress/glibc |")
print("| --- | ---: | ---: | ---: |")
for key, name in (("ops_per_sec", "operations/s"), ("ops_per_cpu_sec", "operations/CPU s"),
                  ("peak_rss_kb", "peak RSS (KiB)"), ("end_rss_kb", "RSS at end (KiB)")):
    p, h = med(plain, key), med(hooked, key)
    print(f"| {name} | {p:.0f} | {h:.0f} | {h / p:.2f} |")
PY
