#!/usr/bin/env python3
"""Python asyncio streams with many connections (tests/rdma-programs/cases/
asyncio.sh): one event loop per process, every connection concurrent.

  aio_pair.py server PORT N      echo server on every address; exits
                                 after N connections closed
  aio_pair.py client HOST PORT N ROUNDS SIZE
      N concurrent connections, each ROUNDS request/answer exchanges of SIZE
      bytes (the answer is the request echoed, checked); prints
      "ok N connections ROUNDS rounds", "ms M" on stderr
"""
import asyncio
import os
import sys
import time


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
        except asyncio.IncompleteReadError:
            pass
        w.close()
        closed += 1
        if closed == n:
            done.set()

    # None: one socket per family, as asyncio servers commonly listen.
    s = await asyncio.start_server(handle, None, port, backlog=1024)
    print("serving", flush=True)
    await done.wait()
    s.close()


async def one(host, port, rounds, size):
    r, w = await asyncio.open_connection(host, port)
    for _ in range(rounds):
        m = os.urandom(size)
        w.write(len(m).to_bytes(4, "big") + m)
        await w.drain()
        hdr = await r.readexactly(4)
        if await r.readexactly(int.from_bytes(hdr, "big")) != m:
            raise RuntimeError("echo differs")
    w.close()
    await w.wait_closed()


async def client(host, port, n, rounds, size):
    t0 = time.monotonic()
    await asyncio.gather(*(one(host, port, rounds, size) for _ in range(n)))
    print("ok %d connections %d rounds" % (n, rounds), flush=True)
    print("ms %.0f" % ((time.monotonic() - t0) * 1000), file=sys.stderr)


if __name__ == "__main__":
    a = sys.argv
    if a[1] == "server":
        asyncio.run(server(int(a[2]), int(a[3])))
    else:
        asyncio.run(client(a[2], int(a[3]), int(a[4]), int(a[5]), int(a[6])))
