#!/usr/bin/python3
"""Checks that a bench/compare results folder is well-formed (used by
`make test-compare`):

    bench/compare.d/check.py DIR [--variants tcp,xpress] [--scenarios pingpong]

- compare.json parses; every planned run has a record with id, round, case,
  scenario, variant, ok and counters; failed runs carry a reason;
- the tcp baseline succeeded in every round, with numeric metrics, and its
  bytes did not go over RDMA (rxe counters flat) but did cross the veth pair;
- every other variant either succeeded or says why not;
- compare.md has the medians table with one column per variant and a row for
  every case, and the "where the bytes went" table;
- compare.svg is an SVG document with at least one bar per successful variant.
For a host-mode folder (bench/compare --host, "mode": "host" in compare.json)
the VM checks on rxe/veth become: no RDMA traffic, the tcp runs' bytes crossed
`lo`, xpress's connections all stayed on TCP (when the host has no RDMA device),
the load average was recorded; compare.md has the overhead table (one row per
case and metric, a "within 2%" verdict in each) and the pass-through section.
Prints one line per check and "N passed, M failed"; exit status 1 on failure.
"""
import argparse
import json
import os
import sys
import xml.etree.ElementTree as ET

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402

passed = failed = 0


def check(ok, what, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("ok   %s" % what)
    else:
        failed += 1
        print("FAIL %s%s" % (what, (": " + detail) if detail else ""))
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--variants", default="")
    ap.add_argument("--scenarios", default="")
    a = ap.parse_args()
    jp, mp, sp = (os.path.join(a.dir, "compare." + e) for e in ("json", "md", "svg"))

    data = None
    try:
        data = json.load(open(jp))
    except (OSError, ValueError) as e:
        check(False, "compare.json parses", str(e))
    if data is not None:
        check(True, "compare.json parses")
        runs, plan = data.get("runs", []), data.get("plan", [])
        check(len(runs) > 0 and len(runs) == len(plan), "one record per planned run",
              "%d records, %d planned" % (len(runs), len(plan)))
        keys = ("id", "round", "case", "scenario", "variant", "ok", "counters")
        bad = [r.get("id") for r in runs if any(k not in r for k in keys) or not isinstance(r["ok"], bool)]
        check(not bad, "every run record has %s" % ", ".join(keys), "bad ids %s" % bad[:5])
        noreason = [r["id"] for r in runs if not r.get("ok") and not r.get("error")]
        check(not noreason, "every failed run says why", "ids %s" % noreason[:5])
        variants = [v for v in a.variants.split(",") if v] or data["params"]["variants"]
        check(sorted(set(r["variant"] for r in runs)) == sorted(variants), "variants are %s" % ",".join(variants),
              str(sorted(set(r["variant"] for r in runs))))
        if a.scenarios:
            want = sorted(s for s in a.scenarios.split(",") if s)
            check(sorted(set(r["scenario"] for r in runs)) == want, "scenarios are %s" % ",".join(want))
        rounds = data["params"]["rounds"]
        if rounds > 1:
            cases = data["params"]["cases"]
            firsts = [[r["variant"] for r in runs if r["round"] == k and r["case"] == cases[0]] for k in (1, 2)]
            check(firsts[0] == firsts[1][::-1], "variant order reversed in round 2", str(firsts))
        host = data.get("mode") == "host"
        tcp = [r for r in runs if r["variant"] == "tcp"]
        if "tcp" in variants:
            check(tcp and all(r["ok"] for r in tcp), "every tcp run succeeded",
                  "; ".join(str(r.get("error")) for r in tcp if not r["ok"])[:300])
            m = [report.metrics(r) for r in tcp if r["ok"]]
            check(m and all(len(x) > 0 for x in m), "tcp runs have numeric metrics")
            tr = [report.transport(r) for r in tcp if r["ok"]]
            check(tr and all(t["verdict"] == "tcp" for t in tr), "tcp runs: rxe counters flat",
                  str([t["rxe_sent_pkts"] for t in tr]))
            if host:
                lo = [(report.lo_bytes(r), report.app_bytes(r)) for r in tcp if r["ok"]]
                check(lo and all(b and a and b >= 0.5 * a for b, a in lo), "tcp runs crossed the loopback", str(lo[:4]))
            else:
                check(tr and all(t["crossed_veth"] for t in tr), "tcp runs crossed the veth pair",
                      str([(t["veth_tx_bytes"], t["app_bytes"]) for t in tr]))
        if host:
            h = data.get("host") or {}
            check(len(h.get("loadavg_before") or []) == 3 and len(h.get("loadavg") or []) == 3,
                  "load average recorded before and after", str((h.get("loadavg_before"), h.get("loadavg"))))
            xr = [r for r in runs if r["variant"] == "xpress" and r["ok"]]
            if xr and not h.get("rdma_devices"):
                conns = [(report._get(r, "xpress_stats_client", "connections") or {}).get("rdma") for r in xr]
                check(all(c == 0 for c in conns), "xpress runs stayed on TCP (no RDMA connection)", str(conns))
            rows = (data.get("summary") or {}).get("overhead")
            check(isinstance(rows, list) and rows and all("verdict" in r for r in rows),
                  "summary has the overhead rows with verdicts")
        for v in variants:
            vr = [r for r in runs if r["variant"] == v]
            nok = sum(1 for r in vr if r["ok"])
            print("info %s: %d/%d runs ok%s" % (v, nok, len(vr), "" if nok == len(vr) else
                                               " (%s)" % str(next(r["error"] for r in vr if not r["ok"]))[:200]))
        s = data.get("summary") or {}
        check(isinstance(s.get("cases"), list) and len(s["cases"]) == len(data["params"]["cases"]),
              "summary has every case")

    md = ""
    try:
        md = open(mp).read()
    except OSError as e:
        check(False, "compare.md exists", str(e))
    if md:
        lines = md.splitlines()
        if data is not None:
            variants = report.VARIANT_ORDER
            variants = [v for v in variants if v in data["params"]["variants"]]
            hdr = "| case | metric | " + " | ".join(variants) + " |"
            if data.get("mode") == "host":
                hdr = "| case | metric | tcp | xpress | xpress/tcp | paired | overhead | noise | within"
            check(any(l.startswith(hdr) for l in lines), "compare.md has the medians table", hdr)
            for case in data["params"]["cases"]:
                check(any(l.startswith("| %s | " % case) for l in lines), "compare.md has rows for %s" % case)
            ncols = len(variants) + 3
            rows = [l for l in lines if l.startswith("| ") and any(l.startswith("| %s | " % c)
                                                                    for c in data["params"]["cases"])]
            widths = {l.count("|") - 1 for l in rows if "rounds 1..N" not in l}
            if data.get("mode") == "host":
                ncols = 9
                trows = [l for l in rows if l.count("|") - 1 == ncols]
                verdicts = {l.rstrip(" |").rsplit("|", 1)[1].strip() for l in trows}
                okv = {"yes", "no", "no (within noise)", "no target", "no data"}
                check(trows and verdicts <= okv, "every overhead row has a within-target verdict",
                      str(sorted(verdicts - okv)))
            check(ncols in widths, "medians table rows have %d columns" % ncols, str(widths))
        if data is not None and data.get("mode") == "host":
            check("## Pass-through" in md, "compare.md says what the preload did")
        else:
            check("## Where the bytes went" in md, "compare.md says where the bytes went")

    try:
        root = ET.parse(sp).getroot()
        check(root.tag.endswith("svg"), "compare.svg is an SVG document", root.tag)
        fills = {e.get("fill") for e in root.iter() if e.tag.endswith("rect") and e.get("class") == "bar"}
        if data is not None:
            okv = sorted({r["variant"] for r in data["runs"] if r["ok"]})
            missing = [v for v in okv if report.COLORS[v] not in fills]
            check(not missing, "compare.svg has bars for %s" % ",".join(okv), "missing %s" % missing)
    except (OSError, ET.ParseError) as e:
        check(False, "compare.svg parses", str(e))

    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
