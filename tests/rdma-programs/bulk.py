#!/usr/bin/env python3
"""Bulk TCP transfer with a sha256 on both sides (tests/rdma-programs).

  bulk.py recv --bind ADDR --port PORT [--ready FILE]
      accept one connection, read to EOF, print "bytes N sha256 HEX"
      (an IPv6 ADDR such as "::" makes a dual-stack socket)
      (--progress FILE: "unix-time seconds bytes" lines every 0.1 s;
      --count N: N connections one after the other, a line each)
  bulk.py send --host ADDR --port PORT --bytes N
      send N bytes of pseudo-random data, shut down the write side, wait for
      the receiver to close, print "bytes N sha256 HEX"
      (--rate MIB: at most MIB MiB/s before --hold-at; --hold-at N
      --hold-file F: after N bytes, wait until F exists, at most
      --hold-timeout seconds, then send the rest at full speed)

The data: one random 1 MiB block, every 64 KiB piece of it stamped with a
running counter before it is sent, so a lost, duplicated or reordered piece
changes the hash.  Both ends hash what really went through their socket
calls; the test compares the two lines.
"""
import argparse
import hashlib
import os
import socket
import struct
import sys
import time

PIECE = 64 * 1024
BLOCK = 16 * PIECE


def size(text):
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower()
    if t and t[-1] in mult:
        return int(t[:-1]) * mult[t[-1]]
    return int(t)


def recv(args):
    # An IPv6 address (`::`): a dual-stack socket, as the JVM's and gRPC's.
    family = socket.AF_INET6 if ":" in args.bind else socket.AF_INET
    ls = socket.socket(family, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        ls.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    ls.bind((args.bind, args.port))
    ls.listen(1)
    if args.ready:
        with open(args.ready, "w") as f:
            f.write("listening\n")
    ls.settimeout(args.timeout)
    for _ in range(args.count):
        c, _ = ls.accept()
        receive(c, args)
    ls.close()


def receive(c, args):
    c.settimeout(args.timeout)
    h = hashlib.sha256()
    n = 0
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    prog = open(args.progress, "w", buffering=1) if args.progress else None
    t0 = time.monotonic()
    last = t0
    while True:
        k = c.recv_into(buf)
        if k == 0:
            break
        h.update(view[:k])
        n += k
        if prog and time.monotonic() - last >= 0.1:
            last = time.monotonic()
            prog.write("%.3f %.3f %d\n" % (time.time(), last - t0, n))
    if prog:
        prog.write("%.3f %.3f %d\n" % (time.time(), time.monotonic() - t0, n))
        prog.close()
    c.close()
    print("bytes %d sha256 %s" % (n, h.hexdigest()), flush=True)


def send_pieces(s, view, piece):
    """sendall, in calls of at most `piece` bytes (0: one call): small
    writes are what xpress's autocorking gathers into held records."""
    if piece <= 0:
        s.sendall(view)
        return
    for off in range(0, len(view), piece):
        s.sendall(view[off:off + piece])


def send(args):
    total = size(args.bytes)
    block = bytearray(os.urandom(BLOCK))
    view = memoryview(block)
    s = socket.create_connection((args.host, args.port), timeout=args.timeout)
    h = hashlib.sha256()
    sent = 0
    counter = 0
    settle = args.settle
    hold = size(args.hold_at) if args.hold_at else None
    t0 = time.monotonic()
    while sent < total:
        if hold is not None and sent >= hold:  # the test lets us go on
            t = time.monotonic() + args.hold_timeout
            while not os.path.exists(args.hold_file) and time.monotonic() < t:
                time.sleep(0.05)
            hold = None
        elif hold is not None and args.rate > 0:
            ahead = sent / (args.rate * (1 << 20)) - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)
        for off in range(0, BLOCK, PIECE):
            struct.pack_into("<Q", block, off, counter)
            counter += 1
        k = min(BLOCK, total - sent)
        if hold is not None and args.rate > 0:
            k = min(k, PIECE)  # paced in small steps
        if settle > 0:  # a first piece, then time for the upgrade to finish
            # 16 KiB: what a one-way connection's binding proof needs to
            # have crossed before any direction switches (docs/protocol.md §2)
            first = min(k, 16384)
            s.sendall(view[:first])
            time.sleep(settle)
            settle = 0
            send_pieces(s, view[first:k], args.piece)
        else:
            send_pieces(s, view[:k], args.piece)
        h.update(view[:k])
        sent += k
    s.shutdown(socket.SHUT_WR)
    # wait for the receiver to close: it has read everything by then
    while s.recv(65536):
        pass
    s.close()
    print("bytes %d sha256 %s" % (sent, h.hexdigest()), flush=True)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("recv")
    r.add_argument("--bind", required=True)
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--ready")
    r.add_argument("--count", type=int, default=1, help="connections to take, one after the other")
    r.add_argument("--progress", help="append 'unix-time seconds bytes' lines every 0.1 s")
    r.add_argument("--timeout", type=float, default=60)
    s = sub.add_parser("send")
    s.add_argument("--host", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--bytes", required=True)
    s.add_argument("--timeout", type=float, default=60)
    s.add_argument("--settle", type=float, default=0,
                   help="send 16 KiB, then wait this long (the upgrade finishes) before the rest")
    s.add_argument("--rate", type=float, default=0, help="MiB/s before --hold-at (0: no limit)")
    s.add_argument("--piece", type=int, default=0, help="write in send calls of this many bytes")
    s.add_argument("--hold-at", help="after this many bytes, wait for --hold-file")
    s.add_argument("--hold-file")
    s.add_argument("--hold-timeout", type=float, default=30)
    args = p.parse_args()
    try:
        recv(args) if args.cmd == "recv" else send(args)
    except Exception as e:  # one line, the test prints it
        print("bulk.py %s: %s: %s" % (args.cmd, type(e).__name__, e), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
