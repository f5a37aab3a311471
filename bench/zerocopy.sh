#!/usr/bin/env bash
# Zero-copy sends on vs off: xpress-bench stream at several message sizes in
# one Soft-RoCE VM boot, interleaved rounds, throughput and CPU seconds per GB
# of both processes over a window after the upgrade (bench/zerocopy_guest.py).
#   bench/zerocopy.sh [OUT.jsonl]        (default results/zerocopy.jsonl)
# Env: ZC_SIZES (bytes, comma-separated; default 64K,256K,1M,4M), ZC_ROUNDS (3),
#   ZC_WARM / ZC_MEASURE (seconds, 3 / 5), ZC_MIN_KB (the "on" variant's
#   XPRESS_ZEROCOPY_MIN_KB, default 16: every size goes zero-copy).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-$REPO/results/zerocopy.jsonl}
mkdir -p "$(dirname "$OUT")"
envs=()
for v in ZC_SIZES ZC_ROUNDS ZC_WARM ZC_MEASURE ZC_MIN_KB; do
  [ -z "${!v:-}" ] || envs+=(-e "$v=${!v}")
done
"$REPO/tools/softroce/vm" run -q --timeout "${ZC_VM_TIMEOUT:-900}" "${envs[@]}" -- \
  python3 "$REPO/bench/zerocopy_guest.py" | tee "$OUT"
python3 - "$OUT" <<'PY'
import json, sys, statistics as st
runs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print("\n| size | zero-copy | Gb/s (median, range) | client CPU s/GB | server CPU s/GB | zero-copy share of tx | runs |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for size in sorted({r["size"] for r in runs}):
    for zc in (0, 1):
        rs = [r for r in runs if r["size"] == size and r["zerocopy"] == zc and r.get("ok")]
        if not rs:
            continue
        def col(k, f="%.2f"):
            v = [r[k] for r in rs if r.get(k) is not None]
            return (f + " (" + f + "-" + f + ")") % (st.median(v), min(v), max(v)) if v else "n/a"
        share = sum(r["zc_bytes"] for r in rs) / max(1, sum(r["zc_bytes"] + r["copied_bytes"] for r in rs))
        print("| %s | %s | %s | %s | %s | %.0f%% | %d |" % (
            "%d KiB" % (size // 1024) if size < 1 << 20 else "%d MiB" % (size >> 20), "on" if zc else "off",
            col("gbps", "%.3f"), col("client_cpu_s_per_gb"), col("server_cpu_s_per_gb"), 100 * share, len(rs)))
PY
