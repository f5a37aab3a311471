#!/usr/bin/env python3
"""memcached text-protocol client for the program tests.

Usage: mc_client.py PORT FILE...
       mc_client.py --stats PORT NAME...   (prints "NAME VALUE" lines)
Stores each FILE under its base name, reads everything back (single and
multi-get), exercises incr/decr/append/cas/delete/noreply/pipelining, and
prints one deterministic line per operation.  Exits 1 on any mismatch.
"""
import hashlib
import os
import socket
import sys


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=20)
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def _fill(self):
        chunk = self.s.recv(65536)
        if not chunk:
            raise EOFError("server closed the connection")
        self.buf += chunk

    def line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exact(self, n):
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def values(self):
        """Read VALUE blocks up to END: {key: (flags, data, cas)}."""
        out = {}
        while True:
            line = self.line()
            if line == b"END":
                return out
            parts = line.split()
            if parts[0] != b"VALUE":
                raise ValueError("unexpected reply %r" % line)
            n = int(parts[3])
            data = self.exact(n + 2)
            if data[-2:] != b"\r\n":
                raise ValueError("value of %r not terminated by CRLF" % parts[1])
            out[parts[1].decode()] = (int(parts[2]), data[:-2], parts[4] if len(parts) > 4 else None)


failures = 0


def expect(what, got, want):
    global failures
    if got != want:
        failures += 1
        print("MISMATCH %s: got %r want %r" % (what, got, want))


def h(data):
    return hashlib.sha256(data).hexdigest()[:16]


def stats(port, names):
    c = Conn(port)
    c.send(b"stats\r\n")
    st = {}
    while True:
        line = c.line().decode()
        if line == "END":
            break
        _, k, val = line.split(" ", 2)
        st[k] = val
    c.send(b"quit\r\n")
    for n in names:
        print(n, st.get(n, "absent"))
    return 0


def main():
    if sys.argv[1] == "--stats":
        return stats(int(sys.argv[2]), sys.argv[3:])
    port = int(sys.argv[1])
    files = {os.path.basename(p): open(p, "rb").read() for p in sys.argv[2:]}
    c = Conn(port)

    for i, (key, data) in enumerate(sorted(files.items())):
        c.send(b"set %s %d 0 %d\r\n%s\r\n" % (key.encode(), i, len(data), data))
        r = c.line()
        expect("set " + key, r, b"STORED")
        print("set %s %d bytes: %s" % (key, len(data), r.decode()))

    for i, (key, data) in enumerate(sorted(files.items())):
        c.send(b"get %s\r\n" % key.encode())
        v = c.values()
        got = v.get(key, (None, b"", None))
        expect("get %s flags" % key, got[0], i)
        expect("get %s data" % key, got[1] == data, True)
        print("get %s: flags=%s %d bytes sha256=%s" % (key, got[0], len(got[1]), h(got[1])))

    keys = sorted(files)
    c.send(b"get " + b" ".join(k.encode() for k in keys) + b" missing-key\r\n")
    v = c.values()
    expect("multi-get keys", sorted(v), keys)
    for k in keys:
        expect("multi-get %s data" % k, v[k][1] == files[k], True)
    print("multi-get %d keys + 1 missing: %s" % (len(keys), " ".join(h(v[k][1]) for k in keys if k in v)))

    c.send(b"set counter 0 0 2\r\n10\r\nincr counter 5\r\ndecr counter 3\r\nincr counter 18446744073709551000\r\n")
    r = [c.line() for _ in range(4)]
    print("counter: " + " ".join(x.decode() for x in r))
    expect("counter", r, [b"STORED", b"15", b"12", b"18446744073709551012"])

    c.send(b"set s 0 0 3\r\nabc\r\nappend s 0 0 3\r\ndef\r\nprepend s 0 0 2\r\n>>\r\nget s\r\n")
    r = [c.line() for _ in range(3)]
    v = c.values()
    print("append/prepend: %s -> %s" % (" ".join(x.decode() for x in r), v["s"][1].decode()))
    expect("append/prepend", v["s"][1], b">>abcdef")

    c.send(b"gets s\r\n")
    cas = c.values()["s"][2]
    c.send(b"cas s 0 0 1 %s\r\nX\r\ncas s 0 0 1 %s\r\nY\r\nget s\r\n" % (cas, cas))
    r = [c.line() for _ in range(2)]
    v = c.values()
    print("cas: %s -> %s" % (" ".join(x.decode() for x in r), v["s"][1].decode()))
    expect("cas", (r, v["s"][1]), ([b"STORED", b"EXISTS"], b"X"))

    c.send(b"delete s\r\ndelete s\r\nget s\r\n")
    r = [c.line() for _ in range(2)]
    v = c.values()
    print("delete: %s, then %d values" % (" ".join(x.decode() for x in r), len(v)))
    expect("delete", (r, v), ([b"DELETED", b"NOT_FOUND"], {}))

    # 300 noreply sets, then 500 pipelined sets in one write, then a 800-key get.
    c.send(b"".join(b"set nr%d 0 0 %d noreply\r\n%s\r\n" % (i, len(b"v%d" % i), b"v%d" % i) for i in range(300)))
    c.send(b"".join(b"set p%d 0 0 %d\r\n%s\r\n" % (i, 100 + i, bytes([i % 256]) * (100 + i)) for i in range(500)))
    r = [c.line() for _ in range(500)]
    expect("pipelined sets", set(r), {b"STORED"})
    c.send(b"get " + b" ".join([b"nr%d" % i for i in range(300)] + [b"p%d" % i for i in range(500)]) + b"\r\n")
    v = c.values()
    ok = len(v) == 800 and all(v["nr%d" % i][1] == b"v%d" % i for i in range(300)) and all(
        v["p%d" % i][1] == bytes([i % 256]) * (100 + i) for i in range(500))
    expect("noreply+pipelined values", ok, True)
    print("noreply 300 + pipelined 500 sets: %d replies, %d values back, %s" % (len(r), len(v), "all correct" if ok else "WRONG"))

    c.send(b"quit\r\n")
    print("failures: %d" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
