#!/usr/bin/env bash
# xpress-run and xpress-stat against a real preloaded process; backtrace,
# invalid configuration and the log file, end to end.
set -uo pipefail
# The system interpreter: a version-manager shim would be a shell script.
python3() { /usr/bin/python3 "$@"; }
export -f python3 2>/dev/null || true
cd "$(dirname "$0")/../.."
pass=0 fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
tmp=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT

# A preloaded python server keeps a connection open while xpress-stat looks.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
XPRESS_STATS_LIVE=1 tools/xpress-run /usr/bin/python3 -c "
import socket,time
l=socket.socket(); l.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1); l.bind(('127.0.0.1',$port)); l.listen()
c=socket.create_connection(('127.0.0.1',$port)); s,_=l.accept(); c.sendall(b'x'*1000); s.recv(1000)
open('$tmp/ready','w').close(); time.sleep(20)" &
pypid=$!
for _ in $(seq 100); do [ -f "$tmp/ready" ] && break; sleep 0.1; done
out=$(build/xpress-stat)
if grep -qE "^ *$pypid +python3 +0 +2 " <<<"$out"; then ok "xpress-stat lists the process with 2 tcp connections"; else bad "xpress-stat list: $out"; fi
out=$(build/xpress-stat "$pypid")
if grep -q "rule_denied=2" <<<"$out" && grep -q "open connections" <<<"$out" && grep -q "127.0.0.1:$port" <<<"$out"; then ok "xpress-stat PID shows reasons and rows"; else bad "xpress-stat PID: $out"; fi
out=$(build/xpress-stat --json "$pypid")
if python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["connections"]["tcp"]==2 and len(d["open_connections"])==2' "$out"; then ok "xpress-stat --json is valid JSON"; else bad "xpress-stat --json: $out"; fi
live=/dev/shm/xpress-$(id -u)/$pypid.stats
mode=$(stat -c '%a %u' "$live" 2>/dev/null) dmode=$(stat -c '%a %u' "$(dirname "$live")" 2>/dev/null)
if [ "$mode" = "600 $(id -u)" ] && [ "$dmode" = "700 $(id -u)" ]; then ok "live file 0600 in the user's 0700 directory"; else bad "live file mode '$mode', directory '$dmode'"; fi
kill -9 $pypid; wait $pypid 2>/dev/null
[ -f "$live" ] && build/xpress-stat >/dev/null
if [ ! -f "$live" ]; then ok "stale live file of a killed process is pruned"; else bad "stale file kept"; fi

# xpress-stat -z and -l: the process takes the requests (here at its next
# connection: no RDMA device, so no engine tick): counters start over, the
# log level changes at run time.
XPRESS_STATS_LIVE=1 XPRESS_LOG_FILE="$tmp/rt.log" tools/xpress-run /usr/bin/python3 -c "
import socket, time, os
l = socket.socket(); l.bind(('127.0.0.1', 0)); l.listen()
cs = [socket.create_connection(l.getsockname()) for i in range(3)]
open('$tmp/r1', 'w').close()
while not os.path.exists('$tmp/go'): time.sleep(0.02)
c = socket.create_connection(l.getsockname())
open('$tmp/r2', 'w').close(); time.sleep(20)" &
rtpid=$!
for _ in $(seq 100); do [ -f "$tmp/r1" ] && break; sleep 0.1; done
before=$(build/xpress-stat "$rtpid" | grep "tcp reasons" | grep -o "rule_denied=[0-9]*")
build/xpress-stat -z -l debug "$rtpid" > "$tmp/req.out" &
reqpid=$!
sleep 0.3; touch "$tmp/go"
for _ in $(seq 100); do [ -f "$tmp/r2" ] && break; sleep 0.1; done
wait $reqpid
after=$(build/xpress-stat "$rtpid" | grep "tcp reasons" | grep -o "rule_denied=[0-9]*")
if [ "$before" = rule_denied=3 ] && [ "$after" = rule_denied=1 ] && grep -q "done" "$tmp/req.out"; then ok "xpress-stat -z: counters start over"; else bad "xpress-stat -z: before '$before' after '$after' ($(cat "$tmp/req.out"))"; fi
if grep -q "log level set to 3" "$tmp/rt.log" && grep -q "debug.*fd [0-9]*: tcp" "$tmp/rt.log"; then ok "xpress-stat -l: log level changed at run time"; else bad "xpress-stat -l: $(cat "$tmp/rt.log")"; fi
kill $rtpid; wait $rtpid 2>/dev/null

# The start-up line (version, revision, settings) and the exit hint when
# nothing went over RDMA, with the top reasons.
out=$(XPRESS_LOG_LEVEL=info XPRESS_STATS=1 tools/xpress-run /usr/bin/python3 -c "
import socket
l=socket.socket(); l.bind(('127.0.0.1',0)); l.listen(); c=socket.create_connection(l.getsockname()); s,_=l.accept()" 2>&1)
if grep -q "info: xpress $(cat VERSION) ([0-9a-f]*\|unknown), pid [0-9]*; settings: .*XPRESS_LOG_LEVEL=info.*; RDMA devices: listed when the engine starts" <<<"$out"; then ok "start-up line: version, revision, settings, where devices are told"; else bad "start-up line: $out"; fi
if grep -q "hint  *no connection went over RDMA (rule_denied=2" <<<"$out" && grep -q "info: exit: no connection went over RDMA" <<<"$out"; then ok "exit hint with the top reasons"; else bad "exit hint: $out"; fi

# No device here: connections the rules let through stay on TCP (no_device),
# which nobody can fix from this host.  At the default level the exit hint
# stays off the program's stderr; at info it is there, at info.
nodev='import socket
l=socket.socket(); l.bind(("127.0.0.1",0)); l.listen(); c=socket.create_connection(l.getsockname()); s,_=l.accept()
c.sendall(b"x"*100); s.recv(100)'
out=$(XPRESS_RULES='allow * 127.0.0.1' tools/xpress-run /usr/bin/python3 -c "$nodev" 2>&1)
out_info=$(XPRESS_RULES='allow * 127.0.0.1' XPRESS_LOG_LEVEL=info tools/xpress-run /usr/bin/python3 -c "$nodev" 2>&1)
if ! grep -q "exit: no connection" <<<"$out" && grep -q "info: exit: no connection went over RDMA (no_device=2" <<<"$out_info"; then
  ok "no device: the exit hint is at info only"
else bad "no device: exit hint at the default level '$out', at info '$(grep exit: <<<"$out_info")'"; fi

# Live statistics are off unless asked for.
out=$(tools/xpress-run /usr/bin/python3 -c "
import socket, os
l=socket.socket(); l.bind(('127.0.0.1',0)); l.listen(); c=socket.create_connection(l.getsockname())
print(int(os.path.exists('/dev/shm/xpress-%d/%d.stats' % (os.geteuid(), os.getpid()))))")
if [ "$out" = 0 ]; then ok "no live file by default"; else bad "live file without XPRESS_STATS_LIVE=1"; fi

# A live-file directory that is not the user's own and private is not used,
# and an existing file there (another process's pid, a planted link) is
# replaced, never opened.  Run as another user where we can (root).
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
  nob=$(id -u nobody) d=/dev/shm/xpress-$(id -u nobody)
  rm -rf "$d"; mkdir -m 0777 "$d"
  out=$(setpriv --reuid=nobody --regid=nogroup --clear-groups env XPRESS_STATS_LIVE=1 LD_PRELOAD=$PWD/build/libxpress.so /usr/bin/python3 -c "
import socket, os
l=socket.socket(); l.bind(('127.0.0.1',0)); l.listen(); c=socket.create_connection(l.getsockname())
print(int(os.path.exists('$d/%d.stats' % os.getpid())))" 2>&1)
  if [ "$out" = 0 ]; then ok "a live-file directory open to others is refused"; else bad "open directory used: $out"; fi
  rm -rf "$d"; mkdir -m 0700 "$d"; chown nobody "$d"
  out=$(setpriv --reuid=nobody --regid=nogroup --clear-groups env XPRESS_STATS_LIVE=1 LD_PRELOAD=$PWD/build/libxpress.so /usr/bin/python3 -c "
import socket, os
ln='$d/%d.stats' % os.getpid()
os.symlink('/dev/shm/xpress-planted-target', ln)
l=socket.socket(); l.bind(('127.0.0.1',0)); l.listen(); c=socket.create_connection(l.getsockname())
print(int(os.path.islink(ln)), int(os.path.exists('/dev/shm/xpress-planted-target')))" 2>&1)
  if [ "$out" = "0 0" ]; then ok "a planted link in the live directory is replaced, not followed"; else bad "planted link: $out"; fi
  rm -rf "$d" /dev/shm/xpress-planted-target
fi

# Log and statistics files: never through a symbolic link; created 0600.
ln -s "$tmp/link-target" "$tmp/log-link"
XPRESS_LOG_LEVEL=debug XPRESS_LOG_FILE="$tmp/log-link" tools/xpress-run /usr/bin/python3 -c 'import socket; socket.socket()' 2>/dev/null
XPRESS_STATS=1 XPRESS_STATS_FILE="$tmp/log-link" tools/xpress-run /usr/bin/python3 -c "
import socket
l=socket.socket(); l.bind(('127.0.0.1',0)); l.listen(); c=socket.create_connection(l.getsockname())" 2>/dev/null
if [ ! -e "$tmp/link-target" ]; then ok "log and statistics files are not opened through a link"; else bad "followed the link"; fi
XPRESS_STATS=1 XPRESS_STATS_FILE="$tmp/stats.txt" tools/xpress-run /usr/bin/python3 -c "
import socket
l=socket.socket(); l.bind(('127.0.0.1',0)); l.listen(); c=socket.create_connection(l.getsockname())"
if [ "$(stat -c %a "$tmp/stats.txt" 2>/dev/null)" = 600 ] && grep -q "xpress statistics" "$tmp/stats.txt"; then ok "statistics file created 0600"; else bad "statistics file: $(ls -l "$tmp/stats.txt" 2>&1)"; fi

# A secure-execution (setuid) process ignores the environment: no file
# named by a variable is created, nothing is accelerated.  ld.so ignores
# LD_PRELOAD paths there (/etc/ld.so.preload would still load us): the test
# program links the library, found through its absolute run path.
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
  cat > "$tmp/suid.c" <<'C'
#include <stdio.h>
#include <sys/socket.h>
int main(void) {
  printf("socket=%d\n", socket(AF_INET, SOCK_STREAM, 0) >= 0);
  return 0;
}
C
  mkdir -m 0755 "$tmp/suid"; cp build/libxpress.so "$tmp/suid/libxpress.so.0"
  gcc -o "$tmp/suid/prog" "$tmp/suid.c" "$tmp/suid/libxpress.so.0" -Wl,-rpath,"$tmp/suid"
  chown nobody "$tmp/suid/prog"; chmod 4755 "$tmp/suid/prog"
  pub=$(mktemp -d /tmp/xp-secure.XXXXXX); chmod 1777 "$pub"; chmod 0755 "$tmp"
  out=$(XPRESS_LOG_LEVEL=debug XPRESS_LOG_FILE="$pub/secure.log" "$tmp/suid/prog" 2>&1)
  if grep -q "socket=1" <<<"$out" && [ ! -e "$pub/secure.log" ]; then ok "setuid process: XPRESS_LOG_FILE ignored"; else bad "setuid: $out; $(ls -l "$pub" 2>&1)"; fi
  rm -rf "$pub"; chmod 0700 "$tmp"
fi

# Invalid configuration: one clear line, then the program works as plain TCP.
out=$(XPRESS_LOG_LEVEL=loud tools/xpress-run /usr/bin/python3 -c 'import socket; socket.socket(); print("fine")' 2>&1)
if [ "$(grep -c XPRESS_LOG_LEVEL <<<"$out")" = 1 ] && grep -q '^fine$' <<<"$out"; then ok "invalid value: one message, program runs"; else bad "invalid value: $out"; fi

# Log file with the pid in its name.
XPRESS_LOG_LEVEL=debug XPRESS_LOG_FILE="$tmp/log-%p.txt" tools/xpress-run /usr/bin/python3 -c 'import socket; socket.socket()' 2>/dev/null
if ls "$tmp"/log-*.txt >/dev/null 2>&1 && grep -q initialised "$tmp"/log-*.txt; then ok "log file with pid"; else bad "log file missing"; fi

# Backtrace on a crash, default action kept (SIGSEGV status).
XPRESS_BACKTRACE=1 XPRESS_LOG_FILE="$tmp/bt.txt" tools/xpress-run /usr/bin/python3 -c 'import ctypes; ctypes.string_at(0)' 2>/dev/null
rc=$?
if [ $rc = 139 ] && grep -q "fatal signal 11" "$tmp/bt.txt" && grep -q "#0" "$tmp/bt.txt"; then ok "backtrace written, process still dies of SIGSEGV"; else bad "backtrace: rc=$rc $(cat "$tmp/bt.txt" 2>/dev/null | head -3)"; fi
# A handler the program installed itself is not replaced.
out=$(XPRESS_BACKTRACE=1 XPRESS_LOG_FILE="$tmp/bt2.txt" tools/xpress-run /usr/bin/python3 -c '
import signal,os
signal.signal(signal.SIGABRT, lambda s,f: print("own handler"))
os.kill(os.getpid(), signal.SIGABRT)' 2>&1)
if grep -q "own handler" <<<"$out" && ! grep -q "fatal" "$tmp/bt2.txt" 2>/dev/null; then ok "program's own handler kept"; else bad "own handler: $out"; fi

# XPRESS_ENABLE=0: reason disabled.
out=$(XPRESS_ENABLE=0 XPRESS_STATS=json tools/xpress-run /usr/bin/python3 -c "
import socket
l=socket.socket(); l.bind(('127.0.0.1',0)); l.listen(); c=socket.create_connection(l.getsockname()); s,_=l.accept()" 2>&1 >/dev/null)
if grep -q '"disabled":2' <<<"$out"; then ok "XPRESS_ENABLE=0 reports reason disabled"; else bad "disabled: $out"; fi

# Wrappers work before our constructor: another preloaded library's
# constructor opens and connects a socket first (both load orders).
cat > "$tmp/early.c" <<'C'
#include <arpa/inet.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>
__attribute__((constructor)) static void early(void) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t n = sizeof a;
  bind(l, (struct sockaddr*)&a, n); listen(l, 1); getsockname(l, (struct sockaddr*)&a, &n);
  int c = socket(AF_INET, SOCK_STREAM, 0);
  int rc = connect(c, (struct sockaddr*)&a, n);
  int s = accept(l, 0, 0);
  char b[3] = {0};
  write(c, "ok", 2); read(s, b, 2);
  fprintf(stderr, "early ctor: connect=%d read=%s\n", rc, b);
  close(c); close(s); close(l);
}
C
gcc -shared -fPIC -o "$tmp/early.so" "$tmp/early.c"
for order in "$tmp/early.so:$PWD/build/libxpress.so" "$PWD/build/libxpress.so:$tmp/early.so"; do
  out=$(XPRESS_STATS=json LD_PRELOAD=$order /bin/true 2>&1)
  if grep -q "early ctor: connect=0 read=ok" <<<"$out" && grep -q '"tcp":2' <<<"$out"; then ok "socket calls from another constructor ($order)"; else bad "early ctor ($order): $out"; fi
done

# A fork child that _exits leaves no live statistics file behind; one that
# makes a connection publishes its own (and removes it at exit).
out=$(XPRESS_STATS_LIVE=1 tools/xpress-run /usr/bin/python3 -c "
import os, socket
l = socket.socket(); l.bind(('127.0.0.1', 0)); l.listen()
c = socket.create_connection(l.getsockname()); s, _ = l.accept()
kids = []
for i in range(5):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    kids.append(pid)
for k in kids:
    os.waitpid(k, 0)
print(' '.join(str(k) for k in kids))
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    c2 = socket.create_connection(l.getsockname())
    os.write(w, b'%d' % int(os.path.exists('/dev/shm/xpress-%d/%d.stats' % (os.geteuid(), os.getpid()))))
    c2.close()
    os._exit(0)
os.waitpid(pid, 0)
print(os.read(r, 1).decode())")
kids=$(head -1 <<<"$out") published=$(tail -1 <<<"$out") left=0
for k in $kids; do [ -e /dev/shm/xpress-$(id -u)/$k.stats ] && left=$((left + 1)); done
if [ "$left" = 0 ] && [ "$published" = 1 ]; then ok "fork children: no stale live file; a child with a connection publishes its own"; else bad "fork children: $left stale files, child published=$published"; fi

# xpress-probe on a host without RDMA (the VM case `probe` covers the rest).
rc=0; out=$(build/xpress-probe 127.0.0.1:9 2>&1) || rc=$?
if [ $rc = 2 ] && grep -q "devices: none" <<<"$out" && grep -q "verdict: no RDMA path" <<<"$out"; then ok "xpress-probe without a device: no RDMA path, exit 2"; else bad "xpress-probe without a device: exit $rc: $out"; fi
# xpress-run --probe without a target: the local check, as --devices.
rc=0; out=$(tools/xpress-run --probe 2>&1) || rc=$?
if [ $rc = 2 ] && grep -q "^devices: none" <<<"$out" && grep -q "^verdict: no active RDMA port here$" <<<"$out"; then
  ok "xpress-run --probe without a target: local devices, no active port, exit 2"
else bad "xpress-run --probe without a target: exit $rc: $out"; fi
rc=0
for a in "" "host" "host:0" "host:99999" "[::1]" "--timeout x 1.2.3.4:5" "a:1 b:2"; do
  # shellcheck disable=SC2086 # words on purpose
  build/xpress-probe $a >/dev/null 2>&1; r=$?; [ $r = 64 ] || rc="$rc '$a'=$r"
done
if [ "$rc" = 0 ]; then ok "xpress-probe: bad arguments exit 64 (usage)"; else bad "xpress-probe bad arguments: $rc"; fi

echo "$pass passed, $fail failed"
[ $fail = 0 ]
