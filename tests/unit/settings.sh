#!/usr/bin/env bash
# Settings end to end: xpress-run --print-config (every setting, its value
# and where it came from), the configuration file in a preloaded process
# ([program] sections, profiles, the environment over the file), bad lines
# (one message with file and line, the program runs), secure execution
# (XPRESS_CONFIG ignored), and the README's tables against the declaration.
set -uo pipefail
python3() { /usr/bin/python3 "$@"; }
cd "$(dirname "$0")/../.."
pass=0 fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# The tests set XPRESS_CONFIG themselves; nothing else from the caller.
for v in $(env | sed -n 's/^\(XPRESS_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done

cat > "$tmp/x.conf" <<'EOF'
# global
log_level = info
profile = low-cpu
[program python3 redis-server]
spin_us = 250
ring_kb = 128
EOF

# Nothing set, and no /etc/xpress.conf: every setting at its default.
if [ ! -e /etc/xpress.conf ]; then
  out=$(XPRESS_CONFIG= tools/xpress-run --print-config 2>&1)
  n=$(grep -c "^XPRESS_" <<<"$out")
  decl=$(grep -c "^XP_SETTING(" common/settings.def)
  if [ "$n" = "$decl" ] && [ "$(grep -c ' default$' <<<"$out")" = "$n" ] && grep -q "configuration file none" <<<"$out"; then
    ok "--print-config without a file: all $n settings at their defaults"
  else bad "--print-config defaults ($n of $decl): $out"; fi
fi

# Values and origins: file line, the program's section, profile, environment.
out=$(XPRESS_CONFIG="$tmp/x.conf" XPRESS_RING_KB=64 tools/xpress-run --print-config /usr/bin/python3 2>&1)
rc=$?
if [ $rc = 0 ] && grep -qE "^XPRESS_LOG_LEVEL=info +$tmp/x.conf:2$" <<<"$out" &&
  grep -qE "^XPRESS_SPIN_US=250 +$tmp/x.conf:5$" <<<"$out" &&
  grep -qE "^XPRESS_KEEPALIVE_MS=10000 +profile low-cpu$" <<<"$out" &&
  grep -qE "^XPRESS_RING_KB=64 +environment$" <<<"$out" &&
  grep -qE "^XPRESS_STREAMS_PER_CHANNEL=16384 +default$" <<<"$out"; then
  ok "--print-config: value and origin (file:line, section, profile, environment, default)"
else bad "--print-config origins (rc $rc): $out"; fi
out=$(XPRESS_CONFIG="$tmp/x.conf" tools/xpress-run --print-config nginx 2>&1)
if grep -qE "^XPRESS_SPIN_US=0 +profile low-cpu$" <<<"$out"; then ok "--print-config: another program's section does not apply"; else bad "--print-config other program: $out"; fi
out=$(XPRESS_CONFIG="$tmp/x.conf" tools/xpress-run --profile latency --print-config nginx 2>&1)
if grep -qE "^XPRESS_SPIN_US=100000 +profile latency$" <<<"$out" && grep -qE "^XPRESS_PROFILE=latency +environment$" <<<"$out"; then ok "--profile overrides the file's profile"; else bad "--profile: $out"; fi

# The README's example file, verbatim (trailing comments included): no
# error, and its [program] section applies to memcached.
awk '/^```/ { if (blk) exit; getline l; if (l == "# /etc/xpress.conf") { blk = 1; print l }; next }
  blk { print }' README.md > "$tmp/readme.conf"
out=$(XPRESS_CONFIG="$tmp/readme.conf" tools/xpress-run --print-config memcached 2>&1)
rc=$?
if [ $rc = 0 ] && [ "$(wc -l < "$tmp/readme.conf")" -ge 5 ] && ! grep -q "^xpress: " <<<"$out" &&
  grep -qE "^XPRESS_PROFILE=latency +$tmp/readme.conf:[0-9]+$" <<<"$out" &&
  grep -qE "^XPRESS_SPIN_US=20000 +$tmp/readme.conf:[0-9]+$" <<<"$out" &&
  grep -qE "^XPRESS_AUTOCORK_KB=0 +profile latency$" <<<"$out"; then
  ok "the README's example file: no error, its section applies to memcached"
else bad "README example file (rc $rc): $(cat "$tmp/readme.conf"); $out"; fi

# The preloaded program gets the same: its start-up line (at its first
# inet socket) names the values and their origins; a program the section
# does not name does not.
out=$(XPRESS_CONFIG="$tmp/x.conf" tools/xpress-run /usr/bin/python3 -c 'import socket; socket.socket(); print("fine")' 2>&1)
if grep -q "XPRESS_SPIN_US=250 ($tmp/x.conf:5)" <<<"$out" && grep -q "XPRESS_KEEPALIVE_MS=10000 (profile low-cpu)" <<<"$out" && grep -q '^fine$' <<<"$out"; then
  ok "a preloaded python3 takes its section and the profile"
else bad "preloaded section: $out"; fi
out=$(XPRESS_CONFIG="$tmp/x.conf" tools/xpress-run /bin/bash -c 'exec 3<>/dev/tcp/127.0.0.1/1; echo fine' 2>&1)
if grep -q "XPRESS_SPIN_US=0 (profile low-cpu)" <<<"$out" && ! grep -q "XPRESS_SPIN_US=250" <<<"$out"; then ok "a preloaded bash does not take python3's section"; else bad "preloaded other program: $out"; fi

# A bad line: one message with file and line; the program runs, as plain TCP.
printf 'spin_us = 5\n[program python3]\nring_kb = 9999\n' > "$tmp/bad.conf"
out=$(XPRESS_CONFIG="$tmp/bad.conf" XPRESS_STATS=1 tools/xpress-run /usr/bin/python3 -c "
import socket
l=socket.socket(); l.bind(('127.0.0.1',0)); l.listen(); c=socket.create_connection(l.getsockname()); s,_=l.accept()
c.sendall(b'x'); print('got', s.recv(1))" 2>&1)
rc=$?
if [ $rc = 0 ] && [ "$(grep -c "^xpress: $tmp/bad.conf:3: invalid XPRESS_RING_KB = '9999' (accepted: an integer from 64 to 1024); xpress disabled" <<<"$out")" = 1 ] &&
  grep -q "^got b'x'" <<<"$out" && grep -q "disabled=" <<<"$out"; then
  ok "bad line: one message with file:line, the program runs with reason disabled"
else bad "bad line (rc $rc): $out"; fi
out=$(XPRESS_CONFIG="$tmp/bad.conf" tools/xpress-run --print-config python3 2>&1)
if [ $? = 1 ] && grep -q "bad.conf:3" <<<"$out"; then ok "--print-config: exit status 1 on a bad line"; else bad "--print-config bad: $out"; fi
out=$(XPRESS_CONFIG="$tmp/none.conf" tools/xpress-run /usr/bin/python3 -c 'import socket; socket.socket(); print("fine")' 2>&1)
if grep -q "cannot read configuration file $tmp/none.conf (no such file)" <<<"$out" && grep -q "^fine$" <<<"$out"; then ok "a missing XPRESS_CONFIG file: one message, the program runs"; else bad "missing file: $out"; fi

# The hooked allocator resolves through the same code before any
# constructor: a [program] section turns its arenas off for that program.
arena_committed() { sed -n 's/^ *arena bytes *committed \([0-9]*\),.*/\1/p' <<<"$1" | tail -1; }
alloc_py="
import socket
b = [bytearray(4 << 20) for i in range(4)]
l=socket.socket(); l.bind(('127.0.0.1',0)); l.listen(); c=socket.create_connection(l.getsockname())"
printf '[program python3]\nalloc = 0\n' > "$tmp/alloc.conf"
on=$(XPRESS_STATS=1 tools/xpress-run /usr/bin/python3 -c "$alloc_py" 2>&1)
off=$(XPRESS_CONFIG="$tmp/alloc.conf" XPRESS_STATS=1 tools/xpress-run /usr/bin/python3 -c "$alloc_py" 2>&1)
if [ "$(arena_committed "$on")" -gt 0 ] 2>/dev/null && [ "$(arena_committed "$off")" = 0 ]; then
  ok "alloc = 0 in python3's section: no arena (committed $(arena_committed "$on") without it)"
else bad "allocator and the file: on '$(arena_committed "$on")' off '$(arena_committed "$off")': $off"; fi

# A secure-execution (setuid) process does not read the file XPRESS_CONFIG
# names (tools.sh explains the linked test program).
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
  printf '#include <stdio.h>\n#include <sys/socket.h>\nint main(void) { socket(AF_INET, SOCK_STREAM, 0); puts("ran"); return 0; }\n' > "$tmp/suid.c"
  mkdir -m 0755 "$tmp/suid"; cp build/libxpress.so "$tmp/suid/libxpress.so.0"
  gcc -o "$tmp/suid/prog" "$tmp/suid.c" -Wl,--no-as-needed "$tmp/suid/libxpress.so.0" -Wl,-rpath,"$tmp/suid"
  cp "$tmp/suid/prog" "$tmp/suid/plain"
  chown nobody "$tmp/suid/prog"; chmod 4755 "$tmp/suid/prog"; chmod 0755 "$tmp"
  chmod 0644 "$tmp/bad.conf"
  plain=$(XPRESS_CONFIG="$tmp/bad.conf" "$tmp/suid/plain" 2>&1)
  secure=$(XPRESS_CONFIG="$tmp/bad.conf" "$tmp/suid/prog" 2>&1)
  if grep -q "bad.conf:3" <<<"$plain" && [ "$secure" = ran ]; then ok "setuid process: XPRESS_CONFIG ignored"; else bad "setuid: plain '$plain', secure '$secure'"; fi
  chmod 0700 "$tmp"
fi

# The test-only settings act only in the test library: the release library
# says it ignores them (Makefile TESTING_SRCS).
out=$(XPRESS_CONFIG= XPRESS_FAULT_QP_ERROR_AT=1 LD_PRELOAD="$PWD/build/libxpress.so" /usr/bin/python3 -c 'import socket; socket.socket()' 2>&1)
if grep -q "act only in the test library: ignored" <<<"$out"; then ok "release library: XPRESS_FAULT_QP_ERROR_AT ignored, with a warning"; else bad "release library and XPRESS_FAULT_QP_ERROR_AT: '$out'"; fi

# The README's tables are the ones common/settings.def gives.
if python3 tools/gen-settings.py common/settings.def README.md --check >/dev/null; then ok "README settings tables generated from common/settings.def"; else bad "README tables differ: run make settings-doc"; fi
cp README.md "$tmp/README.md"
sed -i 's/^| `XPRESS_SPIN_US` | 0-1000000/| `XPRESS_SPIN_US` | 0-999/' "$tmp/README.md"
if ! python3 tools/gen-settings.py common/settings.def "$tmp/README.md" --check >/dev/null; then ok "a README row edited by hand is caught"; else bad "edited README not caught"; fi

echo "settings: $pass passed, $fail failed"
[ "$fail" = 0 ]
