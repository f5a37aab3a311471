#!/usr/bin/env bash
# The package as a user gets it: built, checked by lintian, installed into a
# scratch root, and a program run through the installed wrapper (which must
# find the installed library), with and without `make install`'s own layout.
# usage: test-install.sh BUILD_DIR VERSION
set -uo pipefail
build=$1 version=$2
cd "$(dirname "$0")/.."
pass=0 fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
deb=$build/xpress_${version}_$(dpkg --print-architecture).deb

if [ -f "$deb" ]; then ok "make deb built $(basename "$deb")"; else bad "no $deb"; fi
if command -v lintian >/dev/null; then
  out=$(lintian --fail-on error,warning "$deb" 2>&1)
  if [ $? = 0 ]; then ok "lintian: no errors or warnings${out:+ ($(wc -l <<<"$out") notes)}"; else bad "lintian: $out"; fi
else
  bad "lintian is not installed (make deps)"
fi

# apt resolves the package's dependencies on this machine (simulated: the
# real install would change the host; the scratch root below stands for it).
out=$(apt-get install -s "$(realpath "$deb")" 2>&1)
if grep -q "^Inst xpress " <<<"$out" && ! grep -q "^E: " <<<"$out"; then ok "apt install ./$(basename "$deb") resolves (simulated)"; else bad "apt-get install -s: $(tail -3 <<<"$out")"; fi

# Installed into a scratch root (what apt install puts on a machine).
dpkg-deb -x "$deb" "$tmp/root"
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
lib=$tmp/root/usr/lib/$multiarch/libxpress.so.$version
soname=$(readelf -d "$lib" 2>/dev/null | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
if [ "$soname" = "libxpress.so.${version%%.*}" ] && [ -L "$tmp/root/usr/lib/$multiarch/$soname" ]; then ok "versioned soname $soname"; else bad "soname '$soname'"; fi
for f in usr/bin/xpress-run usr/bin/xpress-stat usr/bin/xpress-probe usr/share/man/man7/xpress.7.gz usr/share/man/man1/xpress-run.1.gz usr/share/man/man1/xpress-stat.1.gz usr/share/man/man1/xpress-probe.1.gz; do
  [ -e "$tmp/root/$f" ] || bad "missing /$f"
done
out=$(XPRESS_STATS=json "$tmp/root/usr/bin/xpress-run" --version 2>&1)
if grep -q "xpress-run $version, library $tmp/root/usr/lib/$multiarch/libxpress.so.$version" <<<"$out"; then ok "installed wrapper finds the installed library"; else bad "wrapper: $out"; fi
out=$(env -u XPRESS_LIB "$tmp/root/usr/bin/xpress-run" --stats=json /usr/bin/python3 -c "
import socket
l=socket.socket(); l.bind(('127.0.0.1',0)); l.listen(); c=socket.create_connection(l.getsockname()); s,_=l.accept()
c.sendall(b'hello'); print(s.recv(5).decode())" 2>&1)
if grep -q '^hello$' <<<"$out" && grep -q '"rule_denied":2' <<<"$out"; then ok "a program runs through the installed wrapper, preloaded"; else bad "run: $out"; fi
rc=0; out=$("$tmp/root/usr/bin/xpress-run" --probe 127.0.0.1:9 2>&1) || rc=$?
if [ $rc = 2 ] && grep -q "verdict: no RDMA path" <<<"$out"; then ok "installed xpress-run --probe runs the installed probe"; else bad "xpress-run --probe: exit $rc: $out"; fi
rc=0; out=$("$tmp/root/usr/bin/xpress-run" --probe 2>&1) || rc=$?
if { [ $rc = 0 ] || [ $rc = 2 ]; } && grep -q "^verdict: " <<<"$out"; then ok "installed xpress-run --probe without a target: the local check (exit $rc)"; else bad "xpress-run --probe alone: exit $rc: $out"; fi
if MANWIDTH=80 man -l "$tmp/root/usr/share/man/man7/xpress.7.gz" 2>&1 | grep -q "XPRESS_SPIN_US"; then ok "xpress(7) lists the settings"; else bad "xpress(7) has no settings"; fi
if MANWIDTH=80 man -l "$tmp/root/usr/share/man/man7/xpress.7.gz" 2>&1 | grep -q "peer_not_accelerated"; then ok "xpress(7) lists the reasons"; else bad "xpress(7) has no reasons"; fi
out=$(env -u XPRESS_LIB XPRESS_PROFILE=latency "$tmp/root/usr/bin/xpress-run" --print-config redis-server 2>&1)
if grep -qE "^XPRESS_SPIN_US=100000 +profile latency$" <<<"$out"; then ok "the installed wrapper's --print-config"; else bad "--print-config: $out"; fi

# make install / uninstall with PREFIX and DESTDIR.
make --no-print-directory install DESTDIR="$tmp/inst" PREFIX=/opt/xp >/dev/null
if [ -x "$tmp/inst/opt/xp/bin/xpress-run" ] && [ -f "$tmp/inst/opt/xp/lib/libxpress.so.$version" ] && [ -f "$tmp/inst/opt/xp/share/man/man7/xpress.7" ]; then ok "make install PREFIX DESTDIR"; else bad "make install: $(find "$tmp/inst" | head)"; fi
make --no-print-directory uninstall DESTDIR="$tmp/inst" PREFIX=/opt/xp >/dev/null
left=$(find "$tmp/inst" -type f -o -type l | wc -l)
if [ "$left" = 0 ]; then ok "make uninstall removes every file"; else bad "uninstall left $left files"; fi

echo "$pass passed, $fail failed"
[ $fail = 0 ]
