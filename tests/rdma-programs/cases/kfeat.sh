# shellcheck shell=bash
# Kernel features that must never be bypassed (README "Kernel features that
# keep a connection on TCP"), both ends preloaded (tests/rdma-programs/kfeat.c):
#   ktls    a sender whose connection went over RDMA (3 s of ping-pongs; the
#           upgrade takes 0.2-1.2 s on the loaded 2-vCPU VM)
#           turns kernel TLS on (TCP_ULP "tls", TLS_TX, fixed AES-GCM-128
#           key) and writes 4 MiB.  The receiver must get the kernel's TLS
#           records: it has them decrypted and authenticated by kernel TLS RX
#           on a loopback connection, which must give back the 4 MiB exactly
#           (before stream/pin.cc it got the plaintext: decryption failed).
#           The sender's statistics: bytes over RDMA (the warm-up), then the
#           connection on TCP with reason kernel_tls.  A run without xpress
#           gives the reference ciphertext length.
#   ktls-rx both ends with kernel TLS: the receiver turns TLS RX on after the
#           warm-up and must read the 4 MiB of plaintext.
#   uring   a receiver with an io_uring (created at start-up) reads 1 KiB
#           with recv() and the rest of 16 MiB with io_uring recv: every
#           byte in order; reason io_uring (before: it got 64 KiB, then hung).
#   zerocopy SO_ZEROCOPY set before connect: upgrades; its first MSG_ZEROCOPY
#            send moves it to TCP (kernel_feature), every completion arrives.
#   ipsec   an IPsec transport-mode policy (ESP, TCP between the two test
#           addresses): the connection stays on TCP, reason ipsec on both
#           ends, 4 MiB intact, and the ESP state counted the bytes.

KF_TLS_BYTES=$((4 * 1024 * 1024))
KF_URING_BYTES=$((16 * 1024 * 1024))
KF_IPSEC_BYTES=$((4 * 1024 * 1024))

# kf_reason NAME REASON: that reason's count in NAME's exit statistics
kf_reason() {
  local f n=0 v
  for f in "$CD/stats/$1".[0-9]*.json; do
    [ -s "$f" ] || continue
    v=$(jq -r --arg r "$2" '.fallback_reasons[$r] // 0' "$f" 2>/dev/null)
    [[ $v =~ ^[0-9]+$ ]] && n=$((n + v))
  done
  echo $n
}

kf_ktls() {
  local bin=$1 port=19700 mode ok s r ref=""
  for mode in plain xp; do
    port=$((port + 1))
    start_server "ktls-recv-$mode" 60 $mode "$bin" ktls-recv --bind "$A1" --port $port
    local srv=$SERVER
    wait_listen "ktls-recv-$mode" $port "$srv" || return
    ok=1
    run_client "ktls-send-$mode" 40 $mode "$bin" ktls-send --host "$A1" --port $port --bytes $KF_TLS_BYTES || ok=0
    end_server "ktls-recv-$mode" "$srv" $ok
    s=$(cat "$CD/ktls-send-$mode.out" 2>/dev/null)
    r=$(cat "$CD/ktls-recv-$mode.out" 2>/dev/null)
    if [ $ok = 1 ] && [ "${r#ciphertext * bytes, plaintext $KF_TLS_BYTES bytes ok}" != "$r" ]; then
      local c=${r#ciphertext }
      c=${c%% *}
      if [ $mode = plain ]; then
        ref=$c
        note "kernel TCP alone: ${r}"
        continue
      fi
      pass "ktls: the receiver got $c bytes of TLS records (kernel TCP alone: ${ref:-?}), which kernel TLS RX authenticates and decrypts to the $(hb $KF_TLS_BYTES) sent"
    else
      fail "ktls ($mode): sender '${s:-nothing} $(tail -c 200 "$CD/ktls-send-$mode.err" | tr '\n' ' ')', receiver '${r:-nothing} $(tail -c 200 "$CD/ktls-recv-$mode.err" | tr '\n' ' ')'"
      [ $mode = plain ] && return
    fi
  done
  stats_load ktls-send-xp
  local k
  k=$(kf_reason ktls-send-xp kernel_tls)
  ok_if "ktls: the sender had the connection on RDMA ($S_RTX bytes sent over RDMA), then on TCP with reason kernel_tls" \
    "ktls: sender statistics: want RDMA bytes > 0 and kernel_tls=1: kernel_tls=$k; $S_DESC" \
    test "$S_RTX" -gt 0 -a "$k" = 1
}

# Both ends with kernel TLS (as OpenSSL with kTLS on both sides): the
# receiver turns TLS RX on right after the warm-up, while the sender turns
# TX on; each moves its end to TCP (the two moves cross), and the receiver's
# RX goes through only once the sender's RESUME was read off the socket.
kf_ktls_rx() {
  local bin=$1 port=19705 ok r
  start_server ktls-rx-recv 60 xp "$bin" ktls-recv-rx --bind "$A1" --port $port --bytes $KF_TLS_BYTES
  local srv=$SERVER
  wait_listen ktls-rx-recv $port "$srv" || return
  ok=1
  run_client ktls-rx-send 40 xp "$bin" ktls-send --host "$A1" --port $port --bytes $KF_TLS_BYTES || ok=0
  end_server ktls-rx-recv "$srv" $ok
  r=$(cat "$CD/ktls-rx-recv.out" 2>/dev/null)
  local k1 k2
  k1=$(kf_reason ktls-rx-send kernel_tls)
  k2=$(kf_reason ktls-rx-recv kernel_tls)
  ok_if "ktls (both ends): the receiver's kernel TLS RX gave back the $(hb $KF_TLS_BYTES); kernel_tls at both ends" \
    "ktls (both ends): receiver '${r:-nothing} $(tail -c 200 "$CD/ktls-rx-recv.err" | tr '\n' ' ')', kernel_tls sender=$k1 receiver=$k2" \
    test "$r" = "plaintext $KF_TLS_BYTES bytes ok" -a "$k1" = 1 -a "$k2" = 1
}

kf_uring() {
  local bin=$1 port=19710 ok r
  start_server uring-recv 60 xp "$bin" uring-recv --bind "$A1" --port $port --bytes $KF_URING_BYTES
  local srv=$SERVER
  wait_listen uring-recv $port "$srv" || return
  ok=1
  run_client uring-send 40 xp "$bin" send --host "$A1" --port $port --bytes $KF_URING_BYTES || ok=0
  end_server uring-recv "$srv" $ok
  r=$(cat "$CD/uring-recv.out" 2>/dev/null)
  ok_if "uring: the io_uring reader got all $(hb $KF_URING_BYTES) in order" \
    "uring: receiver '${r:-nothing} $(tail -c 200 "$CD/uring-recv.err" | tr '\n' ' ')'" \
    test "$r" = "received $KF_URING_BYTES ok"
  local k
  k=$(kf_reason uring-recv io_uring)
  stats_load uring-recv
  ok_if "uring: the receiver's connection stayed on TCP, reason io_uring" \
    "uring: receiver statistics: want io_uring=1: $S_DESC" test "$k" = 1
}

# SO_ZEROCOPY set before connect (gRPC sets it on every socket) changes
# nothing: the connection goes over RDMA.  Its first MSG_ZEROCOPY send
# (completions come on the socket's error queue, which a stream on RDMA
# never gets) moves the stream to TCP first: every completion arrives.
kf_zerocopy() {
  local bin=$1 port=19715 ok r k z
  start_server zc-recv 60 xp "$bin" recv --bind "$A1" --port $port --bytes $KF_IPSEC_BYTES
  local srv=$SERVER
  wait_listen zc-recv $port "$srv" || return
  ok=1
  run_client zc-send 40 xp "$bin" send-zerocopy --host "$A1" --port $port --bytes $KF_IPSEC_BYTES || ok=0
  end_server zc-recv "$srv" $ok
  r=$(cat "$CD/zc-recv.out" 2>/dev/null)
  z=$(grep -o 'zerocopy sends [0-9]* completions [0-9]*' "$CD/zc-send.out" 2>/dev/null)
  k=$(kf_reason zc-send kernel_feature)
  stats_load zc-send
  ok_if "zerocopy: $(hb $KF_IPSEC_BYTES) intact, half of it sent with MSG_ZEROCOPY: ${z:-?}" \
    "zerocopy: receiver '${r:-nothing}', sender '${z:-nothing}' $(tail -c 200 "$CD/zc-send.err" | tr '\n' ' ')" \
    test "$r" = "received $KF_IPSEC_BYTES ok" -a -n "$z"
  ok_if "zerocopy: SO_ZEROCOPY alone kept the connection on RDMA ($S_RTX bytes sent over RDMA); the first MSG_ZEROCOPY send moved it to TCP, reason kernel_feature" \
    "zerocopy: sender rdma bytes $S_RTX, kernel_feature=$k: $S_DESC" \
    test "$S_RTX" -gt 0 -a "$k" = 1
}

kf_ipsec() {
  local bin=$1 port=19720 ok r d k1 k2 before after
  local key=0x00112233445566778899aabbccddeeff ak=0x00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff
  for d in "$A0 $A1 0x101" "$A1 $A0 0x102"; do
    set -- $d
    ip xfrm state add src "$1" dst "$2" proto esp spi "$3" mode transport \
      auth-trunc 'hmac(sha256)' $ak 128 enc 'cbc(aes)' $key 2>>"$CD/xfrm.err" &&
      ip xfrm policy add src "$1" dst "$2" proto tcp dir out tmpl src "$1" dst "$2" proto esp mode transport 2>>"$CD/xfrm.err" &&
      ip xfrm policy add src "$1" dst "$2" proto tcp dir in tmpl src "$1" dst "$2" proto esp mode transport 2>>"$CD/xfrm.err" ||
      { fail "ipsec: ip xfrm failed: $(tr '\n' ' ' <"$CD/xfrm.err")"; ip xfrm state flush; ip xfrm policy flush; return; }
  done
  before=$(ip -s xfrm state 2>/dev/null | grep -oE '[0-9]+\(bytes\)' | tr -dc '0-9\n' | paste -sd+ | bc 2>/dev/null)
  start_server ipsec-recv 60 xp "$bin" recv --bind "$A1" --port $port --bytes $KF_IPSEC_BYTES
  local srv=$SERVER
  if wait_listen ipsec-recv $port "$srv"; then
    ok=1
    run_client ipsec-send 40 xp "$bin" send --host "$A1" --port $port --bytes $KF_IPSEC_BYTES || ok=0
    end_server ipsec-recv "$srv" $ok
    after=$(ip -s xfrm state 2>/dev/null | grep -oE '[0-9]+\(bytes\)' | tr -dc '0-9\n' | paste -sd+ | bc 2>/dev/null)
    ip -s xfrm state >"$CD/xfrm-state.txt" 2>&1
    r=$(cat "$CD/ipsec-recv.out" 2>/dev/null)
    ok_if "ipsec: $(hb $KF_IPSEC_BYTES) intact under the IPsec policy" \
      "ipsec: receiver '${r:-nothing} $(tail -c 200 "$CD/ipsec-recv.err" | tr '\n' ' ')'" \
      test "$r" = "received $KF_IPSEC_BYTES ok"
    k1=$(kf_reason ipsec-send ipsec)
    k2=$(kf_reason ipsec-recv ipsec)
    ok_if "ipsec: both ends kept the connection on TCP, reason ipsec; the ESP states carried $((${after:-0} - ${before:-0})) bytes" \
      "ipsec: want reason ipsec on both ends and ESP bytes >= the payload: sender ipsec=$k1, receiver ipsec=$k2, ESP bytes ${before:-?} -> ${after:-?}" \
      test "$k1" = 1 -a "$k2" = 1 -a $((${after:-0} - ${before:-0})) -ge $KF_IPSEC_BYTES
  fi
  ip xfrm policy flush
  ip xfrm state flush
}

run_case() {
  local bin=$REPO/build/tests/rdma-programs/kernel-features
  [ -x "$bin" ] || { fail "kfeat: $bin missing (make $bin)"; return 1; }
  # The guest cannot autoload modules; jitterentropy_rng needs sha3_generic
  # first, drbg needs ctr and aes (loaded with tls).
  modprobe -d "$XP_KROOT" -a tls gcm ctr ghash_generic aes_generic 2>"$CD/modprobe.err" ||
    fail "kfeat: kernel TLS modules: $(tr '\n' ' ' <"$CD/modprobe.err")"
  modprobe -d "$XP_KROOT" -a sha3_generic jitterentropy_rng drbg cryptomgr xfrm_user xfrm_algo esp4 authenc \
    echainiv seqiv cbc hmac sha256_generic 2>>"$CD/modprobe.err" ||
    fail "kfeat: IPsec modules: $(tr '\n' ' ' <"$CD/modprobe.err")"
  kf_ktls "$bin"
  kf_ktls_rx "$bin"
  kf_uring "$bin"
  kf_zerocopy "$bin"
  kf_ipsec "$bin"
}
