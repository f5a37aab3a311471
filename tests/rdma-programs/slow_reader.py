"""A server program that reads late (tests/rdma-programs/cases/fallback.sh).

usage: slow_reader.py serve HOST PORT DELAY_S
       slow_reader.py warmup HOST PORT
       slow_reader.py client HOST PORT
serve: the first connection (a plain warm-up, which opens the preloaded
server's rdma_cm port at its accept) is closed at once; the second gets 100
bytes at once, then its program reads nothing for DELAY_S seconds, then
echoes the client's 100 bytes and exits.  A client whose upgrade may wait
less than DELAY_S for the server's program (docs/protocol.md §2, "Every
wait is bounded") stays on TCP with handshake_timeout.
client: reads the 100 bytes, sends 100, waits for them back; prints
"echo ok" when they match.
"""
import socket
import sys

mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])


def recv_n(s, n):
    got = b""
    while len(got) < n:
        b = s.recv(n - len(got))
        if not b:
            break
        got += b
    return got


if mode == "serve":
    import time

    delay = float(sys.argv[4])
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port))
    ls.listen(4)
    c, _ = ls.accept()
    c.close()
    c, _ = ls.accept()
    c.sendall(b"s" * 100)
    time.sleep(delay)
    c.sendall(recv_n(c, 100))
    c.close()
    print("served")
elif mode == "warmup":
    socket.create_connection((host, port)).close()
else:
    s = socket.create_connection((host, port))
    head = recv_n(s, 100)
    msg = bytes(range(100))
    s.sendall(msg)
    back = recv_n(s, 100)
    print("echo ok" if head == b"s" * 100 and back == msg else "echo bad %d %d" % (len(head), len(back)))
