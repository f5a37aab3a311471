#!/usr/bin/env python3
"""The program side of the forger case (tests/rdma-programs/cases/forger.sh).

  forge_pair.py server --bind ADDR --port PORT
      echo server: one thread per connection, echoes until EOF
  forge_pair.py victim --host ADDR --port PORT --secs S --secret TEXT
      a plain client: sends TEXT, reads its echo, prints "victim port=P",
      waits S seconds (the forger works on its connection meanwhile), sends
      TEXT again and prints "victim ok" when both echoes are exact
  forge_pair.py bulk --host ADDR --port PORT --bytes N
      sends N pseudo-random bytes (one thread) while reading the echo
      (another), prints "sent N sha256 HEX got M sha256 HEX"
  forge_pair.py probe --host ADDR --port PORT --secs S [--interval 0.1] [--stop-file F] [--log L]
      every INTERVAL seconds: connect, send one byte, read its echo, close;
      prints "probe n=N fail=F p50_ms=.. p99_ms=.. max_ms=.." (connect to
      echo: the server's accept() and its first read and write); ends
      after S seconds or once F exists; L: "unix-time ms ok" per probe
"""
import argparse
import hashlib
import os
import socket
import sys
import threading
import time


def server(args):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((args.bind, args.port))
    ls.listen(512)

    def echo(c):
        try:
            while True:
                b = c.recv(65536)
                if not b:
                    break
                c.sendall(b)
        except OSError:
            pass
        c.close()

    while True:
        c, _ = ls.accept()
        threading.Thread(target=echo, args=(c,), daemon=True).start()


def bulk(args):
    c = socket.create_connection((args.host, args.port), timeout=args.timeout)
    block = os.urandom(1 << 20)
    hs, hr = hashlib.sha256(), hashlib.sha256()
    got = [0]

    def reader():
        while True:
            b = c.recv(65536)
            if not b:
                break
            hr.update(b)
            got[0] += len(b)

    t = threading.Thread(target=reader)
    t.start()
    sent, i = 0, 0
    while sent < args.bytes:
        piece = block[(i * 4096) % len(block):][:min(65536, args.bytes - sent)]
        piece = i.to_bytes(8, "little") + piece[8:]
        c.sendall(piece)
        hs.update(piece)
        sent += len(piece)
        i += 1
    c.shutdown(socket.SHUT_WR)
    t.join(args.timeout)
    c.close()
    print("sent %d sha256 %s got %d sha256 %s" % (sent, hs.hexdigest(), got[0], hr.hexdigest()))


def probe(args):
    lat, fails = [], 0
    log = open(args.log, "w", buffering=1) if args.log else None
    end = time.monotonic() + args.secs
    while time.monotonic() < end and not (args.stop_file and os.path.exists(args.stop_file)):
        t0 = time.monotonic()
        try:
            c = socket.create_connection((args.host, args.port), timeout=10)
            c.sendall(b"x")
            ok = c.recv(1) == b"x"
            c.close()
        except OSError:
            ok = False
        dt = time.monotonic() - t0
        if log:
            log.write("%.3f %.1f %d\n" % (time.time(), dt * 1000, ok))
        if ok:
            lat.append(dt * 1000)
        else:
            fails += 1
        time.sleep(max(0.0, args.interval - dt))
    lat.sort()

    def q(p):
        return lat[min(len(lat) - 1, int(p * len(lat)))] if lat else -1

    print("probe n=%d fail=%d p50_ms=%.1f p99_ms=%.1f max_ms=%.1f" %
          (len(lat), fails, q(0.5), q(0.99), lat[-1] if lat else -1))


def victim(args):
    c = socket.create_connection((args.host, args.port), timeout=args.timeout)
    msg = args.secret.encode()

    def exchange():
        c.sendall(msg)
        got = b""
        while len(got) < len(msg):
            b = c.recv(65536)
            if not b:
                break
            got += b
        return got == msg

    first = exchange()
    print("victim port=%d" % c.getsockname()[1], flush=True)
    time.sleep(args.secs)
    second = exchange()
    print("victim %s" % ("ok" if first and second else "corrupt"), flush=True)
    c.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["server", "bulk", "probe", "victim"])
    p.add_argument("--secret", default="")
    p.add_argument("--bind", default="0.0.0.0")
    p.add_argument("--host")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--bytes", type=int, default=1 << 20)
    p.add_argument("--secs", type=float, default=5)
    p.add_argument("--interval", type=float, default=0.1)
    p.add_argument("--stop-file")
    p.add_argument("--log")
    p.add_argument("--timeout", type=float, default=30)
    args = p.parse_args()
    {"server": server, "bulk": bulk, "probe": probe, "victim": victim}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
