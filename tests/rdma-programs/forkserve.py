#!/usr/bin/env python3
"""An accept-then-fork echo server and its client (tests/rdma-programs, case fork).

  forkserve.py serve --bind ADDR --port PORT --who child|parent [--pre N]
      accept one connection, echo its first N bytes (default 8 MiB: by then
      the stream runs over RDMA), then fork:
        child:  the child echoes the rest; the parent closes its copy of the
                socket at once and waits for the child
        parent: the child exits at once (it execs /bin/true); the parent
                echoes the rest
      The echoing process prints "recv N sha256 HEX" (every byte it read,
      those before the fork included) at the end of the stream; the parent
      prints "fork at T" (unix time) to stderr.
  forkserve.py client --host ADDR --port PORT --bytes N [--progress FILE]
      send 4 KiB, wait a second (the upgrade finishes), then the rest of N
      bytes (64 KiB pieces stamped with a counter, as bulk.py), while a
      thread reads the echo; prints "sent N sha256 HEX echo M sha256 HEX"
      (--progress: "unix-time bytes-echoed" lines every 0.1 s).
"""
import argparse
import hashlib
import os
import socket
import struct
import sys
import threading
import time

PIECE = 64 * 1024
BLOCK = 16 * PIECE


def size(text):
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower()
    if t and t[-1] in mult:
        return int(t[:-1]) * mult[t[-1]]
    return int(t)


def echo(c, h, n, limit):
    """Echo until `limit` bytes were read in all (None: to EOF)."""
    buf = bytearray(1 << 18)
    view = memoryview(buf)
    while limit is None or n < limit:
        want = len(buf) if limit is None else min(len(buf), limit - n)
        k = c.recv_into(buf, want)
        if k == 0:
            break
        h.update(view[:k])
        c.sendall(view[:k])
        n += k
    return n


def serve(args):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((args.bind, args.port))
    ls.listen(1)
    ls.settimeout(args.timeout)
    c, _ = ls.accept()
    ls.close()
    c.settimeout(args.timeout)
    h = hashlib.sha256()
    n = echo(c, h, 0, args.pre)
    print("fork at %.3f" % time.time(), file=sys.stderr, flush=True)
    pid = os.fork()
    user = (pid == 0) == (args.who == "child")
    if not user:
        if pid == 0:  # the helper child: never touches the socket
            os.execv("/bin/true", ["true"])
        c.close()  # the parent's copy: the child goes on with the stream
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
    n = echo(c, h, n, None)
    c.shutdown(socket.SHUT_WR)
    c.close()
    print("recv %d sha256 %s" % (n, h.hexdigest()), flush=True)
    if pid != 0:
        os.waitpid(pid, 0)


def client(args):
    total = size(args.bytes)
    s = socket.create_connection((args.host, args.port), timeout=args.timeout)
    got = {"n": 0, "h": hashlib.sha256(), "err": None}

    def reader():
        buf = bytearray(1 << 18)
        view = memoryview(buf)
        prog = open(args.progress, "w", buffering=1) if args.progress else None
        last = 0
        try:
            while True:
                k = s.recv_into(buf)
                if k == 0:
                    break
                got["h"].update(view[:k])
                got["n"] += k
                if prog and time.monotonic() - last >= 0.1:
                    last = time.monotonic()
                    prog.write("%.3f %d\n" % (time.time(), got["n"]))
        except Exception as e:  # reported by the main thread
            got["err"] = e
        if prog:
            prog.write("%.3f %d\n" % (time.time(), got["n"]))
            prog.close()

    t = threading.Thread(target=reader)
    t.start()
    block = bytearray(os.urandom(BLOCK))
    view = memoryview(block)
    h = hashlib.sha256()
    sent = 0
    counter = 0
    first = True
    while sent < total:
        for off in range(0, BLOCK, PIECE):
            struct.pack_into("<Q", block, off, counter)
            counter += 1
        k = min(BLOCK, total - sent)
        if first:  # a first piece on TCP, then time for the upgrade
            s.sendall(view[:4096])
            time.sleep(1)
            s.sendall(view[4096:k])
            first = False
        else:
            s.sendall(view[:k])
        h.update(view[:k])
        sent += k
    s.shutdown(socket.SHUT_WR)
    t.join(args.timeout)
    s.close()
    if got["err"] is not None:
        raise got["err"]
    print("sent %d sha256 %s echo %d sha256 %s" % (sent, h.hexdigest(), got["n"], got["h"].hexdigest()),
          flush=True)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("serve")
    r.add_argument("--bind", required=True)
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--who", choices=["child", "parent"], required=True)
    r.add_argument("--pre", type=size, default=8 << 20)
    r.add_argument("--timeout", type=float, default=60)
    c = sub.add_parser("client")
    c.add_argument("--host", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--bytes", required=True)
    c.add_argument("--progress")
    c.add_argument("--timeout", type=float, default=60)
    args = p.parse_args()
    try:
        serve(args) if args.cmd == "serve" else client(args)
    except Exception as e:  # one line, the test prints it
        print("forkserve.py %s: %s: %s" % (args.cmd, type(e).__name__, e), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
