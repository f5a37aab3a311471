#!/usr/bin/env bash
# Soft-RoCE test bed sanity suite.  Runs INSIDE the VM (tests/rdma/run.sh boots
# it): proves the two rxe devices work, that RDMA traffic between 10.77.0.1 and
# 10.77.0.2 really crosses the veth pair, and that the fault and counter
# helpers later tests rely on do what they say.  Ends with "N passed, M failed".
set -uo pipefail  # no -e: a failing check is counted, not fatal

: "${XP_SOFTROCE:?run me inside the VM: tools/softroce/vm run -- bash $0}"
# shellcheck source=../../tools/softroce/faults.sh
source "$XP_SOFTROCE/faults.sh"
A0=$XP_ADDR0 A1=$XP_ADDR1
self=$(readlink -f "${BASH_SOURCE[0]}")
W=${W:-$(mktemp -d)}
export W
pass=0 fail=0
ok()  { pass=$((pass + 1)); echo "ok   - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1${2:+: $2}"; }
# check NAME FN [ARGS]: a test passes when FN exits 0; its output is shown on
# failure.  Each runs in its own bash under a deadline (CHECK_TIMEOUT, 90 s):
# timeout signals the whole process group, so a hung check cannot eat the run.
CHECK_TIMEOUT=${CHECK_TIMEOUT:-90}
check() {
  local name=$1 rc=0; shift
  timeout -k 5 "$CHECK_TIMEOUT" bash "$self" __one "$@" > "$W/out" 2>&1 || rc=$?
  if [ $rc = 0 ]; then
    ok "$name"
    [ -z "${VERBOSE:-}" ] || sed 's/^/       | /' "$W/out"
  else
    [ $rc != 124 ] || echo "(timed out after ${CHECK_TIMEOUT}s)" >> "$W/out"
    bad "$name" "exit $rc"
    sed 's/^/       | /' "$W/out" | tail -n 25
  fi
}
# Background servers: started with a deadline, reaped (or killed) by stop_bg.
bg_pids=()
# (timeout itself, not a function wrapping it, so that $! is the process to kill)
start_bg() { local log=$1; shift; timeout -k 5 60 "$@" > "$log" 2>&1 & bg_pids+=($!); }
stop_bg() {
  local p rc=0
  for p in "${bg_pids[@]}"; do
    # The servers end by themselves once their client is done (-1, -C, -n);
    # give them 20 s (a loaded TCG host is slow), then kill: that counts as
    # a failure of the check.
    for _ in {1..200}; do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    if kill "$p" 2>/dev/null; then echo "background server (pid $p) still running after 20 s: killed"; fi
    wait "$p" || rc=$?
  done
  bg_pids=()
  return $rc
}
# gt0 SNAPSHOT NAME...: every named counter moved since SNAPSHOT
gt0() {
  local snap=$1 n; shift
  xp_deltas "$snap" || return
  for n in "$@"; do
    echo "$n +${XP_DELTA[$n]:-0}"
    [ "${XP_DELTA[$n]:-0}" -gt 0 ] || { echo "counter $n did not move"; return 1; }
  done
}
trap 'stop_bg 2>/dev/null' EXIT


# --- devices ------------------------------------------------------------------
t_devices() {
  ibv_devices | tee /dev/stderr | grep -qw rxe0 && ibv_devices | grep -qw rxe1
}

t_ports() {
  local d st gid ip
  for d in rxe0:$A0 rxe1:$A1; do
    ip=${d#*:} d=${d%%:*}
    st=$(cat /sys/class/infiniband/$d/ports/1/state); echo "$d: $st"
    [[ $st == *ACTIVE* ]] || return 1
    # GID index 1 is the RoCE v2 GID of the IPv4 address (XP_GID_INDEX).
    gid=$(cat /sys/class/infiniband/$d/ports/1/gids/$XP_GID_INDEX)
    echo "$d gid[$XP_GID_INDEX] = $gid"
    [ "$gid" = "$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' ${ip//./ })" ] || return 1
  done
}

# --- routing: traffic between the two local addresses must use the veth -------
t_route() {
  ip route get "$A1" from "$A0" | tee /dev/stderr | grep -q "dev veth0" &&
    ip route get "$A0" from "$A1" | tee /dev/stderr | grep -q "dev veth1"
}

# A 2 MiB transfer that the receiver reads to the end: iperf3 -n counts what
# the sender wrote, and its one-shot server may close (and reset) before the
# last bytes left the sender, so its veth bytes could fall short of 2 MB.
TCP_SINK='import socket,sys
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)
s.bind((sys.argv[1],int(sys.argv[2]))); s.listen(1); c,_=s.accept(); n=0
while True:
  b=c.recv(65536)
  if not b: break
  n+=len(b)
print("received",n); c.close()'
TCP_SEND='import socket,sys
c=socket.create_connection((sys.argv[1],int(sys.argv[2])),source_address=(sys.argv[3],0))
c.sendall(b"x"*(2<<20)); c.shutdown(socket.SHUT_WR); c.recv(1); print("sent",2<<20)'
t_tcp_crosses() {
  rxe-counters snapshot "$W/c.tcp"
  start_bg "$W/sink.log" python3 -c "$TCP_SINK" "$A1" 5301
  xp_wait_port 5301 10 || return 1
  xp_timeout 60 python3 -c "$TCP_SEND" "$A1" 5301 "$A0" || return 1
  stop_bg || return 1
  cat "$W/sink.log"
  grep -qx "received $((2 << 20))" "$W/sink.log" || return 1
  rxe-counters diff "$W/c.tcp" --nonzero
  gt0 "$W/c.tcp" veth0.tx_packets veth1.rx_packets veth1.tx_packets veth0.rx_packets || return 1
  # The 2 MiB went out of veth0: it did not take lo.
  [ "${XP_DELTA[veth0.tx_bytes]}" -gt $((2 << 20)) ]
}

# --- RDMA ---------------------------------------------------------------------
# rping SERVER_ADDR CLIENT_ADDR PORT: rdma_cm connection + RDMA READ/WRITE/SEND
rping_pair() {
  start_bg "$W/rping-s.log" rping -s -a "$1" -p "$3" -C 5 -v
  xp_wait_cm_listen "$3" 10 || return 1
  xp_timeout 60 rping -c -a "$1" -I "$2" -p "$3" -C 5 -v || return 1
  stop_bg || { cat "$W/rping-s.log"; return 1; }
  grep -c "server ping data" "$W/rping-s.log" | grep -qx 5
}
t_rping() {
  rxe-counters snapshot "$W/c.rping"
  rping_pair "$A1" "$A0" 7471 || return 1
  rxe-counters diff "$W/c.rping" --nonzero
  # Packets went out of rxe0, through veth0 -> veth1, into rxe1 (and back).
  gt0 "$W/c.rping" rxe0.sent_pkts rxe1.rcvd_pkts rxe1.sent_pkts rxe0.rcvd_pkts \
    veth0.tx_packets veth1.rx_packets || return 1
  # Every rxe0 packet is a veth0 packet.
  [ "${XP_DELTA[veth0.tx_packets]}" -ge "${XP_DELTA[rxe0.sent_pkts]}" ]
}

# ibv_rc_pingpong SERVER_DEV CLIENT_DEV SERVER_ADDR PORT
pingpong() {
  start_bg "$W/pp-s.log" ibv_rc_pingpong -d "$1" -g "$XP_GID_INDEX" -p "$4" -n 200
  xp_wait_port "$4" 10 || return 1
  xp_timeout 60 ibv_rc_pingpong -d "$2" -g "$XP_GID_INDEX" -p "$4" -n 200 "$3" || return 1
  stop_bg || { cat "$W/pp-s.log"; return 1; }
}
t_pingpong() {
  rxe-counters snapshot "$W/c.pp"
  pingpong rxe1 rxe0 "$A1" 18515 || return 1
  rxe-counters diff "$W/c.pp" --nonzero
  gt0 "$W/c.pp" rxe0.sent_pkts rxe1.rcvd_pkts rxe1.sent_pkts rxe0.rcvd_pkts || return 1
  # 200 round trips: at least 200 data packets each way.
  [ "${XP_DELTA[rxe0.sent_pkts]}" -ge 200 ] && [ "${XP_DELTA[rxe1.sent_pkts]}" -ge 200 ]
}

t_json() {
  rxe-counters snapshot "$W/c.json"
  rxe-counters diff "$W/c.json" --json | tee /dev/stderr |
    python3 -c 'import json,sys; d=json.load(sys.stdin); assert "rxe0.sent_pkts" in d and "veth1.rx_packets" in d'
}

# --- fault helpers --------------------------------------------------------------
t_netem() {
  xp_netem veth0 delay 20ms || return 1
  tc qdisc show dev veth0 | tee /dev/stderr | grep -q "netem.*delay 20ms" || return 1
  # A TCP connect + a short transfer still works through the delay.
  start_bg "$W/iperf3-n.log" iperf3 -s -B "$A1" -p 5302 -1
  xp_wait_port 5302 10 || return 1
  xp_timeout 60 iperf3 -c "$A1" -B "$A0" -p 5302 -n 256K || return 1
  stop_bg || return 1
  xp_netem_clear veth0
  ! tc qdisc show dev veth0 | grep -q netem
}

t_link() {
  xp_link_down veth0 || return 1
  st=$(cat /sys/class/infiniband/rxe0/ports/1/state); echo "rxe0 after link down: $st"
  [[ $st != *ACTIVE* ]] || return 1
  xp_link_up veth0 || return 1
  # The path is the veth's again, not lo (the down deleted the routes).
  t_route || return 1
  rping_pair "$A1" "$A0" 7473
}

t_rxe_readd() {
  xp_rxe_remove rxe0 || return 1
  ibv_devices | grep -qw rxe0 && { echo "rxe0 still listed"; return 1; }
  xp_rxe_add rxe0 || return 1
  ibv_devices | grep -qw rxe0 || return 1
  pingpong rxe1 rxe0 "$A1" 18516
}

t_kill() {
  sleep 25 & local p=$!
  sleep 0.2
  xp_kill -KILL "$p" || return 1
  wait "$p"; local rc=$?
  echo "status after SIGKILL: $rc"
  [ $rc = 137 ]
}

t_timeout() {
  xp_timeout 1 sleep 10; [ $? = 124 ]
}

t_tmpdir() { echo x > "$TMPDIR/probe" && [ "$(cat "$TMPDIR/probe")" = x ]; }

# ---------------------------------------------------------------------------------
if [ "${1:-}" = __one ]; then  # one check, in its own process (see check())
  shift; [ -z "${XTRACE:-}" ] || set -x; "$@"; exit
fi
echo "# Soft-RoCE sanity: kernel $(uname -r), $A0 (veth0/rxe0) <-> $A1 (veth1/rxe1)"
check "ibv_devices lists rxe0 and rxe1" t_devices
check "rxe ports ACTIVE, GID index $XP_GID_INDEX = IPv4 address" t_ports
check "policy routing sends $A0->$A1 via veth0 and back via veth1" t_route
check "kernel TCP $A0->$A1 crosses the veth (2 MiB read to the end)" t_tcp_crosses
check "rping client $A0 -> server $A1 (rdma_cm), counters on rxe0, rxe1, veth" t_rping
check "rping client $A1 -> server $A0 (reverse)" rping_pair "$A0" "$A1" 7472
check "ibv_rc_pingpong rxe0 -> rxe1 (-g $XP_GID_INDEX, 200 iters), counters" t_pingpong
check "rxe-counters diff --json is valid JSON" t_json
check "netem delay on veth0 applied and cleared" t_netem
check "link down/up on veth0: rxe0 goes down, comes back, routed via the veth again, rping works" t_link
check "rxe0 removed and re-added: ibv_rc_pingpong works again" t_rxe_readd
check "xp_kill signals a process" t_kill
check "xp_timeout returns 124 on expiry" t_timeout
check "TMPDIR ($TMPDIR) writable" t_tmpdir
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
