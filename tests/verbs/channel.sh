#!/usr/bin/env bash
# Runs INSIDE the Soft-RoCE VM (`make test-verbs` boots it): the record
# channel over a real RC QP between the two addresses, for several record
# sizes; every byte verified, RNR counters must stay at zero (credits), and
# the rxe counters must show the traffic.  Then multiplexed streams, and the
# upgrade of a real TCP connection (tests/verbs/xp-upgrade-test.cc).  Ends with "N passed, M failed".
set -uo pipefail
: "${XP_SOFTROCE:?run me inside the VM}"
source "$XP_SOFTROCE/faults.sh"
bin=${XP_CHANNEL_TEST:?}
W=$(mktemp -d)
pass=0 fail=0
port=7471
for case in "65536 64" "4194304 1000" "8388608 16384" "8388608 200000"; do
  set -- $case
  bytes=$1 msg=$2
  port=$((port + 1))
  rxe-counters snapshot "$W/before"
  timeout -k 2 120 "$bin" server "$XP_ADDR0" $port "$bytes" > "$W/server" 2>&1 &
  spid=$!
  timeout -k 2 120 "$bin" client "$XP_ADDR1" "$XP_ADDR0" $port "$bytes" "$msg" > "$W/client" 2>&1
  crc=$?
  wait $spid; src=$?
  rnr=0
  for n in rxe0.rcvd_rnr_err rxe1.rcvd_rnr_err rxe0.send_rnr_err rxe1.send_rnr_err \
           rxe0.retry_rnr_exceeded_err rxe1.retry_rnr_exceeded_err; do
    d=$(rxe-counters delta "$W/before" $n 2>/dev/null || echo 0)
    rnr=$((rnr + d))
  done
  pk=$(rxe-counters delta "$W/before" rxe1.sent_pkts 2>/dev/null || echo 0)
  veth=$(rxe-counters delta "$W/before" veth1.tx_packets 2>/dev/null || echo 0)
  cat "$W/server" "$W/client" | sed 's/^/    /'
  echo "    rxe1.sent_pkts +$pk, veth1.tx_packets +$veth, rnr events $rnr"
  if [ $crc = 0 ] && [ $src = 0 ] && [ "$rnr" = 0 ] && [ "$pk" -gt 0 ] && [ "$veth" -gt 0 ]; then
    echo "ok   - channel $bytes bytes in $msg-byte records"; pass=$((pass + 1))
  else
    echo "FAIL - channel $bytes bytes in $msg-byte records (client $crc, server $src)"; fail=$((fail + 1))
  fi
done
# Streams: 6 streams multiplexed on one QP, both directions at once.
port=$((port + 1))
rxe-counters snapshot "$W/before"
timeout -k 2 120 "$bin" streams-server "$XP_ADDR0" $port 6 1048576 > "$W/server" 2>&1 &
spid=$!
timeout -k 2 120 "$bin" streams-client "$XP_ADDR1" "$XP_ADDR0" $port 6 1048576 > "$W/client" 2>&1
crc=$?
wait $spid; src=$?
rnr=0
for n in rxe0.rcvd_rnr_err rxe1.rcvd_rnr_err rxe0.send_rnr_err rxe1.send_rnr_err; do
  rnr=$((rnr + $(rxe-counters delta "$W/before" $n 2>/dev/null || echo 0)))
done
cat "$W/server" "$W/client" | sed 's/^/    /'
echo "    rnr events $rnr"
if [ $crc = 0 ] && [ $src = 0 ] && [ "$rnr" = 0 ]; then
  echo "ok   - 6 multiplexed streams, 1 MiB each way each"; pass=$((pass + 1))
else
  echo "FAIL - multiplexed streams (client $crc, server $src)"; fail=$((fail + 1))
fi

# The upgrade end to end: first bytes on TCP, ATTACH and proofs on the
# channel, each direction switching at its own offset, every byte checked.
if [ -n "${XP_UPGRADE_TEST:-}" ]; then
  port=$((port + 1))
  rxe-counters snapshot "$W/before"
  timeout -k 2 120 "$XP_UPGRADE_TEST" server "$XP_ADDR0" $port > "$W/server" 2>&1 &
  spid=$!
  timeout -k 2 120 "$XP_UPGRADE_TEST" client "$XP_ADDR1" "$XP_ADDR0" $port > "$W/client" 2>&1
  crc=$?
  wait $spid; src=$?
  pk=$(rxe-counters delta "$W/before" rxe1.sent_pkts 2>/dev/null || echo 0)
  cat "$W/server" "$W/client" | sed 's/^/    /'
  echo "    rxe1.sent_pkts +$pk"
  if [ $crc = 0 ] && [ $src = 0 ] && [ "$pk" -gt 1000 ]; then
    echo "ok   - upgrade: TCP then RDMA in both directions, no byte lost or duplicated"; pass=$((pass + 1))
  else
    echo "FAIL - upgrade (client $crc, server $src)"; fail=$((fail + 1))
  fi
fi

echo "$pass passed, $fail failed"
[ $fail = 0 ]
