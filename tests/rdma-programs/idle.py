"""Idle connection: the server upgrades one connection and then blocks in
recv (blocking socket) while the client stays quiet; prints the server's CPU
seconds (user + system, all threads) over the quiet window."""
import os, socket, sys, time

mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])


def recv_exactly(sock, n):
    b = b""
    while len(b) < n:
        got = sock.recv(n - len(b))
        if not got:
            break
        b += got
    return b


if mode == "server":
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((host, port))
    l.listen(1)
    c, _ = l.accept()
    # 64 bytes both ways (what the binding proofs cover): both directions switch
    assert recv_exactly(c, 64) == b"hello" * 12 + b"helo"
    c.sendall(b"world" * 12 + b"wrld")
    while True:
        b = c.recv(100)  # blocks through the client's quiet window
        if not b:
            break
else:
    s = socket.socket()
    s.connect((host, port))
    s.sendall(b"hello" * 12 + b"helo")
    assert recv_exactly(s, 64) == b"world" * 12 + b"wrld"
    time.sleep(1.5)  # the upgrade finishes
    pid = int(sys.argv[4])

    def cpu():
        f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

    c0, t0 = cpu(), time.time()
    time.sleep(3)
    c1, t1 = cpu(), time.time()
    print("server cpu %.3f s over %.2f s quiet" % (c1 - c0, t1 - t0))
    s.close()
