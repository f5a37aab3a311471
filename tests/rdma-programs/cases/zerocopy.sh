# shellcheck shell=bash
# Zero-copy sends and memory that changes owner (tests/rdma-programs/zc_stale.c):
# the sender sends 1 MiB messages from a buffer, then unmaps it, frees it,
# discards its pages (MADV_DONTNEED) or maps new memory over it, gets the
# same address back with new contents and sends again; the receiver must see
# each round's own contents every time.  The sender's statistics must show
# zero-copy bytes and registration-cache invalidations (the test went
# through the cache and its hooks, not around them).

ZC_ROUNDS=24
ZC_SIZE=$((1024 * 1024))

run_case() {
  local port=19500 snap bin=$REPO/build/tests/rdma-programs/zc-stale
  [ -x "$bin" ] || { fail "zero-copy: $bin missing (make $bin)"; return 1; }
  start_server zc-recv 120 xp "$bin" recv --bind "$A1" --port "$port" --size "$ZC_SIZE" --rounds "$ZC_ROUNDS"
  local srv=$SERVER
  wait_listen zc-recv "$port" "$srv" || return 1
  snap=$T/snap
  net_snap "$snap"
  local ok=1
  run_client zc-send 100 xp "$bin" send --host "$A1" --port "$port" --size "$ZC_SIZE" --rounds "$ZC_ROUNDS" || ok=0
  end_server zc-recv "$srv" $ok
  local s r
  s=$(cat "$CD/zc-send.out" 2>/dev/null)
  r=$(cat "$CD/zc-recv.out" 2>/dev/null | grep -v '^listening')
  if [ $ok = 1 ] && [ "${r#ok }" != "$r" ]; then
    pass "stale data: receiver saw every round's own contents ($r); sender: $s"
  else
    fail "stale data: receiver '${r:-nothing} $(tail -c 200 "$CD/zc-recv.err" | tr '\n' ' ')', sender '${s:-nothing} $(tail -c 200 "$CD/zc-send.err" | tr '\n' ' ')'"
  fi
  if [ $ok = 1 ]; then
    check_stats_rdma "zero-copy" zc-send
    check_stats_rdma "zero-copy" zc-recv
    local f zc inv
    f=$(ls "$CD/stats/zc-send".[0-9]*.json 2>/dev/null | head -1)
    zc=$(jq -r '.memory.zero_copy.tx // 0' "$f" 2>/dev/null)
    inv=$(jq -r '.memory.registration_cache.invalidations // 0' "$f" 2>/dev/null)
    ok_if "zero-copy: sender sent $(hb "${zc:-0}") zero-copy, $inv registration-cache invalidations" \
      "zero-copy: sender statistics show ${zc:-no} zero-copy bytes and ${inv:-no} invalidations (want both > 0)" \
      [ "${zc:-0}" -gt 0 -a "${inv:-0}" -gt 0 ]
  else
    step_failed "$snap" zc-send zc-recv
  fi
}
