#!/usr/bin/env python3
"""Zero-copy on vs off (run inside the Soft-RoCE VM by bench/zerocopy.sh).

For each round, size and variant: an xpress-bench server (10.77.0.1) and a
stream client, both preloaded with XPRESS_ZEROCOPY on or off.  After a
warm-up (the upgrade to RDMA happens on the first bytes), both processes'
CPU time and the client's RDMA bytes (xpress-stat) are sampled at the start
and the end of a measured window, so the TCP phase before the switch is not
counted.  Prints one JSON line per run.
"""
import json, os, subprocess, sys, time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = os.path.join(REPO, "build/libxpress.so")
BENCH = os.path.join(REPO, "build/xpress-bench")
XSTAT = os.path.join(REPO, "build/xpress-stat")
TICK = os.sysconf("SC_CLK_TCK")


def cpu(pid):
    with open("/proc/%d/stat" % pid) as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / TICK  # utime + stime of the whole process


def stat(pid):
    # The live file can be briefly unreadable (seen under TCG load): retry.
    err = ""
    for _ in range(10):
        p = subprocess.run([XSTAT, "--json", str(pid)], capture_output=True, text=True)
        if p.returncode == 0 and p.stdout.strip():
            return json.loads(p.stdout)
        err = p.stderr.strip()
        time.sleep(0.2)
    raise RuntimeError("xpress-stat %d: %s" % (pid, err))


def one(size, zc, zc_min_kb, warm, measure, port):
    # A long handshake timeout: under TCG an upgrade can take seconds, and a
    # run that stayed on TCP measures nothing here.
    env = dict(os.environ, LD_PRELOAD=LIB, XPRESS_ZEROCOPY=str(zc), XPRESS_ZEROCOPY_MIN_KB=str(zc_min_kb),
               XPRESS_STATS_LIVE="1", XPRESS_HANDSHAKE_TIMEOUT_MS="30000")
    srv = subprocess.Popen([BENCH, "server", "--bind", "10.77.0.1", "--port", str(port), "--once", "--quiet",
                            "--timeout", str(warm + measure + 60)], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    time.sleep(1.5)  # the server's start-up under TCG
    cli = subprocess.Popen([BENCH, "stream", "--host", "10.77.0.1", "--port", str(port), "--size", str(size),
                            "--duration", str(warm + measure + 1), "--json", "--quiet"], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    rec = {"size": size, "zerocopy": zc, "zc_min_kb": zc_min_kb}
    try:
        time.sleep(warm)
        s0 = stat(cli.pid)
        c0, v0, t0 = cpu(cli.pid), cpu(srv.pid), time.monotonic()
        time.sleep(measure)
        s1 = stat(cli.pid)
        c1, v1, t1 = cpu(cli.pid), cpu(srv.pid), time.monotonic()
        out, _ = cli.communicate(timeout=60)
        srv.wait(timeout=30)
        b = s1["bytes"]["rdma"]["tx"] - s0["bytes"]["rdma"]["tx"]
        m0, m1 = s0["memory"], s1["memory"]
        zcb = m1["zero_copy"]["tx"] - m0["zero_copy"]["tx"]
        cpb = m1["copied"]["tx"] - m0["copied"]["tx"]
        stg = m1["zero_copy"].get("tx_staged", 0) - m0["zero_copy"].get("tx_staged", 0)
        gb = b / 1e9
        tcp = s1["bytes"]["tcp"]["tx"] - s0["bytes"]["tcp"]["tx"]
        rec.update(ok=b > 0 and tcp == 0, tcp_bytes=tcp, gbps=b * 8 / (t1 - t0) / 1e9, bytes=b, client_cpu_s_per_gb=(c1 - c0) / gb if gb else None,
                   server_cpu_s_per_gb=(v1 - v0) / gb if gb else None, zc_bytes=zcb, copied_bytes=cpb,
                   staged_bytes=stg, bench_ok=json.loads(out).get("ok") if out.strip() else None)
    except Exception as e:  # a failed run is reported, the next goes on
        rec.update(ok=False, error=repr(e))
        for p in (cli, srv):
            p.kill()
    return rec


def main():
    sizes = [int(s) for s in os.environ.get("ZC_SIZES", "65536,262144,1048576,4194304").split(",")]
    rounds = int(os.environ.get("ZC_ROUNDS", "3"))
    warm, measure = float(os.environ.get("ZC_WARM", "3")), float(os.environ.get("ZC_MEASURE", "5"))
    zc_min = int(os.environ.get("ZC_MIN_KB", "16"))
    port = 7600
    for r in range(rounds):
        for size in sizes:
            order = (1, 0) if (r + sizes.index(size)) % 2 == 0 else (0, 1)
            for zc in order:
                port += 1
                rec = one(size, zc, zc_min, warm, measure, port)
                rec["round"] = r
                print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
