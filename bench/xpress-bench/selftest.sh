#!/usr/bin/env bash
# Quick loopback self-test of xpress-bench (make test-xpress-bench): every scenario with
# tiny parameters and full payload checks; each run's output must be one well-formed JSON
# object reporting ok and passed integrity checks.  Also: bad arguments exit 2, the table
# output renders, the server exits cleanly on SIGTERM and with --once.
# Usage: selftest.sh [path/to/xpress-bench]     (runs in well under 20 s)
# XB_PRELOAD=/path/lib.so runs both server and clients under that LD_PRELOAD (e.g.
# build/libxpress.so or rsocket's librspreload.so).
set -uo pipefail
XB_BIN=${1:-build/xpress-bench}
[ -x "$XB_BIN" ] || { echo "selftest: $XB_BIN not built" >&2; exit 1; }
# Every invocation goes through env, so a preload applies to server and clients alike.
XB="env LD_PRELOAD=${XB_PRELOAD:-} $XB_BIN"
[ -n "${XB_PRELOAD:-}" ] || XB="$XB_BIN"
# The distribution's python starts in 50 ms; a version-manager shim can take a second.
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3) || { echo "selftest: needs python3" >&2; exit 1; }
TMP=$(mktemp -d)
SRV_PID=""
cleanup() {
  [ -n "$SRV_PID" ] && kill "$SRV_PID" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "  ok   $1"; }
bad() { fail=$((fail + 1)); echo "  FAIL $1"; [ -n "${2:-}" ] && sed 's/^/       /' "$2" | head -20; }

# Starts a server on a free port; sets SRV_PID and PORT.
start_server() {
  local log=$1; shift
  $XB server --port 0 --bind 127.0.0.1 --timeout 60 "$@" >"$log" 2>&1 &
  SRV_PID=$!
  PORT=""
  for _ in $(seq 100); do
    PORT=$(sed -n 's/.*listening on .* port \([0-9]*\).*/\1/p' "$log")
    [ -n "$PORT" ] && return 0
    sleep 0.05
  done
  echo "selftest: server did not start" >&2
  cat "$log" >&2
  exit 1
}

# check_json NAME WANT-OK FILE PYTHON-EXPR...: the file must hold exactly one JSON object
# with ok and integrity.ok equal to WANT-OK (1/0), and each expression (over `r`, `res`) true.
check_json() {
  local name=$1 want=$2 file=$3; shift 3
  if "$PY" - "$want" "$file" "$@" >"$TMP/check.out" 2>&1 <<'PY'
import json, sys
want = sys.argv.pop(1) == "1"
text = open(sys.argv[1]).read()
lines = [l for l in text.splitlines() if l.strip()]
assert len(lines) == 1, "expected one line of JSON, got %d" % len(lines)
r = json.loads(lines[0])
assert isinstance(r, dict), "not an object"
for k in ("tool", "version", "scenario", "ok", "params", "results", "client", "server",
          "integrity", "errors"):
    assert k in r, "missing key " + k
assert r["ok"] is want, "ok is %s: %s %s" % (r["ok"], r["errors"], r["integrity"])
assert r["integrity"]["ok"] is want, "integrity.ok is not %s: %s" % (want, r["integrity"])
if want:
    assert r["integrity"]["client_errors"] == 0 and r["integrity"]["server_errors"] == 0
assert r["client"]["cpu_s"] >= 0 and r["server"]["cpu_s"] >= 0
res = r["results"]
for expr in sys.argv[2:]:
    assert eval(expr), "check failed: " + expr
PY
  then ok "$name"; else bad "$name" "$TMP/check.out"; fi
}

# run NAME CHECKS... -- ARGS: one client run with --json that must succeed.
# run_corrupt NAME CHECKS... -- ARGS: same, but the run must fail its integrity checks
# (exit 1) because a sender was told to corrupt data (XB_CORRUPT_EVERY, see pattern.h).
run() { run_expect 0 "$@"; }
run_corrupt() { run_expect 1 "$@"; }
run_expect() {
  local want_rc=$1 name=$2; shift 2
  local checks=()
  while [ "$1" != "--" ]; do checks+=("$1"); shift; done
  shift
  local out="$TMP/$name.json" rc=0
  $XB "$@" --port "$PORT" --json --quiet --timeout 20 >"$out" 2>"$TMP/$name.err" || rc=$?
  if [ $rc -ne "$want_rc" ]; then
    bad "$name (exit $rc, want $want_rc)" "$TMP/$name.err"
    return
  fi
  check_json "$name" $((1 - want_rc)) "$out" "${checks[@]}"
}

echo "xpress-bench selftest ($XB_BIN${XB_PRELOAD:+, LD_PRELOAD=$XB_PRELOAD})"

# Bad arguments: clear message, exit status 2.
for args in "" "bogus" "stream --size 0" "stream --frobnicate" "pingpong --duration" \
            "ps --sizes 4K:x" "server --json" "incast --senders 0" "stream --port 99999"; do
  $XB $args >/dev/null 2>"$TMP/args.err"
  rc=$?
  if [ $rc -eq 2 ] && [ -s "$TMP/args.err" ]; then ok "bad args '$args' -> 2"
  else bad "bad args '$args' -> $rc (want 2)" "$TMP/args.err"; fi
done

start_server "$TMP/server.log"

run stream "res['gbps'] > 0" "res['bytes'] == res['msgs'] * 65536" \
  "r['integrity']['server_checked'] == res['msgs']" \
  -- stream --duration 0.3 --conns 2 --verify full
run stream-reverse "res['gbps'] > 0" "r['integrity']['client_checked'] == res['msgs']" \
  -- stream --duration 0.3 --reverse --size 1000 --verify full
run pingpong "res['latency']['count'] > 10" "res['latency']['p99_us'] >= res['latency']['p50_us']" \
  -- pingpong --duration 0.3 --warmup 0.1 --size 100 --conns 2 --verify full
run pingpong-iters "res['latency']['count'] == 50" \
  -- pingpong --duration 5 --warmup 0 --iters 50 --size 3
run ps "res['fetch']['ops'] > 0" "res['push']['ops'] > 0" "len(res['by_size']) == 6" \
  "r['integrity']['client_checked'] > 0 and r['integrity']['server_checked'] > 0" \
  -- ps --duration 0.5 --warmup 0.1 --clients 3 --conns 2 --shards 2 \
     --sizes 4K:0.5,64K:0.3,1000000:0.2 --fetch-ratio 0.6 --verify full
run incast "res['rounds_completed'] == 10" "res['round_latency']['p99_us'] > 0" \
  -- incast --senders 4 --size 64K --rounds 10 --warmup-rounds 1 --verify full
run incast-reverse "res['rounds_completed'] == 10" "r['integrity']['client_checked'] == 44" \
  -- incast --senders 4 --size 100000 --rounds 10 --warmup-rounds 1 --reverse --verify full
run connect "res['short']['conns'] == 40" "res['long']['conns'] == 20" \
  "res['long']['server_conns_open'] >= 20" "res['short']['ttfb_latency']['count'] == 40" \
  -- connect --count 40 --parallel 2 --long 20 --hold 0.1

# The checks fire: client-side senders corrupt every 5th message.
XB_SAVED=$XB
XB="env XB_CORRUPT_EVERY=5 ${XB_PRELOAD:+LD_PRELOAD=$XB_PRELOAD} $XB_BIN"
run_corrupt corrupt-stream "r['integrity']['server_errors'] > 0" \
  -- stream --duration 0.2 --size 4K
run_corrupt corrupt-push "r['integrity']['server_errors'] > 0" \
  -- ps --duration 0.2 --warmup 0 --clients 1 --fetch-ratio 0 --sizes 4K --shards 1
XB=$XB_SAVED

# The default output is a readable table.
if $XB pingpong --port "$PORT" --duration 0.2 --warmup 0 --quiet >"$TMP/table.txt" 2>&1 &&
   grep -q "p99_us" "$TMP/table.txt" && grep -q "integrity: ok" "$TMP/table.txt"; then
  ok "table output"
else
  bad "table output" "$TMP/table.txt"
fi

# An idle server sleeps: no thread of it wakes on a short period (each wake-up takes a
# CPU from the measured threads of the next run on a 2-vCPU test bed; the parking
# thread used to look every 20 ms).  Its accept loop looks every 200 ms.
switches() {
  local t n total=0
  for t in /proc/"$SRV_PID"/task/*/status; do
    n=$(sed -n 's/^voluntary_ctxt_switches:[[:space:]]*//p' "$t" 2>/dev/null)
    total=$((total + ${n:-0}))
  done
  echo "$total"
}
s0=$(switches)
sleep 1
s1=$(switches)
if [ $((s1 - s0)) -le 25 ]; then ok "idle server: $((s1 - s0)) wake-ups in 1 s"
else bad "idle server woke $((s1 - s0)) times in 1 s (want <= 25)"; fi

# No server: a clear error, exit 1, and still one JSON object saying why.
kill -TERM "$SRV_PID"
if wait "$SRV_PID"; then ok "server exits 0 on SIGTERM"; else bad "server exit on SIGTERM"; fi
SRV_PID=""
$XB stream --port "$PORT" --json --quiet --duration 0.2 >"$TMP/down.json" 2>"$TMP/down.err"
rc=$?
if [ $rc -eq 1 ] && "$PY" -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['ok'] is False and r['errors']" "$TMP/down.json" 2>/dev/null; then
  ok "no server -> exit 1 with JSON error"
else
  bad "no server -> exit $rc" "$TMP/down.err"
fi

# The checks fire on the client too: a server that corrupts what it sends.
XB_SAVED=$XB
XB="env XB_CORRUPT_EVERY=5 ${XB_PRELOAD:+LD_PRELOAD=$XB_PRELOAD} $XB_BIN"
start_server "$TMP/corrupt.log"
XB=$XB_SAVED
run_corrupt corrupt-stream-reverse "r['integrity']['client_errors'] > 0" \
  -- stream --duration 0.2 --size 4K --reverse
run_corrupt corrupt-get "r['integrity']['client_errors'] > 0" \
  -- incast --senders 2 --size 4K --rounds 10 --reverse --verify full
run_corrupt corrupt-echo "r['integrity']['client_errors'] > 0" \
  -- pingpong --duration 0.2 --warmup 0
kill -TERM "$SRV_PID" && wait "$SRV_PID"
SRV_PID=""

# --once: the server ends by itself after one run.
start_server "$TMP/once.log" --once
run once "res['gbps'] > 0" -- stream --duration 0.2
for _ in $(seq 50); do kill -0 "$SRV_PID" 2>/dev/null || break; sleep 0.1; done
if ! kill -0 "$SRV_PID" 2>/dev/null && wait "$SRV_PID"; then ok "server --once exits 0"
else bad "server --once did not exit" "$TMP/once.log"; fi
SRV_PID=""

echo "xpress-bench selftest: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
