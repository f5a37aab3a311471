#!/usr/bin/env bash
# Start-up cost (issue 31): a preloaded process that never makes an inet
# connection must not load rdma-core, libunwind or a C++ run time.  Reads
# /proc/self/maps from preloaded children: with no socket; with
# XPRESS_BACKTRACE=1 (libunwind, and only it, is loaded); after a TCP
# connect the rules let through (rdma-core is loaded then, to look for a
# device).  And ldd of the library lists none of them.
# Usage: startup.sh LIB
set -uo pipefail
lib=$(readlink -f "$1")
passed=0
failed=0
ok() { echo "PASS $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }
heavy='libibverbs|librdmacm|libunwind|libstdc\+\+|libnl-'

deps=$(ldd "$lib")
if grep -qE "$heavy" <<<"$deps"; then
  bad "ldd_lists_no_heavy_library: $(grep -oE "($heavy)[^ ]*" <<<"$deps" | sort -u | tr '\n' ' ')"
else
  ok "ldd_lists_no_heavy_library: $(awk '{print $1}' <<<"$deps" | tr '\n' ' ')"
fi

maps=$(LD_PRELOAD=$lib timeout 20 cat /proc/self/maps)
if ! grep -q "$lib" <<<"$maps"; then
  bad "no_socket: the library is not in the child's maps (preload failed?)"
elif grep -qE "$heavy" <<<"$maps"; then
  bad "no_socket: mapped $(grep -oE "[^ /]*($heavy)[^ ]*" <<<"$maps" | sort -u | tr '\n' ' ')"
else
  ok "no_socket: no rdma-core, libunwind or libstdc++ mapped"
fi

maps=$(LD_PRELOAD=$lib XPRESS_BACKTRACE=1 timeout 20 cat /proc/self/maps)
if grep -q libunwind <<<"$maps" && ! grep -qE 'libibverbs|librdmacm' <<<"$maps"; then
  ok "backtrace_loads_libunwind_only"
else
  bad "backtrace: libunwind $(grep -c libunwind <<<"$maps"), rdma-core $(grep -cE 'libibverbs|librdmacm' <<<"$maps")"
fi

# /bin/true allocates nothing: under the preload neither start-up nor exit
# may initialise the allocator for it (glibc's first malloc: brk, getrandom).
calls=$(LD_PRELOAD=$lib timeout 20 strace -qq -f -e trace=brk,getrandom /bin/true 2>&1 >/dev/null)
n=$(grep -cE '^(\[pid +[0-9]+\] )?(brk|getrandom)\(' <<<"$calls")
plain=$(timeout 20 strace -qq -f -e trace=brk,getrandom /bin/true 2>&1 >/dev/null | grep -cE '^(brk|getrandom)\(')
if [ "$n" -le "$plain" ]; then
  ok "no_allocation_at_start_or_exit: $n brk/getrandom calls (plain: $plain)"
else
  bad "no_allocation_at_start_or_exit: $n brk/getrandom calls, plain $plain: $(tr '\n' ' ' <<<"$calls")"
fi

# No C++ exception machinery: libstdc++.a's emergency pool mallocs 72 KB
# from its constructor, which starts the hooked allocator's arenas (a
# 64 GiB address reservation and their metadata) in every process.
if grep -qE ' (__cxa_allocate_exception|__gxx_personality_v0)$' <<<"$(nm "$lib" 2>/dev/null)"; then
  bad "no_exception_runtime: the library links libstdc++'s exception machinery"
else
  ok "no_exception_runtime"
fi
calls=$(LD_PRELOAD=$lib timeout 20 strace -qq -e trace=mmap,openat /bin/true 2>&1 >/dev/null)
big=$(grep -E '^mmap\(NULL, [0-9]{10,}' <<<"$calls" || true)
if [ -z "$big" ]; then
  ok "no_arena_at_start: no mapping of 1 GB or more by /bin/true"
else
  bad "no_arena_at_start: $(tr '\n' ' ' <<<"$big")"
fi

# The loader writes no page of the library's data for it beyond those it
# must: every load-time relocation lands in the RELRO part (written and
# sealed anyway), on the page of crt's __dso_handle (relocated; with lazy
# binding the end of .got.plt shares it), or on the page where .data ends
# (which the loader writes while clearing .bss's start).  A relocated
# pointer inside a large table (a global initialised with &object or a
# function) would make every process fault a page of it in.
stray=$(python3 - "$lib" <<'PY'
import re, subprocess, sys
lib = sys.argv[1]
run = lambda *a: subprocess.run(a, capture_output=True, text=True).stdout
m = re.search(r"GNU_RELRO\s+0x\S+\s+0x([0-9a-f]+)\s+0x\S+\s+0x([0-9a-f]+)", run("readelf", "-lW", lib))
lo, hi = int(m.group(1), 16), int(m.group(1), 16) + int(m.group(2), 16)
sec = {l.split()[1]: int(l.split()[3], 16) + int(l.split()[5], 16)
       for l in run("readelf", "-SW", lib).replace("[ ", "[").splitlines()
       if re.match(r"\s*\[\s*\d+\]\s+\.data\s", l)}
end_page = (sec[".data"] - 1) & ~4095
dso_pages = [int(l.split()[0], 16) & ~4095 for l in run("nm", lib).splitlines() if l.endswith(" __dso_handle")]
for l in run("readelf", "-rW", lib).splitlines():
    p = l.split()
    if len(p) > 2 and p[2].startswith("R_X86_64"):
        o = int(p[0], 16)
        if not (lo <= o < hi or o & ~4095 in dso_pages or o & ~4095 == end_page):
            print(hex(o), p[2])
PY
)
if [ -z "$stray" ]; then
  ok "no_relocation_into_data_pages"
else
  bad "no_relocation_into_data_pages: $(tr '\n' ' ' <<<"$stray")"
fi

# The variables start-up and exit touch (preload/lifecycle.h,
# XP_STARTUP_DATA) share the page where .data ends, which the loader
# writes anyway.
where=$(python3 - "$lib" <<'PY'
import re, subprocess, sys
sec = {}
for l in subprocess.run(["readelf", "-SW", sys.argv[1]], capture_output=True, text=True).stdout.splitlines():
    m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)", l)
    if m: sec[m.group(1)] = (int(m.group(2), 16), int(m.group(2), 16) + int(m.group(3), 16))
d, s = sec.get(".data"), sec.get("xp_startup")
if s and (d[1] - 1) // 4096 == s[0] // 4096 == (s[1] - 1) // 4096:
    print("same")
else:
    print("data %s, xp_startup %s" % (d, s))
PY
)
if [ "$where" = same ]; then
  ok "startup_variables_on_one_page"
else
  bad "startup_variables_on_one_page: $where"
fi

# Two pages the loader or crt would touch for nothing: .bss starting on a
# page of its own (a page-aligned global in .bss aligns its start; crt's exit
# code reads its first variable), and crt's empty _fini as DT_FINI, called at
# exit from the last text page, where libc_nonshared's pthread_atfork (called
# by the constructors) would sit too (Makefile LIB_LDFLAGS, preload/cxxrt.cc).
layout=$(python3 - "$lib" <<'PY'
import re, subprocess, sys
lib = sys.argv[1]
run = lambda *a: subprocess.run(a, capture_output=True, text=True).stdout
sec = {}
for l in run("readelf", "-SW", lib).splitlines():
    m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)", l)
    if m: sec[m.group(1)] = (int(m.group(2), 16), int(m.group(2), 16) + int(m.group(3), 16))
bad = []
data_end = max(sec[".data"][1], sec.get("xp_startup", (0, 0))[1])
if sec[".bss"][0] // 4096 != (data_end - 1) // 4096:
    bad.append(".bss starts on page %#x, .data ends on page %#x" % (sec[".bss"][0] & ~4095, (data_end - 1) & ~4095))
if re.search(r"\(FINI\)", run("readelf", "-dW", lib)):
    bad.append("DT_FINI is set")
if re.search(r" __pthread_atfork$", run("nm", lib), re.M):
    bad.append("libc_nonshared's pthread_atfork is linked")
print("; ".join(bad))
PY
)
if [ -z "$layout" ]; then
  ok "no_page_touched_for_nothing"
else
  bad "no_page_touched_for_nothing: $layout"
fi

# Two LOAD segments (Makefile, -z noseparate-code): each further segment is
# an mmap at every exec and its own first page fault; no segment both
# writable and executable.
loads=$(readelf -lW "$lib" | grep -E '^ +LOAD ')
if [ "$(grep -c . <<<"$loads")" -le 2 ] && ! grep -q 'RWE' <<<"$loads"; then
  ok "two_load_segments"
else
  bad "two_load_segments: $(tr -s ' \n' ' ' <<<"$loads")"
fi

# Page faults of a preloaded /bin/true, against an empty preloaded library
# (the floor of any preload; the smallest of 7 runs each, interleaved).
# A regression such as a constructor that allocates (the C++ run time's
# emergency pool started the arenas: about 20 more) or touches large tables
# shows here.  What is left: the text page of the constructors, the RELRO
# page and the page where .data ends; a .bss that starts on a page of its own
# (a page-aligned global in it) or start-up code at the end of the text
# (libc_nonshared's pthread_atfork, crt's _fini) each add one.
empty_so=$(mktemp --suffix=.so)
echo 'void xp_empty(void) {}' | gcc -shared -fPIC -x c -o "$empty_so" -
faults=$(python3 - "$lib" "$empty_so" <<'PY'
import os, sys
best = {}
for _ in range(7):
    for lib in sys.argv[1:]:
        # posix_spawn (vfork-like): no copy-on-write faults of this Python
        # process counted in the child's before its exec.
        pid = os.posix_spawn("/bin/true", ["true"], {"PATH": "/usr/bin:/bin", "LD_PRELOAD": lib})
        n = os.wait4(pid, 0)[2].ru_minflt
        best[lib] = min(best.get(lib, n), n)
print(best[sys.argv[1]] - best[sys.argv[2]])
PY
)
# Page faults of a forking shell (bash forks, not vfork) running /bin/true
# 200 times, against the same loop under the empty library: a fork handler
# that writes a page of the library's (a lock, a counter, a table cleared in
# the child) before its part was used makes each fork copy it, in parent and
# child.  Nothing is used here, so nothing may be written (the smallest of 3
# runs each, interleaved; at most 8 faults per fork above the empty library).
fork_faults=$(python3 - "$lib" "$empty_so" <<'PY'
import os, sys
best = {}
loop = "for i in $(seq 200); do /bin/true; done"
for _ in range(3):
    for lib in sys.argv[1:]:
        pid = os.posix_spawn("/bin/bash", ["bash", "-c", loop],
                             {"PATH": "/usr/bin:/bin", "LD_PRELOAD": lib})
        n = os.wait4(pid, 0)[2].ru_minflt  # bash and every child it waited for
        best[lib] = min(best.get(lib, n), n)
print("%.1f" % ((best[sys.argv[1]] - best[sys.argv[2]]) / 200))
PY
)
if [[ $fork_faults =~ ^-?[0-9]+(\.[0-9]+)?$ ]] && awk -v f="$fork_faults" 'BEGIN { exit !(f < 8) }'; then
  ok "page_faults_per_fork: $fork_faults per fork above an empty preloaded library"
else
  bad "page_faults_per_fork: $fork_faults per fork above an empty preloaded library (fewer than 8)"
fi
rm -f "$empty_so"
if [ "$faults" -le 5 ]; then
  ok "page_faults_at_start: $faults above an empty preloaded library"
else
  bad "page_faults_at_start: $faults above an empty preloaded library (at most 5)"
fi

# No constructor that runs cpuid (libgcc's __builtin_cpu_supports support):
# a trap to the hypervisor at every exec under virtualisation.
syms=$(nm "$lib" 2>/dev/null)
if grep -q __cpu_indicator_init <<<"$syms"; then
  bad "no_cpuid_constructor: the library links libgcc's __cpu_indicator_init"
else
  ok "no_cpuid_constructor"
fi

# The real functions are looked up when first used, all of them at the first
# inet socket (preload/real.h), not at start-up: /bin/true never calls
# sendmmsg, so nothing looks it up.
lookups=$(LD_DEBUG=symbols LD_PRELOAD=$lib timeout 20 /bin/true 2>&1 | grep -c 'symbol=sendmmsg;')
if [ "$lookups" -eq 0 ]; then
  ok "no_lookup_before_first_socket"
else
  bad "no_lookup_before_first_socket: sendmmsg looked up $lookups times by /bin/true"
fi

# The configuration (environment, /etc/xpress.conf) is read at the first
# call that needs it, not at start: /bin/true opens no configuration file,
# and a bad XPRESS_ variable says nothing there.  A program that opens inet
# sockets gets the error once, at its first socket (not at start), even
# across a fork, and runs on (everything passes through to the kernel).
opens=$(LD_PRELOAD=$lib timeout 20 strace -qq -e trace=openat /bin/true 2>&1 >/dev/null | grep -c xpress.conf)
out=$(timeout 20 env LD_PRELOAD="$lib" XPRESS_SPIN_US=bogus /bin/true 2>&1)
if [ "$opens" -eq 0 ] && [ -z "$out" ]; then
  ok "no_config_before_first_socket"
else
  bad "no_config_before_first_socket: /etc/xpress.conf opened $opens times, output '$out'"
fi
bad_conf=$(mktemp)
printf 'spin_us = 5\nno_such_setting = 1\n' >"$bad_conf"
for src in "XPRESS_SPIN_US=bogus" "XPRESS_CONFIG=$bad_conf"; do
  out=$(timeout 20 env LD_PRELOAD="$lib" "$src" /usr/bin/python3 -u -c '
import os, socket, sys
print("started"); sys.stdout.flush()
pid = os.fork()
if pid == 0:
    socket.socket().close(); os._exit(0)
os.waitpid(pid, 0)
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen()
c = socket.create_connection(l.getsockname()); s, _ = l.accept()
c.sendall(b"ping"); assert s.recv(4) == b"ping"
print("done")' 2>&1)
  rc=$?
  reports=$(grep -c '^xpress: .*\(invalid XPRESS_SPIN_US\|unknown setting\)' <<<"$out")
  first=$(head -n 1 <<<"$out")
  if [ $rc -eq 0 ] && [ "$reports" -eq 1 ] && [ "$first" = started ] && grep -qx done <<<"$out"; then
    ok "bad_setting_reported_at_first_socket_once: ${src%%=*}"
  else
    bad "bad_setting_reported_at_first_socket_once: ${src%%=*}: exit $rc, $reports reports: $(tr '\n' '|' <<<"$out")"
  fi
done
rm -f "$bad_conf"

# A loopback connection the rules let through: the upgrade decision looks
# for an RDMA device, which loads rdma-core (none is found on a host
# without one; the connection stays on TCP either way).
maps=$(LD_PRELOAD=$lib XPRESS_RULES='allow * *' timeout 20 /usr/bin/python3 -c '
import socket
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen()
c = socket.create_connection(l.getsockname()); s, _ = l.accept()
c.sendall(b"ping"); assert s.recv(4) == b"ping"
print(open("/proc/self/maps").read())')
if grep -q libibverbs <<<"$maps" && grep -q librdmacm <<<"$maps"; then
  ok "connect_loads_rdma_core"
else
  bad "connect_loads_rdma_core: libibverbs/librdmacm not mapped after a connect ($(wc -l <<<"$maps") map lines)"
fi

# Lazy binding (Makefile, LIB_LDFLAGS): the loader binds at start only the
# symbols start-up uses, not all ~100 imports (with -z now, about 105 at
# every exec: two thirds of the library's start-up instructions).
if readelf -dW "$lib" | grep -qE '\(FLAGS(_1)?\).*\b(BIND_NOW|NOW)\b'; then
  bad "lazy_binding: the library is linked with -z now (BIND_NOW)"
else
  ok "lazy_binding: no BIND_NOW"
fi
binds=$(timeout 20 env -u LD_BIND_NOW LD_DEBUG=bindings LD_PRELOAD="$lib" /bin/true 2>&1 | grep -c "binding file $lib ")
if [ "$binds" -le 15 ]; then
  ok "bindings_at_start: $binds symbols of the library bound for /bin/true (at most 15)"
else
  bad "bindings_at_start: $binds symbols of the library bound for /bin/true (at most 15)"
fi

# The constructor calls no libc function but pthread_atfork: getenv (for
# XPRESS_BACKTRACE) faulted in a page of libc's text, one of getenv's
# strlen and one of the library's .rodata in every process; the constructor
# reads the environment glibc passes it (preload/lifecycle.cc).
calls=$(timeout 20 env -u LD_BIND_NOW LD_DEBUG=bindings LD_PRELOAD="$lib" /bin/true 2>&1 |
  grep "binding file $lib " | grep -oE "symbol \`[^']*'" | grep -vE "\`(__register_atfork|__cxa_finalize|environ|__libc_single_threaded|memcpy|program_invocation_short_name|stderr)'")
if [ -z "$calls" ]; then
  ok "constructor_calls_only_atfork"
else
  bad "constructor_calls_only_atfork: /bin/true bound $(tr '\n' ' ' <<<"$calls")"
fi
out=$(LD_PRELOAD=$lib XPRESS_BACKTRACE=1 timeout 20 grep -c libunwind /proc/self/maps)
out0=$(LD_PRELOAD=$lib XPRESS_BACKTRACEX=1 XPRESS_BACKTRAC=1 timeout 20 grep -c libunwind /proc/self/maps)
if [ "$out" -ge 1 ] && [ "$out0" -eq 0 ]; then
  ok "backtrace_variable_read_at_start: exact name only"
else
  bad "backtrace_variable_read_at_start: libunwind maps $out with XPRESS_BACKTRACE, $out0 with similar names"
fi

# Where a wrapper can make its first call of a libc function (and so run the
# loader's resolver): in a signal handler on an alternate stack, in fork's
# atfork handlers, in a vfork child, in a constructor running before the
# library's own (tests/unit/lazy_bind.c).
lazy_dir=$(mktemp -d)
if gcc -O2 -Wall -Wextra -Werror -pthread -o "$lazy_dir/lazy_bind" tests/unit/lazy_bind.c &&
  gcc -O2 -Wall -Wextra -Werror -shared -fPIC -DEARLY -o "$lazy_dir/early.so" tests/unit/lazy_bind.c; then
  for what in signal atfork vfork early; do
    pre=$lib
    [ "$what" = early ] && pre="$lib $lazy_dir/early.so"
    out=$(env -u LD_BIND_NOW LD_PRELOAD="$pre" timeout 20 "$lazy_dir/lazy_bind" "$what" 2>&1)
    if [ $? -eq 0 ] && [ "$out" = "$what 0" ]; then
      ok "lazy_binding_first_call_in: $what"
    else
      bad "lazy_binding_first_call_in: $what: $out"
    fi
  done
else
  bad "lazy_binding_first_call_in: tests/unit/lazy_bind.c does not build"
fi
rm -rf "$lazy_dir"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
