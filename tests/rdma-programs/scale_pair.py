#!/usr/bin/env python3
"""Many concurrent connections between two asyncio processes (tests/
rdma-programs/cases/scale.sh, issue 28).

  scale_pair.py server PORT N
      echo server on every address; exits after N connections closed;
      prints "maxrss KIB" on stderr
  scale_pair.py client HOST PORT N ROUNDS SIZE
      N concurrent connections, each ROUNDS request/answer exchanges of
      SIZE bytes (the echo checked).  Once every connection finished its
      first exchange (all N open at once) it counts this process's queue
      pairs (`rdma resource show qp`, when there is such a tool).  Prints
      "ok N connections ROUNDS rounds" on stdout, "ms M", "open_ms M",
      "qps Q" and "maxrss KIB" on stderr.

Both raise RLIMIT_NOFILE to its hard limit first.
"""
import asyncio
import os
import resource
import subprocess
import sys
import time


def raise_nofile(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(soft, min(hard, n + 256))
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def maxrss():
    print("maxrss %d" % resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr, flush=True)


def count_qps():
    try:
        out = subprocess.run(["rdma", "resource", "show", "qp"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return -1
    # A QP's pid is the thread that created it (xpress's engine thread).
    tids = set(os.listdir("/proc/self/task"))
    n = 0
    for line in out.splitlines():
        f = line.split()
        if "type" in f and f[f.index("type") + 1] == "RC" and "pid" in f and \
                f[f.index("pid") + 1] in tids:
            n += 1
    return n


async def server(port, n):
    done = asyncio.Event()
    closed = 0

    async def handle(r, w):
        nonlocal closed
        try:
            while True:
                hdr = await r.readexactly(4)
                size = int.from_bytes(hdr, "big")
                w.write(hdr + await r.readexactly(size))
                await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        w.close()
        closed += 1
        if closed == n:
            done.set()

    s = await asyncio.start_server(handle, None, port, backlog=4096)
    print("serving", flush=True)
    await done.wait()
    s.close()


async def client(host, port, n, rounds, size):
    t0 = time.monotonic()
    opened = 0
    all_open = asyncio.Event()
    go = asyncio.Event()

    async def exchange(r, w):
        m = os.urandom(size)
        w.write(len(m).to_bytes(4, "big") + m)
        await w.drain()
        hdr = await r.readexactly(4)
        if await r.readexactly(int.from_bytes(hdr, "big")) != m:
            raise RuntimeError("echo differs")

    async def one():
        nonlocal opened
        r, w = await asyncio.open_connection(host, port)
        await exchange(r, w)
        opened += 1
        if opened == n:
            all_open.set()
        await go.wait()
        for _ in range(rounds - 1):
            await exchange(r, w)
        w.close()
        await w.wait_closed()

    async def census():
        await all_open.wait()
        print("open_ms %.0f" % ((time.monotonic() - t0) * 1000), file=sys.stderr, flush=True)
        qps = await asyncio.get_running_loop().run_in_executor(None, count_qps)
        print("qps %d" % qps, file=sys.stderr, flush=True)
        go.set()

    await asyncio.gather(census(), *(one() for _ in range(n)))
    print("ok %d connections %d rounds" % (n, rounds), flush=True)
    print("ms %.0f" % ((time.monotonic() - t0) * 1000), file=sys.stderr)


if __name__ == "__main__":
    a = sys.argv
    if a[1] == "server":
        raise_nofile(int(a[3]))
        asyncio.run(server(int(a[2]), int(a[3])))
    else:
        raise_nofile(int(a[4]))
        asyncio.run(client(a[2], int(a[3]), int(a[4]), int(a[5]), int(a[6])))
    maxrss()
