#!/usr/bin/python3
"""In-VM driver of bench/compare: runs a plan of benchmark runs between the two
Soft-RoCE addresses and prints one line per run on stdout:

    XPC-RUN {json}

Progress goes to stderr.  Started by bench/compare as
    tools/softroce/vm run ... -- /usr/bin/python3 bench/compare.d/guest.py PLAN.json

The plan (written by the host) lists the runs in the order to execute them
(variants already interleaved); each run is self-contained: start a server on
10.77.0.1, run the client (whose packets leave from 10.77.0.2 through the VM's
policy routing, so they cross veth1 -> veth0), stop the server, and record the
rxe/veth counter deltas around it.  Every process has a deadline, and a failed
run never stops the next one.  Standard library only.

`bench/compare --host` runs this same driver directly on the host (no VM); its
plan then sets the optional keys
    addr      server address (default $XP_ADDR0 or 10.77.0.1), e.g. 127.0.0.1
    netdevs   interfaces whose counters are read (default veth0, veth1), e.g. lo
    wrap      {"server": [...], "client": [...]}: argv prefix of each side, e.g.
              nice -n -15 taskset -c 0; the side's environment (LD_PRELOAD) is
              then passed through env(1) after the prefix, so the wrappers
              themselves are never preloaded
    workdir   where the logs go (default $TMPDIR/compare)
and a run's "port": 0 lets the server pick a free port (read back from its
"listening on ... port N" line).
"""
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

PLAN = json.load(open(sys.argv[1]))
A0 = PLAN.get("addr") or os.environ.get("XP_ADDR0", "10.77.0.1")  # server (veth0 / rxe0)
A1 = os.environ.get("XP_ADDR1", "10.77.0.2")  # client (veth1 / rxe1)
GID = os.environ.get("XP_GID_INDEX", "1")
TMP = os.environ.get("TMPDIR", "/tmp")
WORK = PLAN.get("workdir") or os.path.join(TMP, "compare")
NETDEVS = PLAN.get("netdevs") or ["veth0", "veth1"]
WRAP = PLAN.get("wrap") or {}
os.makedirs(WORK, exist_ok=True)


def log(msg):
    sys.stderr.write("[compare] %s\n" % msg)
    sys.stderr.flush()


def emit(rec):
    sys.stdout.write("XPC-RUN " + json.dumps(rec, separators=(",", ":")) + "\n")
    sys.stdout.flush()


# ---- counters ---------------------------------------------------------------
# Same names as tools/softroce/bin/rxe-counters (<rxe>.<hw counter>,
# <veth>.<stat>), read directly: every fork+exec costs ~0.1 s under TCG.
def counters():
    c = {}
    for f in glob.glob("/sys/class/infiniband/*/ports/1/hw_counters/*"):
        p = f.split("/")
        try:
            with open(f) as fh:
                c["%s.%s" % (p[4], p[-1])] = int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    for d in NETDEVS:
        for s in ("tx_packets", "rx_packets", "tx_bytes", "rx_bytes", "tx_dropped", "rx_dropped"):
            try:
                with open("/sys/class/net/%s/statistics/%s" % (d, s)) as fh:
                    c["%s.%s" % (d, s)] = int(fh.read())
            except (OSError, ValueError):
                pass
    return c


def delta(before, after):
    keys = set(before) | set(after)
    return {k: after.get(k, 0) - before.get(k, 0) for k in sorted(keys) if after.get(k, 0) - before.get(k, 0) != 0}


# ---- processes --------------------------------------------------------------
class Proc:
    """A child with a log file, reaped with wait4 so its rusage is known."""

    def __init__(self, argv, env_extra, out, err=None, wrap=None):
        if wrap:  # nice/taskset first, then env(1) sets the side's variables for the program only
            argv = list(wrap) + ["env"] + ["%s=%s" % kv for kv in sorted(env_extra.items())] + list(argv)
            env_extra = {}
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        env.update(env_extra)
        self.out, self.err = out, err or out
        fo = open(out, "w")
        fe = fo if self.err == out else open(self.err, "w")
        self.p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=fo, stderr=fe,
                                  start_new_session=True)
        fo.close()
        if fe is not fo:
            fe.close()
        self.pid = self.p.pid
        self.rc = None
        self.ru = None
        self.t0 = time.monotonic()
        self.wall = None

    def poll(self):
        if self.rc is not None:
            return self.rc
        try:
            pid, status, ru = os.wait4(self.pid, os.WNOHANG)
        except ChildProcessError:
            self.rc = -999
            return self.rc
        if pid == 0:
            return None
        self.wall = time.monotonic() - self.t0
        self.rc = os.waitstatus_to_exitcode(status)
        self.ru = ru
        self.p.returncode = self.rc  # keep Popen from reaping again
        return self.rc

    def wait(self, secs):
        """Wait up to secs; None if still running."""
        end = time.monotonic() + secs
        while True:
            rc = self.poll()
            if rc is not None:
                return rc
            if time.monotonic() >= end:
                return None
            time.sleep(0.05)

    def send(self, sig):
        if self.rc is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self, sig=signal.SIGTERM, grace=5.0):
        """Signal, wait, then kill the process group.  Returns the exit code."""
        if self.poll() is None:
            self.send(sig)
            if self.wait(grace) is None:
                try:
                    os.killpg(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.wait(5)
        return self.rc

    def cpu(self):
        return (self.ru.ru_utime + self.ru.ru_stime) if self.ru else None

    def text(self, which="out", limit=200000):
        try:
            with open(self.out if which == "out" else self.err, errors="replace") as fh:
                return fh.read()[-limit:]
        except OSError:
            return ""


CLK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid):
    """utime+stime of a live process, seconds (None if gone)."""
    try:
        with open("/proc/%d/stat" % pid) as fh:
            f = fh.read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / CLK
    except (OSError, IndexError, ValueError):
        return None


def tcp_listening(port):
    """Is some socket listening on TCP port (any address)?  /proc/net/tcp{,6}."""
    hexport = ":%04X" % port
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(f) as fh:
                next(fh)
                for line in fh:
                    p = line.split()
                    if p[1].endswith(hexport) and p[3] == "0A":
                        return True
        except OSError:
            pass
    return False


def wait_for(pred, secs, proc=None):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        if pred():
            return True
        if proc is not None and proc.poll() is not None:
            return False
        time.sleep(0.05)
    return pred()


def err_line(text):
    """The most telling line of a failed program's output."""
    pat = re.compile(r"error|fail|abort|smash|unsupported|not supported|refused|terminated|"
                     r"timed out|timeout|unable|cannot|couldn't|invalid|reset|denied|no such", re.I)
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    hits = [l for l in lines if pat.search(l)]
    pick = hits[-1] if hits else (lines[-1] if lines else "")
    return pick[:200]


def last_json(text):
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


# ---- one xpress-bench run ---------------------------------------------------
def variant_env(variant, tag, side):
    if variant == "xpress":
        if not PLAN.get("lib"):
            return None
        env = {"LD_PRELOAD": PLAN["lib"], "XPRESS_STATS": "json", "XPRESS_STATS_LIVE": "1",
               "XPRESS_STATS_FILE": os.path.join(WORK, "%s.%s.xstats.json" % (tag, side))}
        env.update(PLAN.get("xpress_env") or {})  # bench/compare --xpress-env VAR=VALUE
        return env
    if variant == "rsocket":
        if not PLAN.get("rsocket"):
            return None
        return {"LD_PRELOAD": PLAN["rsocket"]}
    return {}


def xpress_stats_live(pid):
    """The server's xpress statistics, read live before it is stopped (the
    server leaves with _exit, which skips the library's exit-time dump)."""
    xs = PLAN.get("xpress_stat")
    if not xs or not os.path.exists(xs):
        return None
    try:
        r = subprocess.run([xs, "--json", str(pid)], capture_output=True, text=True, timeout=15,
                           env={k: v for k, v in os.environ.items() if k != "LD_PRELOAD"})
        return json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else None
    except (subprocess.SubprocessError, ValueError, OSError):
        return None


def read_json_file(path):
    try:
        with open(path) as fh:
            txt = fh.read()
    except OSError:
        return None
    objs = []
    for line in txt.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                objs.append(json.loads(line))
            except ValueError:
                pass
    if not objs:
        try:
            objs = [json.loads(txt)]
        except ValueError:
            return None
    return objs[-1]


def run_xb(run, rec):
    v, tag, port = run["variant"], "r%03d" % run["id"], run["port"]
    senv, cenv = variant_env(v, tag, "server"), variant_env(v, tag, "client")
    if senv is None:
        rec.update(ok=False, error="%s: preload library not available" % v)
        return
    xb = PLAN["xpress_bench"]
    t0 = time.monotonic()
    srv = Proc([xb, "server", "--port", str(port), "--bind", A0, "--timeout", str(run["timeout"] + 30)],
               senv, os.path.join(WORK, tag + ".server.log"), wrap=WRAP.get("server"))
    up = wait_for(lambda: "listening on" in srv.text(), 20, srv)
    if up and not port:  # --port 0: the server picked one
        m = re.search(r"listening on \S+ port (\d+)", srv.text())
        port = int(m.group(1)) if m else 0
        rec["port"] = port
    if not up or not port:
        srv.stop()
        rec.update(ok=False, error="server did not start: " + (err_line(srv.text()) or "exit %s" % srv.rc))
        rec["server_log"] = srv.text(limit=2000)
        return
    t1 = time.monotonic()
    argv = [xb, run["scenario"], "--host", A0, "--port", str(port), "--json", "--quiet",
            "--label", v, "--timeout", str(run["timeout"])] + run["args"]
    rec["argv"] = " ".join(argv[1:])
    cli = Proc(argv, cenv, os.path.join(WORK, tag + ".client.out"), os.path.join(WORK, tag + ".client.err"),
               wrap=WRAP.get("client"))
    rc = cli.wait(run["timeout"] + 15)
    if rc is None:
        cli.stop(signal.SIGKILL, 1)
        rc = 124
    t2 = time.monotonic()
    if v == "xpress":
        rec["xpress_stats_server"] = xpress_stats_live(srv.pid)
    # rsocket's preloaded server never leaves on SIGTERM within 5 s (seen in
    # every run; presumably its 200 ms poll loop, which goes through rpoll,
    # does not return): kill it sooner.
    src = srv.stop(signal.SIGTERM, 1.5 if v == "rsocket" else 5)
    rec["server_stop"] = ("killed: ignored SIGTERM" if src == -signal.SIGKILL else
                          "exit %s after SIGTERM" % src)
    rec["phases"] = {"server_up_s": round(t1 - t0, 2), "client_s": round(t2 - t1, 2),
                     "stop_s": round(time.monotonic() - t2, 2)}
    rec["client_rc"], rec["server_rc"] = rc, src
    out, err = cli.text("out"), cli.text("err")
    rep = last_json(out)
    rec["report"] = rep
    if v == "xpress":
        rec["xpress_stats_client"] = read_json_file(cenv["XPRESS_STATS_FILE"])
        if rec["xpress_stats_server"] is None:  # in case a future server exits normally
            rec["xpress_stats_server"] = read_json_file(senv["XPRESS_STATS_FILE"])
    if rep is not None and rep.get("ok") and rc == 0:
        rec["ok"] = True
    else:
        why = []
        if rc == 124:
            why.append("client killed after %d s (no result)" % (run["timeout"] + 15))
        elif rc == 3:
            why.append("client hit its --timeout %d s" % run["timeout"])
        elif rc is not None and rc < 0:
            why.append("client died of signal %d" % -rc)
        if rep is not None and rep.get("errors"):
            why.append("; ".join(str(e) for e in rep["errors"][:3]))
        e = err_line(err) or err_line(out)
        if e:
            why.append(e)
        if not why:
            why.append("client exit %s" % rc)
        se = err_line(srv.text())
        if se and "listening" not in se and "stopped" not in se:
            why.append("server: " + se)
        rec.update(ok=False, error=" | ".join(why)[:400])
        rec["client_stderr_tail"] = err[-1500:]
        rec["server_log_tail"] = srv.text(limit=1500)


# ---- one perftest run -------------------------------------------------------
def run_perftest(run, rec):
    tool, size, iters, port = run["tool"], run["size"], run["iters"], run["port"]
    common = ["-x", GID, "-s", str(size), "-n", str(iters), "-F", "-p", str(port)]
    if tool.endswith("_bw"):
        common.append("--report_gbits")
    tag = "r%03d" % run["id"]
    # stdbuf -oL: the result header ("#bytes ...") shows up when perftest prints
    # it, just before the measured loop; both processes' CPU is sampled then,
    # so the CPU figure is the measured part only, not QP setup and exchange.
    pre = ["stdbuf", "-oL"] if PLAN.get("stdbuf", True) else []
    t0 = time.monotonic()
    srv = Proc(pre + [tool, "-d", "rxe0"] + common, {}, os.path.join(WORK, tag + ".pt-server.log"),
               wrap=WRAP.get("server"))
    if not wait_for(lambda: tcp_listening(port), 20, srv):
        srv.stop()
        rec.update(ok=False, error="%s server did not start: %s" % (tool, err_line(srv.text()) or "exit %s" % srv.rc))
        return
    t1 = time.monotonic()
    argv = [tool, "-d", "rxe1"] + common + [A0]
    rec["argv"] = " ".join(argv)
    cli = Proc(pre + argv, {}, os.path.join(WORK, tag + ".pt-client.log"), wrap=WRAP.get("client"))
    end = time.monotonic() + run["timeout"]
    snap = None
    rc = None
    while time.monotonic() < end:
        rc = cli.poll()
        if rc is not None:
            break
        if snap is None and "#bytes" in cli.text():
            snap = (proc_cpu(cli.pid), proc_cpu(srv.pid), time.monotonic())
        time.sleep(0.02)
    if rc is None:
        cli.stop(signal.SIGKILL, 1)
        rc = 124
    t2 = time.monotonic()
    src = srv.wait(10)
    if src is None:
        srv.stop(signal.SIGTERM, 3)
    rec["phases"] = {"server_up_s": round(t1 - t0, 2), "client_s": round(t2 - t1, 2),
                     "stop_s": round(time.monotonic() - t2, 2)}
    out = cli.text()
    rec["client_rc"], rec["server_rc"] = rc, srv.rc
    rec["perftest_output"] = "\n".join(l for l in out.splitlines() if re.match(r"\s*\d", l) or "#bytes" in l)[-2000:]
    res = None
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 4 and f[0] == str(size) and f[1].isdigit():
            try:
                vals = [float(x) for x in f[2:]]
            except ValueError:
                continue
            res = vals
    if rc != 0 or res is None:
        rec.update(ok=False, error="%s: %s" % (tool, "killed after %d s" % run["timeout"] if rc == 124
                                                else (err_line(out) or "exit %s, no result line" % rc)))
        rec["client_log_tail"] = out[-1500:]
        return
    cpu_c, cpu_s = cli.cpu(), srv.cpu()
    r = {"tool": tool, "size": size, "iters": iters, "client_cpu_s": cpu_c, "server_cpu_s": cpu_s,
         "client_wall_s": cli.wall, "server_wall_s": srv.wall, "cpu_window": "whole process"}
    if snap and None not in snap[:2] and cpu_c is not None and cpu_s is not None:
        r.update(client_cpu_s=cpu_c - snap[0], server_cpu_s=cpu_s - snap[1], cpu_window="measured loop",
                 client_cpu_whole_s=cpu_c, server_cpu_whole_s=cpu_s,
                 measured_wall_s=round(t2 - snap[2], 3))
    if tool.endswith("_lat"):
        # #bytes #iterations t_min t_max t_typical t_avg t_stdev p99 p99.9 (one way, us)
        keys = ["t_min_us", "t_max_us", "t_typical_us", "t_avg_us", "t_stdev_us", "p99_us", "p999_us"]
        r.update({k: res[i] for i, k in enumerate(keys) if i < len(res)})
    else:
        # #bytes #iterations BW_peak BW_average MsgRate (Gb/s, Mpps)
        keys = ["bw_peak_gbps", "bw_avg_gbps", "msg_rate_mpps"]
        r.update({k: res[i] for i, k in enumerate(keys) if i < len(res)})
    rec["perftest"] = r
    bad = [k for k in ("t_typical_us", "t_avg_us", "p99_us", "bw_avg_gbps") if k in r and
           (r[k] != r[k] or r[k] in (float("inf"), float("-inf")))]
    if bad:
        # perftest turns cycles into us with a CPU clock rate it estimates at
        # start-up; under TCG that estimate sometimes fails and it prints inf.
        rec.update(ok=False, error="%s printed %s for %s (its CPU-clock estimate failed under TCG)"
                   % (tool, r[bad[0]], ", ".join(bad)))
        return
    rec["ok"] = True


# ---- main -------------------------------------------------------------------
def main():
    info = {"kernel": os.uname().release, "vcpus": os.cpu_count(),
            "rxe": sorted(os.path.basename(d) for d in glob.glob("/sys/class/infiniband/*"))}
    try:
        info["loadavg_start"] = open("/proc/loadavg").read().split()[:3]
    except OSError:
        pass
    sys.stdout.write("XPC-INFO " + json.dumps(info) + "\n")
    sys.stdout.flush()
    runs = PLAN["runs"]
    deadline = time.monotonic() + PLAN.get("budget_s", 1e9)
    t_start = time.monotonic()
    for n, run in enumerate(runs):
        rec = {"id": run["id"], "round": run["round"], "case": run["case"], "scenario": run["scenario"],
               "variant": run["variant"], "size": run.get("size"), "ok": False, "error": None}
        if time.monotonic() > deadline:
            rec["error"] = "skipped: the plan's time budget (%d s) was used up" % PLAN["budget_s"]
            emit(rec)
            continue
        log("%d/%d round %d %s %s ..." % (n + 1, len(runs), run["round"], run["case"], run["variant"]))
        t0 = time.monotonic()
        c0 = counters()
        try:
            if run["kind"] == "perftest":
                run_perftest(run, rec)
                if not rec["ok"] and "CPU-clock estimate" in str(rec["error"]):
                    log("   %s; retrying once" % rec["error"])
                    rec["retried_after"] = rec["error"]
                    rec.update(ok=False, error=None)
                    run_perftest(run, rec)
            else:
                run_xb(run, rec)
        except Exception as e:  # a driver bug must not stop the other runs
            rec.update(ok=False, error="driver error: %r" % (e,))
        rec["counters"] = delta(c0, counters())
        rec["wall_s"] = round(time.monotonic() - t0, 2)
        try:
            rec["loadavg"] = open("/proc/loadavg").read().split()[0]
        except OSError:
            pass
        emit(rec)
        log("   %s in %.1f s%s" % ("ok" if rec["ok"] else "FAILED", rec["wall_s"],
                                  "" if rec["ok"] else ": " + str(rec["error"])[:160]))
    sys.stdout.write("XPC-END " + json.dumps({"runs": len(runs), "seconds": round(time.monotonic() - t_start, 1)}) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
