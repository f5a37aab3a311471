# shellcheck shell=bash
# A JVM HTTP server and client (tests/rdma-programs/JavaHttp.java: the
# JDK's HttpServer and HttpClient, dual-stack AF_INET6 sockets, IPv4-mapped
# addresses), 8 responses of 1 MiB on one keep-alive connection: first over
# kernel TCP, then both preloaded.  Every body's sha256 equals the server's,
# the connection is on RDMA at both ends, the rxe counters carry the bytes.

JAVA_REQS=8
JAVA_BYTES=$((1024 * 1024))
# C1 only, no SHA intrinsics: a preloaded client once died of SIGILL inside
# its JIT-compiled SHA-256 code under QEMU TCG (not root-caused yet; the
# case tests the JVM's sockets, not its JIT).
JAVA_OPTS="-XX:TieredStopAtLevel=1 -XX:-UseSHA"

# java_run MODE PORT: server and client in MODE (plain|xp); sets JAVA_MS
java_run() {
  local mode=$1 port=$2 srv ok=1
  start_server "java-server-$mode" 120 "$mode" java $JAVA_OPTS -cp "$JH" JavaHttp server "$port" "$JAVA_BYTES" "$JAVA_REQS"
  srv=$SERVER
  wait_listen "java-server-$mode" "$port" "$srv" || return 1
  run_client "java-client-$mode" 90 "$mode" java $JAVA_OPTS -cp "$JH" JavaHttp client "$A1" "$port" "$JAVA_REQS" || ok=0
  end_server "java-server-$mode" "$srv" $ok
  local s c
  s=$(head -n 1 "$CD/java-server-$mode.out" 2>/dev/null)
  c=$(cat "$CD/java-client-$mode.out" 2>/dev/null)
  JAVA_MS=$(sed -n 's/^ms //p' "$CD/java-client-$mode.err" 2>/dev/null)
  if [ $ok = 1 ] && [ -n "$s" ] && [ "$s" = "$c" ]; then
    pass "java ($mode): $JAVA_REQS x $(hb "$JAVA_BYTES") on one keep-alive connection in ${JAVA_MS:-?} ms, every body's sha256 equal to the server's"
    return 0
  fi
  fail "java ($mode): server '$s', client '$c' $(tail -c 300 "$CD/java-client-$mode.err" | tr '\n' ' ')"
  return 1
}

run_case() {
  # Compiled on the host by make (tests/rdma-programs/rdma-programs.mk).
  JH=$REPO/build/tests/rdma-programs/jh
  [ -f "$JH/JavaHttp.class" ] || {
    fail "java: build/tests/rdma-programs/jh/JavaHttp.class not built (make deps: default-jdk-headless)"
    return 1
  }
  java_run plain 19500 || return 1
  local tcp_ms=$JAVA_MS snap
  snap=$T/snap
  net_snap "$snap"
  if java_run xp 19501; then
    note "java: $JAVA_REQS x 1 MiB, one connection: kernel TCP $tcp_ms ms, xpress $JAVA_MS ms"
    # The JDK's HttpClient may open a second connection it never uses.
    TCP_CONN_MAX_PCT=50 check_stats_rdma java java-server-xp java-client-xp
    check_net java "$snap" $((JAVA_REQS * JAVA_BYTES)) 1 "$(stats_before_switch java-server-xp)"
  else
    step_failed "$snap" java-server-xp java-client-xp
  fi
}
