#!/usr/bin/env python3
"""Print a TCP port on 127.0.0.1 that is free now, below the ephemeral range
(so client connections cannot grab it before a test's server binds it)."""
import random
import socket

for _ in range(500):
    port = random.randint(20000, 32000)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    break
else:
    raise SystemExit("no free port")
