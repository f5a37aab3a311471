#!/usr/bin/python3
"""Unit test of report.py's comparison against raw verbs (no VM): the paired
ratio (median of same-round ratios) is what decides, against the faster raw
variant, and a drifting round does not move it.  Run by `make test-compare-report`."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402


def variant(by_round):
    vals = [by_round[k] for k in sorted(by_round)]
    return {"applicable": True, "metrics": {"lat_mean_us": {"median": report._median(vals), "by_round": by_round},
                                            "gbps": {"median": report._median(vals) / 100, "by_round":
                                                     {k: x / 100 for k, x in by_round.items()}}}}


def main():
    fails = 0

    def check(ok, what):
        nonlocal fails
        print(("ok   " if ok else "FAIL ") + what)
        fails += 0 if ok else 1

    # Round 2 is slow for everyone (host drift); xpress is 1.2x send and 1.25x write in every round.
    send = {1: 50.0, 2: 100.0, 3: 55.0}
    write = {k: x * 0.96 for k, x in send.items()}
    xp = {1: 60.0, 2: 120.0, 3: 66.0}
    # ...except that xpress's round 3 landed in a slow stretch of its own.
    xp[3] = 110.0
    entry = {"scenario": "pingpong",
             "variants": {"xpress": variant(xp), "verbs-send": variant(send), "verbs-write": variant(write)}}
    rows = report.raw_rows(entry)
    check(len(rows) == 1 and rows[0]["metric"] == "lat_mean_us", "pingpong: one row per latency metric present")
    r = rows[0]
    check(r["floor"] == "verbs-write", "the floor is the faster raw variant")
    check(abs(r["vs"]["verbs-send"]["paired"] - 1.2) < 1e-9, "paired ratio is the median of same-round ratios")
    check(abs(r["vs"]["verbs-send"]["ratio"] - 110.0 / 55.0) < 1e-9, "ratio of the medians kept beside it")
    check(r["met"] is True and r["target"] == report.RAW_LATENCY_MAX, "latency within 1.3x: met (paired 1.25x)")
    xp2 = {k: x * 1.1 for k, x in xp.items()}  # 1.32x and 1.375x paired
    entry["variants"]["xpress"] = variant(xp2)
    check(report.raw_rows(entry)[0]["met"] is False, "1.375x the faster floor: not met")
    # Throughput: higher is better, the floor is the higher raw variant.
    st = {"scenario": "stream", "variants": {"xpress": variant({1: 85.0, 2: 60.0, 3: 90.0}),
                                             "verbs-send": variant({1: 100.0, 2: 70.0, 3: 100.0}),
                                             "verbs-write": variant({1: 90.0, 2: 80.0, 3: 95.0})}}
    rows = report.raw_rows(st)
    check(len(rows) == 1 and rows[0]["metric"] == "gbps" and not rows[0]["lower_is_better"], "stream: throughput row")
    check(rows[0]["floor"] == "verbs-send", "throughput floor: the faster raw variant by median")
    check(rows[0]["met"] is False, "paired 0.857x < 0.9x: not met")
    # No raw variants (the smoke test's tcp,xpress): no rows, no section.
    check(report.raw_rows({"scenario": "pingpong", "variants": {"xpress": variant(xp)}}) == [],
          "no raw verbs: no rows")
    lines = []
    report._raw_md(lines.append, {"cases": [dict(entry, case="pingpong 64 B", vs_raw=report.raw_rows(entry))]},
                   ["xpress", "verbs-send", "verbs-write"])
    md = "\n".join(lines)
    check("## xpress against raw verbs" in md and "not met" in md and "1.38x *" in md,
          "compare.md section: heading, the floor marked, the verdict")
    print("%d failed" % fails)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
