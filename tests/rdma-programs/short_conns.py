"""Short connections to a server without xpress (tests/rdma-programs/cases/fallback.sh).

usage: short_conns.py HOST PORT LOGGLOB N
Makes N connections one after the other; each sends a request and is closed
as soon as this process's xpress log (LOGGLOB, XPRESS_LOG_LEVEL=debug) shows
one more rdma_cm rejection than before it (at most 1.5 s), then 0.1 s pause.
So each connection closes before the 50 ms retry of its own attempt: only
what other connections learnt can spare the later ones an attempt.
"""
import glob
import socket
import sys
import time

host, port, pattern, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])


def rejections():
    total = 0
    for name in glob.glob(pattern):
        with open(name, errors="replace") as f:
            total += f.read().count("RDMA_CM_EVENT_REJECTED")
    return total


waited = []
for _ in range(n):
    seen = rejections()
    s = socket.create_connection((host, port))
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    t0 = time.monotonic()
    while rejections() == seen and time.monotonic() - t0 < 1.5:
        time.sleep(0.002)
    waited.append(rejections() > seen)
    s.close()
    time.sleep(0.1)
print("connections %d rejected_while_open %d" % (n, sum(waited)))
