# shellcheck shell=bash
# xpress-probe (tools/xpress-probe.cc) from 10.77.0.1 against a plain
# server, a preloaded one before and after its first accept, and an address
# nobody has: its verdict and exit status for each.

PROBE_SRV='import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(8)
while True:
    c, _ = s.accept(); c.sendall(c.recv(64)); c.close()'
PROBE_CLI='import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2]))); c.sendall(b"x" * 64)
assert len(c.recv(64)) > 0'

# probe_expect LABEL WANT_RC WANT_TEXT TARGET
probe_expect() {
  local label=$1 want=$2 text=$3 target=$4 rc=0 out
  # Both test addresses are this VM's: from A0, as the test bed's clients.
  if [ "$target" = --devices ]; then
    out=$(timeout -k 3 30 "$REPO/build/xpress-probe" --devices 2>&1) || rc=$?
  else
    out=$(timeout -k 3 30 "$REPO/build/xpress-probe" --timeout 10000 --source "$A0" "$target" 2>&1) || rc=$?
  fi
  echo "$out" >"$CD/probe-$label.out"
  if [ "$rc" = "$want" ] && grep -q -- "$text" <<<"$out"; then
    pass "probe: $label: exit $rc, '$(grep -E '^(route|peer|verdict)' <<<"$out" | tr '\n' ' ' || head -n 1 <<<"$out")'"
  else
    fail "probe: $label: exit $rc (want $want), want '$text' in: $(tr '\n' '|' <<<"$out")"
  fi
}

run_case() {
  local plain=19300 xport=19301 srv xsrv
  [ -x "$REPO/build/xpress-probe" ] || { fail "probe: build/xpress-probe not built"; return 1; }
  probe_expect devices 0 "rxe0 port 1: active" --devices
  start_server probe-plain 60 plain "$PY" -c "$PROBE_SRV" "$A1" "$plain"
  srv=$SERVER
  wait_listen probe-plain "$plain" "$srv" || return 1
  probe_expect plain-server 1 "nobody listens through rdma_cm" "$A1:$plain"
  start_server probe-xp 60 xp "$PY" -c "$PROBE_SRV" "$A1" "$xport"
  xsrv=$SERVER
  wait_listen probe-xp "$xport" "$xsrv" || return 1
  # An xpress server opens its rdma_cm port at its first accept.
  probe_expect xpress-before-accept 1 "has not accepted a connection" "$A1:$xport"
  run_client probe-client 20 plain "$PY" -c "$PROBE_CLI" "$A1" "$xport" || return 1
  probe_expect xpress-server 0 "xpress answers at $A1:$xport" "$A1:$xport"
  probe_expect route 0 "route: $A0:.* -> $A1:$xport via rxe0" "$A1:$xport"
  probe_expect no-host 2 "verdict: no RDMA path" "10.77.0.99:$xport"
  stop_server probe-xp "$xsrv" TERM
  stop_server probe-plain "$srv" TERM
}
