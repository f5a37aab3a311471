"""bench/compare: summary statistics, compare.md and compare.svg from the raw
runs (compare.json).  Standard library only; imported by bench/compare and
bench/compare.d/check.py."""
import html
import math
import os
import statistics

VARIANT_ORDER = ["tcp", "xpress", "rsocket", "verbs-send", "verbs-write"]
VARIANT_DESC = {
    "tcp": "kernel TCP, no preload",
    "xpress": "LD_PRELOAD=build/libxpress.so XPRESS_STATS=json, both sides",
    "rsocket": "LD_PRELOAD=librspreload.so (rdma-core), both sides",
    "verbs-send": "raw verbs, perftest ib_send_lat / ib_send_bw (RC, two-sided)",
    "verbs-write": "raw verbs, perftest ib_write_lat / ib_write_bw (RC, one-sided)",
}
COLORS = {"tcp": "#4c72b0", "xpress": "#dd8452", "rsocket": "#55a868", "verbs-send": "#8172b3",
          "verbs-write": "#937860"}

# ByteExpress (the seed) vs kernel TCP, as ratios xpress/tcp.
SEED = {
    "fetch_mean_us": (0.643, "fetch mean -35.7%"),
    "fetch_p99_us": (0.563, "fetch P99 -43.7%"),
    "push_p99_us": (0.260, "push P99 -74.0%"),
    "cpu_us_per_op": (0.893, "total CPU -10.7%"),
}

# Host mode (bench/compare --host): the preload's pass-through cost on loopback
# must stay within this fraction of kernel TCP on every metric that has a target.
HOST_TARGET = 0.02
NO_TARGET = {"cpu_total_s"}  # closed-loop ps: both cores busy whatever the transport

# (key, label, unit, lower_is_better)
METRICS = {
    "pingpong": [("lat_mean_us", "mean round trip", "us", True),
                 ("lat_p50_us", "p50 round trip", "us", True),
                 ("lat_p99_us", "p99 round trip", "us", True),
                 ("cpu_us_per_rt", "CPU per round trip, both sides", "us", True)],
    "stream": [("gbps", "throughput", "Gb/s", False),
               ("cpu_s_per_gb", "CPU per GB, both sides", "s/GB", True)],
    "ps": [("fetch_mean_us", "fetch mean latency", "us", True),
           ("fetch_p99_us", "fetch p99 latency", "us", True),
           ("push_mean_us", "push mean latency", "us", True),
           ("push_p99_us", "push p99 latency", "us", True),
           ("ops_per_s", "operations", "ops/s", False),
           ("gbps", "payload throughput", "Gb/s", False),
           ("cpu_us_per_op", "total CPU per op, both sides", "us", True),
           ("cpu_total_s", "total CPU in the window, both sides (no target: saturated)", "s", True)],
    "incast": [("round_mean_us", "round completion mean", "us", True),
               ("round_p99_us", "round completion p99", "us", True),
               ("gbps", "throughput", "Gb/s", False)],
    "connect": [("conns_per_s", "short connections", "conn/s", False),
                ("ttfb_mean_us", "time to first byte, mean", "us", True),
                ("ttfb_p99_us", "time to first byte, p99", "us", True),
                ("client_kb_per_conn", "client memory per long-lived conn", "KiB", True),
                ("server_kb_per_conn", "server memory per long-lived conn", "KiB", True)],
}


def _sentence(s):
    """s with its first letter capitalised (str.capitalize lowers the rest: vCPU)."""
    return s[:1].upper() + s[1:]


def _get(d, *path):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d


def _sum(*xs):
    if any(x is None for x in xs):
        return None
    return sum(xs)


def run_ok(rec):
    """Did the run produce results?  (perftest sometimes prints inf under TCG.)"""
    if not rec.get("ok"):
        return False
    pt = rec.get("perftest")
    if pt:
        return all(isinstance(pt[k], (int, float)) and math.isfinite(pt[k])
                   for k in ("t_typical_us", "t_avg_us", "p99_us", "bw_avg_gbps") if k in pt)
    return True


def run_error(rec):
    if rec.get("error"):
        return str(rec["error"])
    if rec.get("ok") and not run_ok(rec):
        return "%s printed inf/nan (its CPU-clock estimate failed under TCG)" % rec["perftest"]["tool"]
    return ""


def metrics(rec):
    """Metric name -> value for one successful run (None-free)."""
    if not run_ok(rec):
        return {}
    sc = rec["scenario"]
    m = {}
    pt = rec.get("perftest")
    if pt:
        cpu = _sum(pt.get("client_cpu_s"), pt.get("server_cpu_s"))
        if sc == "pingpong":  # perftest prints one-way latency (half the round trip)
            m["lat_mean_us"] = 2 * pt.get("t_avg_us", float("nan"))
            m["lat_p50_us"] = 2 * pt.get("t_typical_us", float("nan"))
            m["lat_p99_us"] = 2 * pt.get("p99_us", float("nan"))
            if cpu is not None:
                m["cpu_us_per_rt"] = cpu / pt["iters"] * 1e6
        elif sc == "stream":
            m["gbps"] = pt.get("bw_avg_gbps")
            if cpu is not None:
                m["cpu_s_per_gb"] = cpu / (pt["size"] * pt["iters"] / 1e9)
    else:
        res = _get(rec, "report", "results") or {}
        if sc == "pingpong":
            lat = res.get("latency") or {}
            m["lat_mean_us"], m["lat_p50_us"], m["lat_p99_us"] = lat.get("mean_us"), lat.get("p50_us"), lat.get("p99_us")
            m["cpu_us_per_rt"] = _sum(res.get("client_cpu_us_per_rt"), res.get("server_cpu_us_per_rt"))
        elif sc == "stream":
            m["gbps"] = res.get("gbps")
            m["cpu_s_per_gb"] = _sum(res.get("client_cpu_s_per_gb"), res.get("server_cpu_s_per_gb"))
        elif sc == "ps":
            m["fetch_mean_us"] = _get(res, "fetch", "latency", "mean_us")
            m["fetch_p99_us"] = _get(res, "fetch", "latency", "p99_us")
            m["push_mean_us"] = _get(res, "push", "latency", "mean_us")
            m["push_p99_us"] = _get(res, "push", "latency", "p99_us")
            m["ops_per_s"] = res.get("ops_per_s")
            m["gbps"] = res.get("gbps")
            m["cpu_us_per_op"] = _sum(res.get("client_cpu_us_per_op"), res.get("server_cpu_us_per_op"))
            m["cpu_total_s"] = _get(rec, "report", "cpu_total_s")
        elif sc == "incast":
            m["round_mean_us"] = _get(res, "round_latency", "mean_us")
            m["round_p99_us"] = _get(res, "round_latency", "p99_us")
            m["gbps"] = res.get("gbps")
        elif sc == "connect":
            m["conns_per_s"] = _get(res, "short", "conns_per_s")
            m["ttfb_mean_us"] = _get(res, "short", "ttfb_latency", "mean_us")
            m["ttfb_p99_us"] = _get(res, "short", "ttfb_latency", "p99_us")
            m["client_kb_per_conn"] = _get(res, "long", "client_kb_per_conn")
            m["server_kb_per_conn"] = _get(res, "long", "server_kb_per_conn")
    return {k: float(v) for k, v in m.items() if isinstance(v, (int, float)) and math.isfinite(v)}


def app_bytes(rec):
    """Application payload bytes the run moved (both directions)."""
    pt = rec.get("perftest")
    if pt:
        n = pt["size"] * pt["iters"]
        return 2 * n if pt["tool"].endswith("_lat") else n
    srv = _get(rec, "report", "server")
    if isinstance(srv, dict) and srv.get("bytes_in") is not None:
        return (srv.get("bytes_in") or 0) + (srv.get("bytes_out") or 0)
    return _get(rec, "report", "results", "bytes")


def transport(rec):
    """Where the run's bytes went, from the rxe/veth counter deltas."""
    c = rec.get("counters") or {}
    rxe_sent = sum(v for k, v in c.items() if k.startswith("rxe") and k.endswith(".sent_pkts"))
    rxe_rcvd = sum(v for k, v in c.items() if k.startswith("rxe") and k.endswith(".rcvd_pkts"))
    veth = sum(v for k, v in c.items() if k.startswith("veth") and k.endswith(".tx_bytes"))
    ab = app_bytes(rec) if run_ok(rec) else None
    out = {"rxe_sent_pkts": rxe_sent, "rxe_rcvd_pkts": rxe_rcvd, "veth_tx_bytes": veth, "app_bytes": ab}
    # rxe carries at most 1 KiB of payload per packet here (active MTU 1024 on a 1500 B veth)
    if not ab:
        out["verdict"] = "rdma" if rxe_sent > 200 else "none" if rxe_sent == 0 else "unknown"
    elif rxe_sent * 1024 >= 0.5 * ab:
        out["verdict"] = "rdma"
    elif rxe_sent <= max(100, 0.01 * ab / 1024):
        out["verdict"] = "tcp"
    else:
        out["verdict"] = "partly rdma"
    out["crossed_veth"] = bool(ab) and veth >= 0.5 * ab
    return out


def _xstats_sum(stats_list):
    agg = {"processes": 0, "rdma": 0, "tcp": 0, "reasons": {}, "rdma_bytes": 0, "tcp_bytes": 0}
    for s in stats_list:
        if not isinstance(s, dict):
            continue
        agg["processes"] += 1
        conns = s.get("connections") or {}
        agg["rdma"] += conns.get("rdma", 0) or 0
        agg["tcp"] += conns.get("tcp", 0) or 0
        for k, v in (s.get("fallback_reasons") or {}).items():
            if v:
                agg["reasons"][k] = agg["reasons"].get(k, 0) + v
        b = s.get("bytes") or {}
        for mode in ("rdma", "tcp"):
            agg[mode + "_bytes"] += sum((_get(b, mode, d) or 0) for d in ("tx", "rx"))
    return agg


def _median(xs):
    return statistics.median(xs) if xs else None


def _same_round_ratios(m, base):
    """m / base round by round, for the rounds both have (base non-zero), in
    round order: a round's runs are close in time, so drift between rounds
    cancels in these."""
    return [m["by_round"][k] / base["by_round"][k] for k in sorted(m["by_round"])
            if k in base["by_round"] and base["by_round"][k]]


def summarize(data):
    runs = data["runs"]
    params = data["params"]
    variants = [v for v in VARIANT_ORDER if v in params["variants"]]
    cases = []
    for case in params["cases"]:
        rs = [r for r in runs if r["case"] == case]
        if not rs:
            continue
        sc = rs[0]["scenario"]
        entry = {"case": case, "scenario": sc, "variants": {}}
        for v in variants:
            vr = [r for r in rs if r["variant"] == v]
            if not vr:
                entry["variants"][v] = {"applicable": False}
                continue
            ok = [r for r in vr if run_ok(r)]
            ve = {"applicable": True, "runs": len(vr), "ok": len(ok), "metrics": {},
                  "errors": sorted({run_error(r) for r in vr if not run_ok(r)}),
                  "transport": [transport(r)["verdict"] for r in vr]}
            for key, _, _, _ in METRICS.get(sc, []):
                by_round = {r["round"]: metrics(r).get(key) for r in ok}
                by_round = {k: x for k, x in by_round.items() if x is not None}
                vals = [by_round[k] for k in sorted(by_round)]
                if vals:
                    ve["metrics"][key] = {"median": _median(vals), "min": min(vals), "max": max(vals),
                                          "values": vals, "by_round": by_round}
            entry["variants"][v] = ve
        # ratios vs tcp: of the medians, and the median of same-round ratios
        tcp = entry["variants"].get("tcp", {})
        for v, ve in entry["variants"].items():
            if not ve.get("applicable"):
                continue
            for key, mm in ve["metrics"].items():
                t = _get(tcp, "metrics", key)
                if not t or not t["median"]:
                    continue
                mm["ratio_vs_tcp"] = mm["median"] / t["median"]
                pr = _same_round_ratios(mm, t)
                if pr:
                    mm["paired_ratio_vs_tcp"] = _median(pr)
        entry["vs_raw"] = raw_rows(entry)
        cases.append(entry)
    # per variant: where the bytes went, xpress's own statistics
    per_variant = {}
    for v in variants:
        vr = [r for r in runs if r["variant"] == v]
        tr = [transport(r) for r in vr if run_ok(r)]
        verdicts = {}
        for t in tr:
            verdicts[t["verdict"]] = verdicts.get(t["verdict"], 0) + 1
        pv = {"runs": len(vr), "ok": sum(1 for r in vr if run_ok(r)), "verdicts": verdicts,
              "crossed_veth": sum(1 for t in tr if t["crossed_veth"]),
              "rxe_pkts_per_app_kib": _median([t["rxe_sent_pkts"] / (t["app_bytes"] / 1024)
                                               for t in tr if t["app_bytes"]]),
              "veth_bytes_per_app_byte": _median([t["veth_tx_bytes"] / t["app_bytes"] for t in tr if t["app_bytes"]])}
        if v == "xpress":
            pv["xpress_stats_client"] = _xstats_sum([r.get("xpress_stats_client") for r in vr])
            pv["xpress_stats_server"] = _xstats_sum([r.get("xpress_stats_server") for r in vr])
        if data.get("mode") == "host":
            pv["lo_bytes_per_app_byte"] = _median([lo_bytes(r) / app_bytes(r) for r in vr
                                                   if run_ok(r) and app_bytes(r)])
        per_variant[v] = pv
    out = {"variants": variants, "cases": cases, "per_variant": per_variant}
    if data.get("mode") == "host":
        out["overhead"] = overhead_rows(cases)
        out["overhead_counts"] = {}
        for row in out["overhead"]:
            out["overhead_counts"][row["verdict"]] = out["overhead_counts"].get(row["verdict"], 0) + 1
    return out


# The targets against raw verbs (the floor on Soft-RoCE): latency
# within RAW_LATENCY_MAX of it, throughput at least RAW_THROUGHPUT_MIN of it.
RAW_LATENCY_MAX = 1.3
RAW_THROUGHPUT_MIN = 0.9
RAW_METRICS = {"pingpong": ["lat_mean_us", "lat_p50_us", "lat_p99_us"], "stream": ["gbps"]}


def raw_rows(entry):
    """xpress against each raw verbs variant of the same case: the ratio of the
    medians and the median of the same-round ratios (a round's runs are close
    in time, so the host's drift between rounds, which often moves every
    variant by 1.5x, cancels).  The verdict takes the faster raw variant
    (the stricter floor) and the paired ratio."""
    rows = []
    xv = entry["variants"].get("xpress", {})
    lower_of = {m[0]: m[3] for m in METRICS.get(entry["scenario"], [])}
    for key in RAW_METRICS.get(entry["scenario"], []):
        xm = _get(xv, "metrics", key)
        if not xm:
            continue
        lower = lower_of[key]
        row = {"metric": key, "lower_is_better": lower, "vs": {}}
        for base in ("verbs-send", "verbs-write"):
            bm = _get(entry, "variants", base, "metrics", key)
            if not bm or not bm["median"]:
                continue
            pr = _same_round_ratios(xm, bm)
            row["vs"][base] = {"ratio": xm["median"] / bm["median"], "paired": _median(pr) if pr else None,
                               "by_round": pr}
        if not row["vs"]:
            continue
        # the stricter floor: the raw variant that did better by its median
        best = (min if lower else max)(row["vs"], key=lambda b: _get(entry, "variants", b, "metrics", key, "median"))
        row["floor"] = best
        paired = row["vs"][best]["paired"]
        if paired is None:
            paired = row["vs"][best]["ratio"]
        row["target"] = RAW_LATENCY_MAX if lower else RAW_THROUGHPUT_MIN
        row["met"] = paired <= row["target"] if lower else paired >= row["target"]
        rows.append(row)
    return rows


# ---- host mode: pass-through overhead vs kernel TCP ---------------------------
def lo_bytes(rec):
    """Bytes the run sent through the loopback interface (host mode)."""
    return (rec.get("counters") or {}).get("lo.tx_bytes", 0)


def overhead_of(ratio, lower):
    """How much worse xpress is than tcp, as a fraction (negative: better)."""
    if ratio is None or ratio <= 0:
        return None
    return ratio - 1 if lower else 1 / ratio - 1


def overhead_rows(cases):
    """One row per case and metric: tcp and xpress medians, xpress/tcp, the
    overhead, its round-to-round noise and the verdict against HOST_TARGET."""
    rows = []
    for ce in cases:
        for key, label, unit, lower in METRICS.get(ce["scenario"], []):
            tm = _get(ce, "variants", "tcp", "metrics", key)
            xm = _get(ce, "variants", "xpress", "metrics", key)
            if tm is None and xm is None:
                continue
            row = {"case": ce["case"], "scenario": ce["scenario"], "metric": key, "label": label, "unit": unit,
                   "lower_is_better": lower, "tcp": tm and tm["median"], "xpress": xm and xm["median"],
                   "ratio": xm and xm.get("ratio_vs_tcp"), "paired_ratio": xm and xm.get("paired_ratio_vs_tcp"),
                   "has_target": key not in NO_TARGET}
            row["overhead_of_medians"] = overhead_of(row["ratio"], lower)
            per_round = []
            if tm and xm:
                per_round = [o for o in (overhead_of(r, lower) for r in _same_round_ratios(xm, tm))
                             if o is not None]
            row["overhead_by_round"] = per_round
            # the verdict uses the paired comparison: each round's tcp and xpress runs are
            # adjacent in time, so drift between rounds (common to both) cancels
            row["overhead"] = _median(per_round) if per_round else row["overhead_of_medians"]
            # robust scatter of the per-round overheads (1.4826 MAD ~ one standard deviation)
            row["noise"] = (1.4826 * _median([abs(o - _median(per_round)) for o in per_round])
                            if len(per_round) >= 3 else None)
            ov = row["overhead"]
            if not row["has_target"]:
                row["verdict"] = "no target"
            elif ov is None:
                row["verdict"] = "no data"
            elif ov <= HOST_TARGET:
                row["verdict"] = "yes"
            elif row["noise"] is not None and ov <= HOST_TARGET + row["noise"]:
                row["verdict"] = "no (within noise)"
            else:
                row["verdict"] = "no"
            row["within_target"] = None if row["verdict"] in ("no target", "no data") else row["verdict"] == "yes"
            rows.append(row)
    return rows


# ---- Markdown ---------------------------------------------------------------
def _fmt(x):
    if x is None:
        return "-"
    a = abs(x)
    if a >= 1000:
        return "%.0f" % x
    if a >= 100:
        return "%.1f" % x
    if a >= 10:
        return "%.2f" % x
    if a >= 1:
        return "%.3f" % x
    return "%.3g" % x


def _ratio(r):
    return "%.2fx" % r if r is not None else ""


def _variant_desc(v, params):
    xe = params.get("xpress_env") or {}
    if v == "xpress" and xe:
        return "%s, with %s" % (VARIANT_DESC[v], " ".join("`%s=%s`" % kv for kv in sorted(xe.items())))
    return VARIANT_DESC[v]


def _failures_md(w, s, variants):
    fails = []
    for ce in s["cases"]:
        for v in variants:
            ve = ce["variants"].get(v, {})
            if ve.get("applicable") and ve.get("errors"):
                fails.append((v, ce["case"], ve["runs"] - ve["ok"], ve["runs"], ve["errors"]))
    w("## Failed runs")
    w("")
    if not fails:
        w("None.")
    else:
        w("| variant | case | failed / runs | reason |")
        w("|---|---|---|---|")
        for v, case, nf, n, errs in fails:
            reason = " // ".join(e.replace("|", "/") for e in errs[:2])
            w("| %s | %s | %d / %d | %s |" % (v, case, nf, n, reason[:500]))
    w("")


def _raw_md(w, s, variants):
    """xpress against raw verbs: the issue's latency and throughput floors."""
    rows = [(ce, r) for ce in s["cases"] for r in ce.get("vs_raw", [])]
    if not rows or "xpress" not in variants:
        return
    labels = {m[0]: m[1] + ", " + m[2] for ms in METRICS.values() for m in ms}
    w("## xpress against raw verbs (the floor)")
    w("")
    w("xpress / raw verbs: the ratio of the medians, then the median of the same-round ratios (paired) and "
      "those ratios round by round. Target: latency within %.1fx of raw verbs, throughput at least %d%% of it, "
      "judged by the paired ratio against the faster raw variant (marked *)." % (RAW_LATENCY_MAX,
                                                                                  round(100 * RAW_THROUGHPUT_MIN)))
    w("")
    w("| case | metric | vs verbs-send: medians / paired | vs verbs-write: medians / paired | per round vs the floor "
      "| target |")
    w("|---|---|---:|---:|---|---|")
    for ce, r in rows:
        cells = []
        for base in ("verbs-send", "verbs-write"):
            v = r["vs"].get(base)
            if v is None:
                cells.append("n/a")
            else:
                cells.append("%s / %s%s" % (_ratio(v["ratio"]), _ratio(v["paired"]),
                                            " *" if base == r["floor"] else ""))
        per = ", ".join("%.2f" % x for x in r["vs"][r["floor"]]["by_round"])
        tgt = "%s %.2gx: %s" % ("<=" if r["lower_is_better"] else ">=", r["target"], "met" if r["met"] else "not met")
        w("| %s | %s%s | %s | %s | %s | %s |" % (ce["case"], labels.get(r["metric"], r["metric"]),
                                               "" if r["lower_is_better"] else " (higher)", cells[0], cells[1],
                                               per, tgt))
    w("")


def _per_round_md(w, s, variants):
    """Per-round values of the headline metrics (drift is visible here)."""
    w("## Per-round values (headline metrics, in run order)")
    w("")
    w("| case | metric | variant | rounds 1..N | paired ratio vs tcp |")
    w("|---|---|---|---|---:|")
    head = {"pingpong": "lat_mean_us", "stream": "gbps", "ps": "fetch_p99_us", "incast": "round_p99_us",
            "connect": "ttfb_mean_us"}
    for ce in s["cases"]:
        key = head.get(ce["scenario"])
        lab = {m[0]: m[1] + ", " + m[2] for m in METRICS.get(ce["scenario"], [])}.get(key, key)
        for v in variants:
            mm = _get(ce, "variants", v, "metrics", key)
            if not mm:
                continue
            vals = ", ".join(_fmt(mm["by_round"][k]) for k in sorted(mm["by_round"]))
            pr = mm.get("paired_ratio_vs_tcp")
            w("| %s | %s | %s | %s | %s |" % (ce["case"], lab, v, vals, _ratio(pr) if v != "tcp" else ""))
    w("")


def write_md(data, path):
    if data.get("mode") == "host":
        return write_md_host(data, path)
    s = data["summary"]
    p = data["params"]
    variants = s["variants"]
    L = []
    w = L.append
    w("# xpress vs kernel TCP vs rsocket vs raw verbs on Soft-RoCE")
    w("")
    g = data.get("guest") or {}
    w("%s, git %s, guest kernel %s under qemu TCG (%s vCPUs; host %s cores, load average %s before / %s after). "
      "Server 10.77.0.1 (veth0/rxe0), client 10.77.0.2 (veth1/rxe1): every byte crosses the veth pair. "
      "%s. "
      "%d round(s), variants interleaved (order reversed every other round), %s s per timed run%s. "
      "Total %.0f s wall clock including the VM boot%s."
      % (data["date_utc"], data.get("git", "?"), data.get("guest_kernel") or "?", g.get("vcpus", "?"),
         data["host"]["nproc"], " ".join(data["host"].get("loadavg_before", ["?"])), " ".join(data["host"]["loadavg"]),
         _sentence(data["host"].get("pin") or "not pinned"), p["rounds"], _fmt(p["duration_s"]),
         ", --quick" if p.get("quick") else "", data.get("wall_s", 0),
         "" if data.get("vm_exit") == 0 else " (VM exit status %s)" % data.get("vm_exit")))
    w("")
    w("Produced by `bench/compare` (`make bench-compare`); raw runs in `compare.json`, plot in `compare.svg`. "
      "Under TCG everything is 10x or more slower than native and varies +-30% between boots, and the host is "
      "shared: read the ratios between variants of this run, not the absolute numbers.")
    w("")
    w("Variants: " + "; ".join("**%s** = %s" % (v, _variant_desc(v, p)) for v in variants) + ".")
    w("")
    # where the bytes went: first, because it says what the other numbers mean
    w("## Where the bytes went (rxe counters around every run)")
    w("")
    w("| variant | runs ok / run | verdict per successful run | rxe packets sent per KiB of payload (median) | veth bytes per payload byte (median) |")
    w("|---|---|---|---:|---:|")
    words = {"rdma": "over RDMA", "tcp": "over TCP (rxe flat)", "partly rdma": "partly RDMA", "none": "no traffic",
             "unknown": "unknown"}
    for v in variants:
        pv = s["per_variant"][v]
        verd = ", ".join("%s: %d" % (words.get(k, k), n) for k, n in sorted(pv["verdicts"].items())) or "-"
        w("| %s | %d / %d | %s | %s | %s |" % (v, pv["ok"], pv["runs"], verd, _fmt(pv["rxe_pkts_per_app_kib"]),
                                            _fmt(pv["veth_bytes_per_app_byte"])))
    w("")
    w("A run counts as over RDMA when the rxe devices sent at least one packet per 2 KiB of payload (rxe carries "
      "<= 1 KiB per packet here); as TCP when they stayed within noise (<= max(100, 1%) of that). "
      "veth bytes >= payload show the traffic crossed the veth pair rather than `lo`.")
    rdma_vs = [v for v in variants if s["per_variant"][v]["verdicts"].get("rdma")]
    tcp_vs = [v for v in variants if s["per_variant"][v]["verdicts"].get("tcp")]
    w("")
    w("**Over RDMA: %s. Over kernel TCP: %s.**" % (", ".join(rdma_vs) or "none", ", ".join(tcp_vs) or "none"))
    xs = s["per_variant"].get("xpress")
    if xs:
        c, sv = xs.get("xpress_stats_client") or {}, xs.get("xpress_stats_server") or {}
        def rs(a):
            return ", ".join("%s=%d" % kv for kv in sorted(a.get("reasons", {}).items())) or "none"
        w("")
        w("xpress's own statistics (summed over its runs): clients: %d rdma / %d tcp connections, fallback reasons %s, "
          "%s B over RDMA, %s B over TCP; servers (read live with `xpress-stat --json` before the stop, since "
          "xpress-bench's server leaves through `_exit`): %d rdma / %d tcp connections, fallback reasons %s."
          % (c.get("rdma", 0), c.get("tcp", 0), rs(c), c.get("rdma_bytes", 0), c.get("tcp_bytes", 0),
             sv.get("rdma", 0), sv.get("tcp", 0), rs(sv)))
        if c.get("rdma", 0) == 0 and c.get("tcp", 0) > 0:
            w("")
            w("The xpress library's RDMA data path is not built yet: every connection fell back to kernel TCP, "
              "so the xpress column measures the preload's pass-through cost over TCP, not RDMA.")
    w("")
    # the main table
    w("## Medians (ratio vs kernel TCP)")
    w("")
    w("Each cell: median over the rounds, then (median / tcp median). Lower is better except where marked (higher). "
      "raw verbs latency is perftest's one-way figure x2 (round trip); its `typical` is shown as p50.")
    w("")
    w("| case | metric | " + " | ".join(variants) + " | seed target (ByteExpress vs TCP) |")
    w("|---|---|" + "---:|" * len(variants) + "---|")
    notes = []
    for ce in s["cases"]:
        for key, label, unit, lower in METRICS.get(ce["scenario"], []):
            cells = []
            anyval = False
            for v in variants:
                ve = ce["variants"].get(v, {})
                if not ve.get("applicable"):
                    cells.append("n/a")
                    continue
                mm = ve["metrics"].get(key)
                if mm is None:
                    if ve["ok"] == 0:
                        cells.append("FAILED")
                    else:
                        cells.append("-")
                    continue
                anyval = True
                r = mm.get("ratio_vs_tcp")
                cells.append("%s%s" % (_fmt(mm["median"]), " (%s)" % _ratio(r) if r is not None and v != "tcp" else ""))
            if not anyval and all(c in ("n/a", "-") for c in cells):
                continue
            tgt = ""
            if key in SEED and ce["scenario"] == "ps":
                ratio, text = SEED[key]
                xr = _get(ce, "variants", "xpress", "metrics", key, "ratio_vs_tcp")
                tgt = "%s (<= %.2fx)" % (text, ratio)
                if xr is not None:
                    tgt += ": xpress %.2fx, %s" % (xr, "met" if xr <= ratio else "not met")
            w("| %s | %s, %s%s | %s | %s |" % (ce["case"], label, unit, "" if lower else " (higher)",
                                              " | ".join(cells), tgt))
    w("")
    if any(ce["scenario"] in ("pingpong", "stream") for ce in s["cases"]) and any(v.startswith("verbs") for v in variants):
        w("raw verbs CPU: both perftest processes' CPU from the moment the client prints its result header (just "
          "before the measured loop) to their exit, divided by the work; perftest busy-polls, so that is ~1 core per "
          "side while it runs. The socket variants' CPU is xpress-bench's measured window (getrusage, both "
          "processes, helper threads included).")
        w("")
    if "ps" in [ce["scenario"] for ce in s["cases"]]:
        w("Seed targets: ByteExpress reports, against kernel TCP, parameter fetch latency -35.7% mean and -43.7% "
          "P99, push P99 -74.0%, total CPU -10.69% (hardware RDMA, production load). The ps scenario is closed-loop "
          "(each client thread issues the next operation when the last completes), so a faster transport does more "
          "operations and burns more CPU in the same window: CPU per operation is the comparable figure, and the one "
          "held against the -10.7% target. (In this VM the CPU in the window is ~2 vCPUs x the duration for every "
          "variant: the guest is CPU-bound, so that row cannot show a saving.)")
        w("")
    _raw_md(w, s, variants)
    _failures_md(w, s, variants)
    _per_round_md(w, s, variants)
    w("Reproduce: `make bench-compare` (or `bench/compare --help`); smoke test `make test-compare`; "
      "how to read this file: bench/compare.d/README.md.")
    with open(path, "w") as fh:
        fh.write("\n".join(L) + "\n")


def _pct(x, sign=True):
    if x is None:
        return "-"
    return ("%+.2f%%" if sign else "%.1f%%") % (100 * x)


def host_busy_text(data):
    h = data.get("host") or {}
    parts = ["load average %s before / %s after (the benchmark itself keeps about two processes busy, so the "
             "figure after includes it)" % (" ".join(h.get("loadavg_before", ["?"])), " ".join(h.get("loadavg", ["?"])))]
    if h.get("others_cores_before") is not None:
        parts.append("other processes used ~%.2f cores in the second before the start" % h["others_cores_before"])
    if h.get("others_cores_during") is not None:
        parts.append("~%.2f cores on average during the run (all CPU time on the machine minus this benchmark's "
                     "own, from /proc/stat)" % h["others_cores_during"])
    return "; ".join(parts)


def write_md_host(data, path):
    s = data["summary"]
    p = data["params"]
    h = data.get("host") or {}
    lib = data.get("lib") or {}
    variants = s["variants"]
    L = []
    w = L.append
    w("# xpress pass-through overhead vs kernel TCP on loopback (no RDMA)")
    w("")
    w("%s, git %s, kernel %s, %s (%s cores). Library `%s`%s. Server and client on 127.0.0.1, %s. "
      "%d round(s), tcp and xpress interleaved (order reversed every other round: A B, B A, ...), %s s per timed run%s. "
      "Total %.0f s wall clock%s."
      % (data["date_utc"], data.get("git", "?"), h.get("kernel", "?"), h.get("cpu_model", "?"), h.get("nproc", "?"),
         lib.get("path", "build/libxpress.so"), " (sha256 %s)" % lib["sha256"][:12] if lib.get("sha256") else "",
         h.get("pin", "not pinned"), p["rounds"], _fmt(p["duration_s"]), ", --quick" if p.get("quick") else "",
         data.get("wall_s", 0),
         "" if not data.get("driver_exit") else " (driver exit status %s)" % data.get("driver_exit")))
    w("")
    w("Machine load: %s." % host_busy_text(data))
    for warn in data.get("warnings") or []:
        w("")
        w("**Warning: %s**" % warn)
    w("")
    w("Produced by `bench/compare --host` (`make bench-host`); raw runs in `compare.json`, plot in `compare.svg`.")
    w("")
    w("Variants: " + "; ".join("**%s** = %s" % (v, _variant_desc(v, p)) for v in variants) + ".")
    w("")
    # what the preload did: the premise of the numbers below
    w("## Pass-through (what the preload did)")
    w("")
    devs = h.get("rdma_devices") or []
    w("RDMA devices on this host: %s." % (", ".join(devs) if devs else "none (/sys/class/infiniband is empty or absent)"))
    xs = s["per_variant"].get("xpress")
    if xs:
        c, sv = xs.get("xpress_stats_client") or {}, xs.get("xpress_stats_server") or {}

        def rs(a):
            return ", ".join("%s=%d" % kv for kv in sorted(a.get("reasons", {}).items())) or "none"
        w("")
        w("xpress's own statistics (summed over its runs): clients (%d processes): %d rdma / %d tcp connections, "
          "fallback reasons %s, %s B over RDMA, %s B over TCP; servers (%d processes, read live with `xpress-stat "
          "--json` before the stop): %d rdma / %d tcp connections, fallback reasons %s."
          % (c.get("processes", 0), c.get("rdma", 0), c.get("tcp", 0), rs(c), c.get("rdma_bytes", 0),
             c.get("tcp_bytes", 0), sv.get("processes", 0), sv.get("rdma", 0), sv.get("tcp", 0), rs(sv)))
        if c.get("rdma", 0) == 0 and sv.get("rdma", 0) == 0 and c.get("tcp", 0) > 0:
            w("")
            w("Every xpress connection stayed on kernel TCP: the xpress column is the preload's pass-through cost.")
        elif c.get("rdma", 0) or sv.get("rdma", 0):
            w("")
            w("**Some xpress connections used RDMA: this is not a pure pass-through measurement.**")
    w("")
    w("Loopback bytes per payload byte (median): " + ", ".join(
        "%s %s" % (v, _fmt(s["per_variant"][v].get("lo_bytes_per_app_byte"))) for v in variants) + ".")
    w("")
    # the main table
    w("## Overhead vs kernel TCP (target: within %d%%)" % round(100 * HOST_TARGET))
    w("")
    w("tcp and xpress: median over the rounds; xpress/tcp: ratio of those medians. paired: median of the "
      "same-round ratios xpress/tcp (each round's two runs are adjacent in time, so drift between rounds, "
      "which hits both, cancels). overhead: how much worse xpress is, from the paired comparison (paired - 1 "
      "where lower is better, 1/paired - 1 for the rows marked (higher); negative: xpress did better). "
      "noise: the round-to-round scatter of the per-round overheads (1.4826 x their median absolute deviation, "
      "about one standard deviation). within %d%%: **yes** when the overhead is at most +%d%%; "
      "**no (within noise)** when above that but within %d%% + noise; **no** otherwise."
      % ((round(100 * HOST_TARGET),) * 3))
    w("")
    w("| case | metric | tcp | xpress | xpress/tcp | paired | overhead | noise | within %d%% |"
      % round(100 * HOST_TARGET))
    w("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for r in s.get("overhead") or []:
        w("| %s | %s, %s%s | %s | %s | %s | %s | %s | %s | %s |"
          % (r["case"], r["label"], r["unit"], "" if r["lower_is_better"] else " (higher)",
             _fmt(r["tcp"]) if r["tcp"] is not None else "FAILED",
             _fmt(r["xpress"]) if r["xpress"] is not None else "FAILED",
             "%.3f" % r["ratio"] if r["ratio"] is not None else "-",
             "%.3f" % r["paired_ratio"] if r.get("paired_ratio") is not None else "-", _pct(r["overhead"]),
             "+-" + _pct(r["noise"], False) if r.get("noise") is not None else "-", r["verdict"]))
    w("")
    cnt = s.get("overhead_counts") or {}
    judged = sum(n for k, n in cnt.items() if k not in ("no target", "no data"))
    w("**%d of %d metrics within %d%%; %d more above it but within this run's noise; %d outside.**"
      % (cnt.get("yes", 0), judged, round(100 * HOST_TARGET), cnt.get("no (within noise)", 0), cnt.get("no", 0)))
    w("")
    w("CPU rows are both processes' CPU (getrusage, helper threads included) over xpress-bench's measured window. "
      "Tail latencies (p99) on a 2-core machine shared with other work are the noisiest rows; a short run has "
      "few samples beyond p99. ps is closed-loop (the next operation starts when the last ends), so its \"total "
      "CPU in the window\" row has no target.")
    w("")
    _failures_md(w, s, variants)
    _per_round_md(w, s, variants)
    w("Reproduce: `make bench-host` (or `bench/compare --host --help`); how to read this file: "
      "bench/compare.d/README.md.")
    with open(path, "w") as fh:
        fh.write("\n".join(L) + "\n")


# ---- SVG --------------------------------------------------------------------
def _esc(t):
    return html.escape(str(t), quote=True)


def _nice_max(x):
    if x <= 0:
        return 1.0
    e = 10 ** math.floor(math.log10(x))
    for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if m * e >= x:
            return m * e
    return 10 * e


def _panel(out, x0, y0, W, H, title, groups, variants, log, unit, ref_line=None):
    """Grouped bars: groups = [(label, {variant: entry})], entry = {"v", "lo", "hi"} | "FAILED" | None."""
    vals = [e[k] for _, d in groups for e in d.values() if isinstance(e, dict) for k in ("v", "lo", "hi")
            if e.get(k) is not None and e.get(k) > 0 and math.isfinite(e.get(k))]
    if vals and ref_line is not None:
        vals.append(ref_line)
    out.append('<text x="%d" y="%d" class="t">%s</text>' % (x0, y0 + 14, _esc(title)))
    px0, py0, pw, ph = x0 + 60, y0 + 26, W - 70, H - 70
    if not vals:
        out.append('<text x="%d" y="%d" class="s">no data</text>' % (px0 + 10, py0 + 30))
        return
    if log:
        lo = 10 ** math.floor(math.log10(min(vals)))
        hi = 10 ** math.ceil(math.log10(max(vals)))
        if hi <= lo:
            hi = lo * 10

        def Y(v):
            v = max(v, lo)
            return py0 + ph - (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * ph
        ticks = [10 ** e for e in range(int(round(math.log10(lo))), int(round(math.log10(hi))) + 1)]
    else:
        lo, hi = 0.0, _nice_max(max(vals + ([ref_line] if ref_line else [])) * 1.08)

        def Y(v):
            return py0 + ph - (v - lo) / (hi - lo) * ph
        ticks = [hi * i / 5 for i in range(6)]
    for t in ticks:
        y = Y(t)
        tl = ("{:,}".format(int(round(t))) if t >= 1 else "%g" % t) if log else ("%.3g" % t)
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" class="g"/>' % (px0, y, px0 + pw, y))
        out.append('<text x="%d" y="%.1f" class="s" text-anchor="end">%s</text>' % (px0 - 4, y + 4, _esc(tl)))
    out.append('<text x="%d" y="%d" class="s" transform="rotate(-90 %d %d)" text-anchor="middle">%s</text>'
               % (x0 + 12, py0 + ph // 2, x0 + 12, py0 + ph // 2, _esc(unit + (" (log)" if log else ""))))
    out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" class="a"/>' % (px0, py0 + ph, px0 + pw, py0 + ph))
    if ref_line is not None:
        y = Y(ref_line)
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" class="r"/>' % (px0, y, px0 + pw, y))
    gw = pw / max(1, len(groups))
    bw = min(28, (gw - 12) / max(1, len(variants)))
    for gi, (glabel, d) in enumerate(groups):
        gx = px0 + gi * gw + (gw - bw * len(variants)) / 2
        out.append('<text x="%.1f" y="%d" class="s" text-anchor="middle">%s</text>'
                   % (px0 + gi * gw + gw / 2, py0 + ph + 16, _esc(glabel)))
        for vi, v in enumerate(variants):
            e = d.get(v)
            bx = gx + vi * bw
            if e == "FAILED":
                out.append('<text x="%.1f" y="%d" class="f" transform="rotate(-90 %.1f %d)">FAILED</text>'
                           % (bx + bw / 2 + 3, py0 + ph - 4, bx + bw / 2 + 3, py0 + ph - 4))
                continue
            if not isinstance(e, dict) or e.get("v") is None:
                continue
            y = Y(e["v"])
            out.append('<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %s %s</title></rect>'
                       % (bx + 1, y, bw - 2, max(0.5, py0 + ph - y), COLORS[v], _esc(v), _esc(glabel),
                          _esc(_fmt(e["v"])), _esc(unit)))
            if e.get("lo") is not None and e.get("hi") is not None and e["hi"] > e["lo"]:
                wx = bx + bw * 0.72  # off-centre, clear of the value label
                out.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" class="w"/>' % (wx, Y(e["lo"]), wx, Y(e["hi"])))
            # value labels run vertically: inside a tall bar (white), above a short one
            cx, inside = bx + bw * 0.42 + 3, (py0 + ph - y) > 42
            ty = y + 4 if inside else y - 3
            out.append('<text x="%.1f" y="%.1f" class="%s" text-anchor="%s" transform="rotate(-90 %.1f %.1f)">%s</text>'
                       % (cx, ty, "vi" if inside else "v", "end" if inside else "start", cx, ty, _esc(_fmt(e["v"]))))


OROW = 20  # row height of the overhead panel


def _overhead_panel(out, x0, y0, W, H, rows):
    """Host mode: one horizontal bar per metric, xpress's overhead vs tcp in %
    (right = xpress worse), whiskers min-max of the per-round overheads (cut at
    the axis), the +-target band shaded; value and verdict in the right column."""
    t = 100 * HOST_TARGET
    out.append('<text x="%d" y="%d" class="t">%s</text>' % (
        x0, y0 + 14, _esc("xpress overhead vs kernel TCP, %%, paired by round (right: xpress worse; "
                          "green: +-%g%%; whiskers: rounds)" % t)))
    lw, rw = 310, 180  # label column, value/verdict column
    px0, py0, pw = x0 + lw, y0 + 30, W - lw - rw
    vals = [t * 2.5] + [abs(100 * r["overhead"]) for r in rows
                        if r["overhead"] is not None and math.isfinite(r["overhead"])]
    top = max(vals) * 1.05
    step = next(st for st in (0.5, 1, 2, 2.5, 5, 10, 20, 25, 50, 100, 200, 500, 1e3, 1e4, 1e6) if top / st <= 5)
    span = step * math.ceil(top / step)

    def X(v):
        v = max(-span, min(span, v))
        return px0 + (v + span) / (2 * span) * pw
    ph = OROW * len(rows)
    out.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#e3f1e3"/>' % (X(-t), py0, X(t) - X(-t), ph))
    n = int(round(span / step))
    for i in range(-n, n + 1):
        v = step * i
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" class="%s"/>' % (X(v), py0, X(v), py0 + ph,
                                                                          "a" if i == 0 else "g"))
        out.append('<text x="%.1f" y="%d" class="s" text-anchor="middle">%s</text>'
                   % (X(v), py0 + ph + 14, _esc("%+g%%" % round(v, 2) if v else "0")))
    for tv in (-t, t):
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" class="r"/>' % (X(tv), py0, X(tv), py0 + ph))
    for i, r in enumerate(rows):
        y = py0 + i * OROW
        if i % 2:
            out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="#000" fill-opacity="0.03"/>'
                       % (x0, y, W, OROW))
        lab = "%s: %s%s" % (r["case"], r["label"], "" if r["lower_is_better"] else " (higher)")
        out.append('<text x="%d" y="%d" class="s" text-anchor="end">%s</text>' % (px0 - 6, y + 14, _esc(lab[:56])))
        o = r["overhead"]
        if o is None or not math.isfinite(o):
            out.append('<text x="%d" y="%d" class="f">no data</text>' % (px0 + pw + 10, y + 14))
            continue
        v = 100 * o
        xa, xb = sorted((X(0), X(v)))
        out.append('<rect class="bar" x="%.1f" y="%d" width="%.1f" height="12" fill="%s"><title>%s: %+.2f%% (%s)</title></rect>'
                   % (xa, y + 4, max(0.8, xb - xa), COLORS["xpress"], _esc(lab), v, _esc(r["verdict"])))
        per = [100 * q for q in r["overhead_by_round"] if q is not None and math.isfinite(q)]
        if len(per) > 1:
            out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" class="w"/>' % (X(min(per)), y + 10, X(max(per)), y + 10))
            for q in (min(per), max(per)):
                out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" class="w"/>' % (X(q), y + 6, X(q), y + 14))
        col = "#2e7d32" if r["verdict"] == "yes" else "#a07c00" if r["verdict"] == "no (within noise)" else "#c62828"
        out.append('<text x="%d" y="%d" class="s" text-anchor="end">%+.2f%%</text>' % (px0 + pw + 58, y + 14, v))
        out.append('<text x="%d" y="%d" class="s" fill="%s" style="fill:%s">%s</text>'
                   % (px0 + pw + 66, y + 14, col, col, _esc(r["verdict"])))


def write_svg(data, path):
    s = data["summary"]
    variants = s["variants"]

    def entry(ce, v, key):
        ve = ce["variants"].get(v, {})
        if not ve.get("applicable"):
            return None
        mm = ve["metrics"].get(key)
        if mm is None:
            return "FAILED" if ve.get("ok", 0) == 0 else None
        return {"v": mm["median"], "lo": mm["min"], "hi": mm["max"]}

    def rentry(ce, v, key):
        ve = ce["variants"].get(v, {})
        if not ve.get("applicable"):
            return None
        mm = ve["metrics"].get(key)
        if mm is None:
            return "FAILED" if ve.get("ok", 0) == 0 else None
        return {"v": mm.get("ratio_vs_tcp")} if mm.get("ratio_vs_tcp") is not None else None

    panels = []
    pp = [ce for ce in s["cases"] if ce["scenario"] == "pingpong"]
    if pp:
        groups = []
        for ce in pp:
            for key, lab in (("lat_p50_us", "p50"), ("lat_mean_us", "mean"), ("lat_p99_us", "p99")):
                groups.append(("%s %s" % (ce["case"].replace("pingpong ", ""), lab),
                               {v: entry(ce, v, key) for v in variants}))
        panels.append(("pingpong round-trip latency by message size (median of rounds; whiskers: min-max)",
                       groups, True, "us", None))
    st = [ce for ce in s["cases"] if ce["scenario"] == "stream"]
    if st:
        panels.append(("stream throughput by message size", [(ce["case"].replace("stream ", ""),
                       {v: entry(ce, v, "gbps") for v in variants}) for ce in st], False, "Gb/s", None))
    ps = [ce for ce in s["cases"] if ce["scenario"] == "ps"]
    if ps:
        ce = ps[0]
        panels.append(("ps (parameter server): fetch and push latency", [
            (lab, {v: entry(ce, v, key) for v in variants})
            for key, lab in (("fetch_mean_us", "fetch mean"), ("fetch_p99_us", "fetch p99"),
                             ("push_mean_us", "push mean"), ("push_p99_us", "push p99"))], True, "us", None))
    for sc, keys in (("incast", (("round_mean_us", "round mean"), ("round_p99_us", "round p99"))),
                     ("connect", (("ttfb_mean_us", "ttfb mean"), ("ttfb_p99_us", "ttfb p99")))):
        for ce in [c for c in s["cases"] if c["scenario"] == sc]:
            panels.append(("%s latency" % sc, [(lab, {v: entry(ce, v, key) for v in variants})
                                               for key, lab in keys], True, "us", None))
    cpu_groups = []
    for ce in s["cases"]:
        key = {"pingpong": "cpu_us_per_rt", "stream": "cpu_s_per_gb", "ps": "cpu_us_per_op"}.get(ce["scenario"])
        if key:
            lab = {"pingpong": "per RT", "stream": "per GB", "ps": "per op"}[ce["scenario"]]
            cpu_groups.append(("%s %s" % (ce["case"], lab), {v: rentry(ce, v, key) for v in variants}))
    if cpu_groups and data.get("mode") != "host":  # host mode: the overhead panel has the CPU rows
        panels.append(("CPU (both sides) relative to kernel TCP (1.0 = same; lower is better)", cpu_groups, True,
                       "x tcp", 1.0))

    W, PH = 960, 280
    host = data.get("mode") == "host"
    orows = [r for r in s.get("overhead") or [] if r["has_target"]] if host else []
    OH = 70 + OROW * len(orows) if orows else 0
    H = 60 + OH + PH * len(panels) + 20
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
           'font-family="DejaVu Sans, Arial, sans-serif">' % (W, H, W, H),
           '<style>.t{font-size:14px;font-weight:bold}.s{font-size:11px;fill:#333}.v{font-size:9px;fill:#222}.vi{font-size:9px;fill:#fff}'
           '.f{font-size:10px;fill:#c00;font-weight:bold}.g{stroke:#ddd;stroke-width:1}.a{stroke:#333;stroke-width:1}'
           '.w{stroke:#000;stroke-width:1.2}.r{stroke:#c00;stroke-width:1;stroke-dasharray:4 3}</style>',
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="10" y="20" class="t">%s (%s, %d round%s)</text>'
           % ("xpress pass-through vs kernel TCP on loopback, no RDMA" if host else
              "xpress vs kernel TCP vs rsocket vs raw verbs, Soft-RoCE under qemu TCG",
              _esc(data["date_utc"]), data["params"]["rounds"], "" if data["params"]["rounds"] == 1 else "s")]
    lx = 10
    for v in variants:
        out.append('<rect x="%d" y="32" width="12" height="12" fill="%s"/>' % (lx, COLORS[v]))
        out.append('<text x="%d" y="42" class="s">%s</text>' % (lx + 16, _esc(v)))
        lx += 24 + 8 * len(v) + 20
    if orows:
        _overhead_panel(out, 10, 55, W - 20, OH, orows)
    for i, (title, groups, log, unit, ref) in enumerate(panels):
        _panel(out, 10, 55 + OH + i * PH, W - 20, PH, title, groups, variants, log, unit, ref)
    out.append("</svg>")
    with open(path, "w") as fh:
        fh.write("\n".join(out) + "\n")


def write_all(data, outdir):
    if "summary" not in data:
        data["summary"] = summarize(data)
    write_md(data, os.path.join(outdir, "compare.md"))
    write_svg(data, os.path.join(outdir, "compare.svg"))
