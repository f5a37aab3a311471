#!/bin/bash
# Runs inside the Soft-RoCE VM, chrooted into the host's root over 9p, as the
# VM's only job: load the RDMA modules, build the two-address veth + rxe test
# bed, run the command the host asked for, hand its exit status back through
# the share ($XP_RUN/rc), and return (the initramfs then powers off).
#
# Started by the initramfs as `/bin/sh $XP_RUN/boot`, which execs us with the
# run directory as $1.  Its output goes to the serial console, which the host
# keeps in $XP_RUN/console.log; the command's own stdout/stderr go to the two
# virtio serial ports the host tails.  See README.md.
set -uo pipefail  # no -e: every failure must still end in an rc file.
XP_RUN=$1
# shellcheck source=/dev/null
source "$XP_RUN/env"  # XP_REPO XP_SOFTROCE XP_KROOT XP_KVER XP_MODE XP_RXE XP_CMD_TIMEOUT XP_CWD XP_CMD XP_ENV
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8 TERM=dumb
export TMPDIR=$XP_RUN/tmp
cd /

finish() {  # $1 = exit status to hand to the host
  up > "$XP_RUN/end"  # the host derives the time to ready from ready/end
  echo "$1" > "$XP_RUN/rc.tmp" && mv -f "$XP_RUN/rc.tmp" "$XP_RUN/rc"
  dmesg > "$XP_RUN/dmesg" 2>/dev/null
  sync
  exit 0
}
setup_fail() {
  echo "xpress-vm: SETUP FAILED: $*"
  echo "setup: $*" > "$XP_RUN/setup-error"
  finish 125
}
up() { local u _; read -r u _ < /proc/uptime; echo "$u"; }
echo "xpress-vm: chroot reached at $(up) s"

# ---- modules -----------------------------------------------------------------
# The host kernel has none of these; modprobe -d resolves them and their
# dependencies in the unpacked Debian kernel package on the share.
mp() { modprobe -d "$XP_KROOT" "$@"; }
# crc32_generic first: without it rdma_rxe fails "failed to init crc32
# algorithm err:-2" and `rdma link add` returns ENOENT.
# One modprobe for all: each kmod start-up reads the module indexes over 9p.
# -a loads in the order given.
mp -a crc32_generic veth rdma_rxe rdma_ucm ib_uverbs sch_netem || setup_fail "modprobe"
export XP_KROOT

# ---- network: veth pair whose traffic really crosses the wire ----------------
# Both ends stay in the initial namespace: rxe is not namespace-aware in 6.1
# (rdma_cm reports UNREACHABLE across namespaces).  In one namespace, traffic
# between two local addresses would take lo; policy routing sends locally
# generated packets for one address out of the *other* end's veth instead.
A0=10.77.0.1 A1=10.77.0.2
B0=fd77::1 B1=fd77::2
(
  set -e
  # Packets from 10.77.0.1 arrive at veth1 with a local source address:
  # accept them, and do not let reverse-path filtering drop them.  "default"
  # is copied into interfaces created afterwards (veth0/1); "all" is OR-ed
  # (accept_local) and max-ed (rp_filter) with each device's own value.
  args=()
  for k in all default lo; do args+=(net.ipv4.conf.$k.accept_local=1 net.ipv4.conf.$k.rp_filter=0); done
  sysctl -qw "${args[@]}"
  # One `ip -batch`: every exec costs ~0.1 s under TCG.
  # "iif lo" = locally generated.  The pref 10 rules come before the local
  # table, which would otherwise deliver the packet without it leaving the
  # host; packets received on veth* still reach the local table at pref 100.
  ip -batch - <<EOF
link set lo up
link add veth0 type veth peer name veth1
addr add $A0/24 dev veth0
addr add $A1/24 dev veth1
link set veth0 up
link set veth1 up
route add table 100 $A1 dev veth0 src $A0
route add table 100 $A0 dev veth1 src $A1
rule add pref 10 iif lo to $A0 lookup 100
rule add pref 10 iif lo to $A1 lookup 100
rule add pref 100 lookup local
rule del pref 0 lookup local
neigh flush all
EOF
  sysctl -qw net.ipv4.conf.veth0.accept_local=1 net.ipv4.conf.veth1.accept_local=1 \
    net.ipv4.conf.veth0.rp_filter=0 net.ipv4.conf.veth1.rp_filter=0
  # The same for an IPv6 pair (rxe gives each address its own GID): no
  # duplicate address detection (the addresses are usable at once); IPv6
  # has no accept_local or rp_filter to relax.  rdma_cm checks a request
  # with a route lookup toward the requester through the device it came in
  # on (no input interface): the pref 5 rules answer it with that device,
  # as two hosts would, where the local table would name the other end's.
  ip -6 -batch - <<EOF
addr add $B0/64 dev veth0 nodad
addr add $B1/64 dev veth1 nodad
rule add pref 5 to $B0 oif veth1 lookup 100
rule add pref 5 to $B1 oif veth0 lookup 100
route add table 100 $B1 dev veth0 src $B0
route add table 100 $B0 dev veth1 src $B1
rule add pref 10 iif lo to $B0 lookup 100
rule add pref 10 iif lo to $B1 lookup 100
rule add pref 100 lookup local
rule del pref 0 lookup local
neigh flush all
EOF
)
[ $? = 0 ] || setup_fail "veth / policy routing setup"

if [ "$XP_RXE" = 1 ]; then
  printf 'link add rxe0 type rxe netdev veth0\nlink add rxe1 type rxe netdev veth1\n' |
    rdma -b - || setup_fail "rdma link add rxe0/rxe1"
  # The port turns ACTIVE once the netdev carrier is up; wait (bounded, and
  # with builtins: every fork+exec costs ~0.1 s under TCG).
  s0="" s1=""
  for _ in {1..100}; do
    read -r s0 < /sys/class/infiniband/rxe0/ports/1/state
    read -r s1 < /sys/class/infiniband/rxe1/ports/1/state
    [[ $s0 == *ACTIVE* && $s1 == *ACTIVE* ]] && break
    sleep 0.1
  done
  [[ $s0 == *ACTIVE* && $s1 == *ACTIVE* ]] || setup_fail "rxe ports not ACTIVE ($s0 / $s1)"
fi

# ---- environment for the command --------------------------------------------
export XP_REPO XP_SOFTROCE XP_RUN
export XP_ADDR0=$A0 XP_ADDR1=$A1 XP_ADDR6_0=$B0 XP_ADDR6_1=$B1 XP_NETDEV0=veth0 XP_NETDEV1=veth1 XP_RXE0=rxe0 XP_RXE1=rxe1
# RoCE v2 GID index of the IPv4 address on each rxe port (0 is the IPv6 link-local).
export XP_GID_INDEX=1
export XPRESS_SOFTROCE_VM=1
export PATH=$XP_SOFTROCE/bin:$PATH
for kv in "${XP_ENV[@]}"; do export "${kv?}"; done
up > "$XP_RUN/ready"
echo "xpress-vm: ready at $(up) s"

if [ "$XP_MODE" = shell ]; then
  echo "xpress-vm: interactive shell; exit (or Ctrl-D) powers the VM off"
  cd "$XP_CWD" 2>/dev/null || cd /
  # setsid -c: make the console our controlling tty so job control and ^C work.
  setsid -w -c bash -i </dev/ttyS0 >/dev/ttyS0 2>&1
  finish $?
fi

port() {  # virtio serial port device by name (the host names them xp.out/xp.err)
  local d n
  for d in /sys/class/virtio-ports/*; do
    read -r n < "$d/name" 2>/dev/null || continue
    [ "$n" = "$1" ] && { echo "/dev/${d##*/}"; return 0; }
  done
  return 1
}
out=$(port xp.out) || setup_fail "virtio port xp.out missing"
err=$(port xp.err) || setup_fail "virtio port xp.err missing"

cd "$XP_CWD" 2>/dev/null || { echo "xpress-vm: cannot cd to $XP_CWD, using /" >"$err"; cd /; }
# The guest-side timeout leaves the VM time to report; the host kills qemu
# a little later as the last resort.  -k: escalate to SIGKILL after 5 s.
timeout -k 5 "$XP_CMD_TIMEOUT" "${XP_CMD[@]}" </dev/null >"$out" 2>"$err"
rc=$?
echo "xpress-vm: command exited $rc at $(up) s"
[ $rc = 124 ] && echo "xpress-vm: command timed out after ${XP_CMD_TIMEOUT}s (inside the VM)" >"$err"
finish $rc
