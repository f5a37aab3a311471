#!/usr/bin/env bash
# The symbol test: the library exports exactly the functions listed in the
# interposition tables (socket calls and the mmap family: XP lines; the
# malloc family: XA lines), each as a defined function, and nothing else.
# Usage: symbols.sh LIB TABLE...
set -euo pipefail
lib=$1
shift
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
n=$(wc -l <<<"$want")
if [ $fail -eq 0 ]; then
  echo "symbols: $n wrapped functions exported, matching the table"
  echo "1 passed, 0 failed"
else
  echo "0 passed, 1 failed"
  exit 1
fi
