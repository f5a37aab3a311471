#!/usr/bin/env bash
# The library's static TLS: every thread of every preloaded program carries
# it, and glibc's pthread_create fails (EINVAL) when a thread's requested
# stack cannot hold it.  Checks that the TLS segment of LIB is at most
# 1 KiB, and runs SMALL_STACK (threads with the smallest stack glibc allows
# that allocate and use sockets) under the preload with XPRESS_ENABLE=1 and 0.
# Usage: tls.sh LIB SMALL_STACK
set -uo pipefail
lib=$1
prog=$2
limit=1024
passed=0
failed=0
ok() { echo "PASS $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }

# Program header columns: Type Offset VirtAddr PhysAddr FileSiz MemSiz Flg Align.
memsz=$(readelf -lW "$lib" | awk '$1 == "TLS" {print $6}')
tls=$((${memsz:-0}))
if [ -z "$memsz" ]; then
  ok "tls_segment: $lib has no TLS segment"
elif [ "$tls" -le "$limit" ]; then
  ok "tls_segment: $tls bytes (limit $limit)"
else
  bad "tls_segment: $tls bytes, over the limit of $limit (readelf -lW $lib: TLS MemSiz $memsz)"
fi

for enable in 1 0; do
  out=$(LD_PRELOAD=$lib XPRESS_ENABLE=$enable timeout 60 "$prog" 2>&1)
  rc=$?
  if [ $rc -eq 0 ]; then
    ok "small_stack XPRESS_ENABLE=$enable: $out"
  else
    bad "small_stack XPRESS_ENABLE=$enable: exit $rc: $out"
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
