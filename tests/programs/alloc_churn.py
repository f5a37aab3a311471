"""Allocation-heavy Python for the hooked allocator (tests/programs/cases/alloc.sh).

Large bytes/bytearray objects (Python's own allocator passes requests above
512 bytes to malloc), growth by realloc across the threshold in both
directions, threads churning, a fork child allocating, and a socket (so that
XPRESS_STATS prints the arena counters).  Prints a digest of everything it
built: it must be the same with and without the preload.
"""
import hashlib
import os
import socket
import sys
import threading

digest = hashlib.sha256()
sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)

# Growth by realloc: 1 byte to 6 MiB, then back down.
buf = bytearray()
for i in range(1, 200):
    buf += bytes([i % 251]) * (i * 150)
digest.update(buf)
while len(buf) > 10:
    del buf[len(buf) // 2:]
    digest.update(buf)

# Many sizes around and above the threshold, kept alive together.
blocks = [bytes([n % 256]) * n for n in range(1000, 3_000_000, 37_123)]
for b in blocks:
    digest.update(b[:64] + b[-64:])


def churn(seed, out):
    h = hashlib.sha256()
    live = []
    x = seed
    for _ in range(3000):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        n = 100 + x % 900_000
        if len(live) > 40:
            h.update(live.pop(x % len(live))[-16:])
        live.append(bytes([x % 256]) * n)
    out[seed] = h.hexdigest()


results = {}
threads = [threading.Thread(target=churn, args=(s, results)) for s in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for s in sorted(results):
    digest.update(results[s].encode())

r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    child = hashlib.sha256(b"".join(bytes([i]) * 300_000 for i in range(20))).hexdigest()
    os.write(w, child.encode())
    os._exit(0)
os.close(w)
child = os.read(r, 100)
os.waitpid(pid, 0)
digest.update(child)

print(digest.hexdigest())
sock.close()
sys.exit(0)
