#!/usr/bin/env python3
"""A gRPC server and client (tests/rdma-programs/cases/grpc.sh), Python
grpcio (gRPC's C core: its own epoll poller, dual-stack sockets), no
generated code: raw-bytes methods.

  grpc_pair.py server PORT          serves on [::]:PORT until killed
      /t.T/Echo   unary: returns the request's sha256 (hex) and its bytes
      /t.T/Chunks stream->stream: for each message, its sha256 (hex)
  grpc_pair.py client HOST PORT N SIZE
      N unary calls of SIZE bytes, then one stream of N messages of SIZE
      bytes, each answer checked; prints "ok unary N stream N", "ms M" on
      stderr (unary round trips only), exits 1 on any mismatch
"""
import hashlib
import os
import sys
import time
from concurrent import futures

import grpc


def echo(req, ctx):
    return hashlib.sha256(req).hexdigest().encode() + req


def chunks(it, ctx):
    for m in it:
        yield hashlib.sha256(m).hexdigest().encode()


def server(port):
    h = grpc.method_handlers_generic_handler("t.T", {
        "Echo": grpc.unary_unary_rpc_method_handler(echo),
        "Chunks": grpc.stream_stream_rpc_method_handler(chunks),
    })
    s = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                    options=[("grpc.max_receive_message_length", 64 << 20),
                             ("grpc.max_send_message_length", 64 << 20)])
    s.add_generic_rpc_handlers((h,))
    s.add_insecure_port("[::]:%d" % port)
    s.start()
    print("serving", flush=True)
    s.wait_for_termination()


def client(host, port, n, size):
    ch = grpc.insecure_channel("%s:%d" % (host, port),
                               options=[("grpc.max_receive_message_length", 64 << 20),
                                        ("grpc.max_send_message_length", 64 << 20)])
    grpc.channel_ready_future(ch).result(timeout=30)
    unary = ch.unary_unary("/t.T/Echo")
    stream = ch.stream_stream("/t.T/Chunks")
    msgs = [os.urandom(size) for _ in range(n)]
    t0 = time.monotonic()
    for m in msgs:
        r = unary(m, timeout=30)
        if r[:64] != hashlib.sha256(m).hexdigest().encode() or r[64:] != m:
            sys.exit("unary answer differs")
    ms = (time.monotonic() - t0) * 1000
    got = list(stream(iter(msgs), timeout=60))
    want = [hashlib.sha256(m).hexdigest().encode() for m in msgs]
    if got != want:
        sys.exit("stream answers differ: %d of %d" % (sum(a == b for a, b in zip(got, want)), n))
    print("ok unary %d stream %d" % (n, n), flush=True)
    print("ms %.0f" % ms, file=sys.stderr)
    ch.close()


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server(int(sys.argv[2]))
    else:
        client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
