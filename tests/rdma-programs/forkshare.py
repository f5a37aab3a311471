#!/usr/bin/env python3
"""Parent and fork child sharing one connection (tests/rdma-programs, case forkshare).

  forkshare.py serve --bind ADDR --port PORT --mode MODE [--pre N] [--block N]
      accept one connection, read the client's 4 KiB, send 1 MiB pieces
      until its xpress log says the stream resumed on TCP (the test makes
      its channel fail; at least 9, at most N bytes: default 64 MiB), read
      the client's one-byte answer (--moved: 9 MiB, no fault: the stream is
      still on RDMA and moves at the fork), then fork and share the socket:
        child-first   the child writes block A and exits, then the parent
                      writes block B
        parent-first  the parent writes block A, then the child writes
                      block B and exits
        split-read    the child writes "R", reads block A (exactly its
                      length) and exits; the parent writes "R", reads block B
      Then the parent reads to the client's end of stream.  The parent
      prints "fork at T" (unix time) to stderr and "server ok" (or what
      went wrong) to stdout; the child reports its reads to the parent over
      a pipe.
  forkshare.py client --host ADDR --port PORT --mode MODE [--pre N] [--block N]
      send 4 KiB, wait a second (the upgrade finishes), read the pieces,
      answer, then the mode's side: read blocks A and B (in that order) and
      check them, or send A after the first "R" and B after the second;
      prints "client ok" or what went wrong.
Blocks are fixed pseudo-random bytes (block(tag, n)): a byte lost,
duplicated or out of order fails the comparison.
"""
import argparse
import os
import random
import socket
import sys
import time


def size(text):
    mult = {"k": 1 << 10, "m": 1 << 20}
    t = text.strip().lower()
    if t and t[-1] in mult:
        return int(t[:-1]) * mult[t[-1]]
    return int(t)


def block(tag, n):
    return random.Random(tag).randbytes(n)


def read_exact(c, n):
    out = bytearray()
    while len(out) < n:
        k = c.recv(min(1 << 18, n - len(out)))
        if not k:
            break
        out += k
    return bytes(out)


def describe(got, want):
    if got == want:
        return "ok"
    i = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]), min(len(got), len(want)))
    return f"{len(got)} of {len(want)} bytes, first difference at {i}"


def resumed(log):
    try:
        with open(log, errors="replace") as f:
            return "resumed on TCP" in f.read()
    except OSError:
        return False


def serve(args):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((args.bind, args.port))
    ls.listen(1)
    c, _ = ls.accept()
    ls.close()
    c.settimeout(args.timeout)
    if len(read_exact(c, 4096)) != 4096:
        print("server: no hello", flush=True)
        return 1
    # 1 MiB pieces ("C" + piece) until the stream resumed on TCP (the test
    # library's fault, once its byte went over RDMA: an upgrade that took
    # long leaves the first bytes on TCP), then "E".
    piece = block("pre", 1 << 20)
    log = os.environ.get("XPRESS_LOG_FILE", "").replace("%p", str(os.getpid()))
    for i in range(args.pre >> 20):
        c.sendall(b"C" + piece)
        if i >= 8 and (args.moved or resumed(log)):
            break
    c.sendall(b"E")
    if read_exact(c, 1) != b"A":
        print("server: no answer to the first bytes", flush=True)
        return 1
    a, b = block("A", args.block), block("B", args.block)
    rfd, wfd = os.pipe()
    print(f"fork at {time.time():.3f}", file=sys.stderr, flush=True)
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        note = b"child ok"
        try:
            if args.mode == "child-first":
                c.sendall(a)
            elif args.mode == "parent-first":
                os.read(args.go_fd, 1)  # the parent's block went first
                c.sendall(b)
            else:
                c.sendall(b"R")
                got = read_exact(c, args.block)
                if got != a:
                    note = b"child read: " + describe(got, a).encode()
        except OSError as e:
            note = f"child: {e}".encode()
        os.write(wfd, note)
        os._exit(0)
    os.close(wfd)
    result = []
    try:
        if args.mode == "child-first":
            os.waitpid(pid, 0)
            c.sendall(b)
        elif args.mode == "parent-first":
            c.sendall(a)
            os.write(args.go_w, b"g")
            os.waitpid(pid, 0)
        else:
            os.waitpid(pid, 0)
            c.sendall(b"R")
            got = read_exact(c, args.block)
            if got != b:
                result.append("parent read: " + describe(got, b))
        rest = read_exact(c, 1 << 30)  # to the client's end of stream
        if rest:
            result.append(f"parent: {len(rest)} bytes after the blocks")
    except OSError as e:
        result.append(f"parent: {e}")
    child = os.read(rfd, 4096).decode(errors="replace")
    if child != "child ok":
        result.append(child or "child: no report")
    print("server " + ("ok" if not result else "; ".join(result)), flush=True)
    return 0 if not result else 1


def client(args):
    c = socket.create_connection((args.host, args.port), timeout=args.timeout)
    c.sendall(b"h" * 4096)
    time.sleep(1)
    piece = block("pre", 1 << 20)
    while True:
        kind = read_exact(c, 1)
        if kind == b"E":
            break
        got = read_exact(c, len(piece)) if kind == b"C" else b""
        if got != piece:
            print(f"client: first bytes {kind!r} " + describe(got, piece), flush=True)
            return 1
    c.sendall(b"A")
    a, b = block("A", args.block), block("B", args.block)
    problems = []
    try:
        if args.mode in ("child-first", "parent-first"):
            got = read_exact(c, 2 * args.block)
            if got != a + b:
                problems.append("blocks " + describe(got, a + b))
        else:
            for blk in (a, b):
                if read_exact(c, 1) != b"R":
                    problems.append("no R")
                    break
                c.sendall(blk)
    except OSError as e:
        problems.append(f"socket error: {e}")
    try:
        c.shutdown(socket.SHUT_WR)
        extra = read_exact(c, 1 << 20)
        if extra:
            problems.append(f"{len(extra)} bytes more than expected")
    except OSError as e:
        problems.append(f"socket error at the end: {e}")
    c.close()
    print("client " + ("ok" if not problems else "; ".join(problems)), flush=True)
    return 0 if not problems else 1


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("serve", "client"):
        s = sub.add_parser(name)
        if name == "serve":
            s.add_argument("--bind", required=True)
        else:
            s.add_argument("--host", required=True)
        s.add_argument("--port", type=int, required=True)
        s.add_argument("--mode", choices=["child-first", "parent-first", "split-read"], required=True)
        s.add_argument("--pre", type=size, default=64 << 20)
        s.add_argument("--block", type=size, default=1 << 20)
        s.add_argument("--timeout", type=float, default=20)
        s.add_argument("--moved", action="store_true", help="serve: no resume to wait for (9 MiB)")
    args = p.parse_args()
    if args.cmd == "serve":
        r, w = os.pipe()  # parent-first: the parent tells the child its block went
        args.go_fd, args.go_w = r, w
        return serve(args)
    return client(args)


if __name__ == "__main__":
    sys.exit(main())
