#!/usr/bin/env bash
# The symbol test: the library exports exactly the functions listed in the
# interposition tables (socket calls and the mmap family: XP lines; the
# malloc family: XA lines), each as a defined function, and nothing else.
# With --test-lib: the test-only code (fault injection, XPRESS_TEST_USER_MODE;
# Makefile TESTING_SRCS) is in the test library and nowhere in LIB.
# Usage: symbols.sh LIB [--test-lib TESTLIB] TABLE...
set -euo pipefail
lib=$1
shift
test_lib=""
if [ "${1:-}" = --test-lib ]; then
  test_lib=$2
  shift 2
fi
want=$(sed -n 's/^X[PA]([^,]*, *\([A-Za-z0-9_]*\),.*/\1/p' "$@" | sort)
have=$(nm -D --defined-only "$lib" | awk '$2 == "T" || $2 == "W" || $2 == "i" {print $3}' | sort)
others=$(nm -D --defined-only "$lib" | awk '$2 != "T" && $2 != "W" && $2 != "i" {print $3}')
fail=0
missing=$(comm -23 <(echo "$want") <(echo "$have"))
extra=$(comm -13 <(echo "$want") <(echo "$have"))
if [ -n "$missing" ]; then echo "symbols: in the table but not exported: $missing"; fail=1; fi
if [ -n "$extra" ]; then echo "symbols: exported but not in the table: $extra"; fail=1; fi
if [ -n "$others" ]; then echo "symbols: unexpected non-function exports: $others"; fail=1; fi
# The issue's minimum list must all be in the table.
required="socket socketpair bind listen accept accept4 connect shutdown close close_range read readv
recv recvfrom recvmsg recvmmsg write writev send sendto sendmsg sendmmsg sendfile sendfile64 splice
poll ppoll select pselect epoll_create epoll_create1 epoll_ctl epoll_wait epoll_pwait epoll_pwait2
fcntl fcntl64 ioctl getsockopt setsockopt getsockname getpeername dup dup2 dup3 fork vfork daemon
__read_chk __recv_chk __recvfrom_chk __poll_chk __ppoll_chk
malloc calloc realloc reallocarray free posix_memalign aligned_alloc memalign valloc pvalloc
malloc_usable_size mmap mmap64 munmap mremap madvise brk sbrk shmdt"
for f in $required; do
  grep -qx "$f" <<<"$want" || { echo "symbols: required function $f missing from the table"; fail=1; }
done
# Nothing of ours is destroyed by exit(): the engine thread (and the
# program's other threads) keep running through the static destructors, so
# a destroyed global would be freed memory under them.
if [ -n "$(nm -D --undefined-only "$lib" | grep ' __cxa_atexit@' || true)" ]; then
  echo "symbols: a global with a destructor registers with __cxa_atexit (make it never destroyed):"
  for o in "$(dirname "$lib")"/*/*.o; do nm "$o" 2>/dev/null | grep -q 'U __cxa_atexit' && echo "  $o"; done
  fail=1
fi
# Test-only code: its namespaces in the full symbol table (local symbols
# too, demangled).  The test library must have them (else this check could
# not see them), the release library none.
testing_re='xp::test_user_mode::|xp::stream::fault::'
if [ -n "$test_lib" ]; then
  t=$(nm -C "$test_lib" | grep -cE "$testing_re" || true)
  r=$(nm -C "$lib" | grep -E "$testing_re" || true)
  if [ "$t" -eq 0 ]; then echo "symbols: no test-only symbols in the test library $test_lib"; fail=1; fi
  if [ -n "$r" ]; then
    echo "symbols: test-only code in the release library:"
    echo "$r" | head -n 10
    fail=1
  fi
  # The test library exports the same functions.
  have_t=$(nm -D --defined-only "$test_lib" | awk '$2 == "T" || $2 == "W" || $2 == "i" {print $3}' | sort)
  if [ "$have_t" != "$have" ]; then echo "symbols: the test library's exports differ from the release library's"; fail=1; fi
  [ $fail -eq 0 ] && echo "symbols: test-only code: $t symbols in the test library, none in the release library"
fi
n=$(wc -l <<<"$want")
if [ $fail -eq 0 ]; then
  echo "symbols: $n wrapped functions exported, matching the table"
  echo "1 passed, 0 failed"
else
  echo "0 passed, 1 failed"
  exit 1
fi
