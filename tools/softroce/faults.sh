#!/usr/bin/env bash
# Fault injection and small helpers for scripts running inside the Soft-RoCE VM.
#
# Source it (functions, no side effects):
#     source "$XP_SOFTROCE/faults.sh"
#     xp_link_down veth0; sleep 1; xp_link_up veth0
# or run the same actions as a command (it is on PATH inside the VM):
#     xp-fault link-down veth0
#
# Functions (command form: drop "xp_", "_" -> "-"):
#   xp_link_down DEV              ip link set DEV down (veth0|veth1; downing one
#                                 end also drops the peer's carrier)
#   xp_link_up DEV                bring it back, with the test bed's policy
#                                 routes; waits until the rxe port on it is
#                                 ACTIVE again (bounded)
#   xp_link_flap DEV SECS         down, sleep SECS, up
#   xp_rxe_remove RXE             rdma link delete RXE (rxe0|rxe1): the RDMA
#                                 device disappears under running programs
#   xp_rxe_add RXE [NETDEV]       re-add it (default rxe0->veth0, rxe1->veth1)
#                                 and wait for ACTIVE
#   xp_rxe_wait_active RXE [SECS] wait until the port is ACTIVE (default 10 s)
#   xp_netem DEV ARGS...          tc netem on DEV's egress, e.g.
#                                 xp_netem veth0 loss 5%   /  delay 2ms 1ms
#                                 (replaces any previous netem on DEV)
#   xp_netem_clear DEV            remove it (no error when none)
#   xp_kill [-SIG] PID|NAME...    signal pids, or processes named exactly NAME
#   xp_timeout SECS CMD...        run CMD, TERM after SECS, KILL 5 s later;
#                                 status 124 on timeout (coreutils timeout)
#   xp_wait_port PORT [SECS]      wait for a TCP listener on PORT (default 10 s)
#   xp_wait_cm_listen PORT [SECS] wait for an rdma_cm listener on PORT (rping,
#                                 perftest -R, rsocket servers)
#   xp_sleep_ms MS                sleep milliseconds
#   xp_deltas SNAPSHOT            fill the associative array XP_DELTA with
#                                 `rxe-counters diff SNAPSHOT` (one call), e.g.
#                                 rxe-counters snapshot $TMPDIR/c; ...; xp_deltas $TMPDIR/c
#                                 [ "${XP_DELTA[rxe0.sent_pkts]}" -gt 0 ]
# All waits are bounded and return non-zero on expiry.  Every change is
# logged to stderr as "[fault] ...", so a test log shows what was injected.

_xp_log() { echo "[fault] $*" >&2; }

_xp_rxe_netdev() {  # default netdev of an rxe device
  case $1 in
    rxe0) echo "${XP_NETDEV0:-veth0}" ;;
    rxe1) echo "${XP_NETDEV1:-veth1}" ;;
    *) return 1 ;;
  esac
}

declare -gA XP_DELTA=()
xp_deltas() {
  local snap=${1:?usage: xp_deltas SNAPSHOT} k v out
  out=$(rxe-counters diff "$snap") || return
  XP_DELTA=()
  while read -r k v; do XP_DELTA[$k]=$v; done <<<"$out"
}

xp_sleep_ms() { sleep "$(awk -v m="$1" 'BEGIN{printf "%.3f", m/1000}')"; }

xp_rxe_wait_active() {
  local dev=$1 secs=${2:-10} st="" i
  for ((i = 0; i < secs * 10; i++)); do
    st=$(cat "/sys/class/infiniband/$dev/ports/1/state" 2>/dev/null || true)
    [[ $st == *ACTIVE* ]] && return 0
    sleep 0.1
  done
  _xp_log "$dev not ACTIVE after ${secs}s (state: ${st:-absent})"
  return 1
}

xp_link_down() {
  local dev=${1:?usage: xp_link_down DEV}
  _xp_log "link down $dev"
  ip link set "$dev" down
}

xp_link_up() {
  local dev=${1:?usage: xp_link_up DEV} r
  _xp_log "link up $dev"
  ip link set "$dev" up || return
  # Taking a device down deletes the routes through it, and the test bed's
  # policy routes (table 100, guest-boot.sh) are not connected routes that
  # come back with the link: without them the two addresses would talk over
  # lo from now on, where two real hosts get their path back.  Put them
  # back (idempotent).
  ip -batch - <<EOF2 2>/dev/null
route replace table 100 ${XP_ADDR1:-10.77.0.2} dev veth0 src ${XP_ADDR0:-10.77.0.1}
route replace table 100 ${XP_ADDR0:-10.77.0.1} dev veth1 src ${XP_ADDR1:-10.77.0.2}
EOF2
  # The IPv6 pair's too (and its addresses, which a link going down may take).
  ip -6 -batch - <<EOF2 2>/dev/null
addr replace ${XP_ADDR6_0:-fd77::1}/64 dev veth0 nodad
addr replace ${XP_ADDR6_1:-fd77::2}/64 dev veth1 nodad
route replace table 100 ${XP_ADDR6_1:-fd77::2} dev veth0 src ${XP_ADDR6_0:-fd77::1}
route replace table 100 ${XP_ADDR6_0:-fd77::1} dev veth1 src ${XP_ADDR6_1:-fd77::2}
EOF2
  # Both ends' carriers come back together; wait for the rxe ports on them.
  for r in /sys/class/infiniband/*; do
    [ -e "$r" ] || continue
    xp_rxe_wait_active "$(basename "$r")" 10 || return
  done
}

xp_link_flap() {
  local dev=${1:?usage: xp_link_flap DEV SECS} secs=${2:?usage: xp_link_flap DEV SECS}
  xp_link_down "$dev" && sleep "$secs" && xp_link_up "$dev"
}

xp_rxe_remove() {
  local dev=${1:?usage: xp_rxe_remove RXE}
  _xp_log "rxe remove $dev"
  rdma link delete "$dev"
}

xp_rxe_add() {
  local dev=${1:?usage: xp_rxe_add RXE [NETDEV]} nd=${2:-}
  [ -n "$nd" ] || nd=$(_xp_rxe_netdev "$dev") || { _xp_log "no default netdev for $dev"; return 2; }
  _xp_log "rxe add $dev on $nd"
  rdma link add "$dev" type rxe netdev "$nd" && xp_rxe_wait_active "$dev" 10
}

xp_netem() {
  local dev=${1:?usage: xp_netem DEV ARGS...}; shift
  [ $# -gt 0 ] || { _xp_log "xp_netem: no netem arguments (e.g. loss 5%)"; return 2; }
  # sch_netem is loaded at boot; load again in case a script unloaded it.
  if [ ! -d /sys/module/sch_netem ] && [ -n "${XP_KROOT:-}" ]; then
    modprobe -d "$XP_KROOT" sch_netem || return
  fi
  _xp_log "netem $dev: $*"
  tc qdisc replace dev "$dev" root netem "$@"
}

xp_netem_clear() {
  local dev=${1:?usage: xp_netem_clear DEV}
  _xp_log "netem $dev: cleared"
  tc qdisc del dev "$dev" root 2>/dev/null || true
}

xp_kill() {
  local sig=TERM rc=0 t
  case ${1:-} in -*) sig=${1#-}; shift ;; esac
  [ $# -gt 0 ] || { _xp_log "usage: xp_kill [-SIG] PID|NAME..."; return 2; }
  for t in "$@"; do
    _xp_log "kill -$sig $t"
    if [[ $t =~ ^[0-9]+$ ]]; then kill -s "$sig" "$t" || rc=1
    else pkill "-$sig" -x "$t" || rc=1
    fi
  done
  return $rc
}

xp_timeout() {
  local secs=${1:?usage: xp_timeout SECS CMD...}; shift
  timeout -k 5 "$secs" "$@"
}

xp_wait_port() {
  local port=${1:?usage: xp_wait_port PORT [SECS]} secs=${2:-10} i
  for ((i = 0; i < secs * 10; i++)); do
    [ -n "$(ss -Hltn "sport = :$port" 2>/dev/null)" ] && return 0
    sleep 0.1
  done
  _xp_log "no TCP listener on port $port after ${secs}s"
  return 1
}

xp_wait_cm_listen() {
  local port=${1:?usage: xp_wait_cm_listen PORT [SECS]} secs=${2:-10} i
  for ((i = 0; i < secs * 10; i++)); do
    rdma resource show cm_id 2>/dev/null | grep -q "state LISTEN.*src-addr [^ ]*:$port\b" && return 0
    sleep 0.1
  done
  _xp_log "no rdma_cm listener on port $port after ${secs}s"
  return 1
}

# Command form: xp-fault link-down veth0  ==  xp_link_down veth0
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -uo pipefail
  if [ $# = 0 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
    sed -n '2,/^# logged/p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
  fi
  fn=xp_${1//-/_}; shift
  declare -F "$fn" >/dev/null || { echo "xp-fault: unknown action (see --help)" >&2; exit 2; }
  "$fn" "$@"
fi
