#!/usr/bin/env bash
# The data path's call budget, checked on the built library: the functions a
# send or receive over an RDMA stream runs through call no allocator (no
# malloc on the data path), no mmap, and no __tls_get_addr (the library is
# preloaded, so its thread-locals use the initial-exec model: one
# %fs-relative load; the default model is a call into ld.so per access,
# which under Soft-RoCE's TCG costs as much as a page of our own code).
# Direct calls only: what those functions call in turn is their own entry.
# Usage: hotpath_calls.sh LIB
set -euo pipefail
lib=$1
command -v objdump >/dev/null || { echo "hotpath_calls: objdump not installed (binutils)"; exit 2; }
objdump -d --no-show-raw-insn -C "$lib" | awk '
  BEGIN {
    n = split("<recv>: <send>: <read>: <write>: conn_of( conn_recv( conn_send( io::recv( io::send( " \
              "recv_stream( send_stream( send_loop( Stream::read( Stream::write( Stream::maybe_ack( " \
              "Stream::reserve_record( Mux::progress( RecordChannel::post( RecordChannel::post_staged( " \
              "RecordChannel::stage( RecordChannel::poll( RecordChannel::release( RecordChannel::send( " \
              "RecordChannel::can_send( RecordChannel::maybe_grant( RecordChannel::flush_deferred( " \
              "RcLink::post_write_imm( RcLink::post_write_imm_gather( RcLink::post_recvs( RcLink::poll( " \
              "Changes::wake( wake::notify( engine::refresh( progress_locked( Conn::ready_events( spin_enter( spin_leave(", hot, " ")
    bad = "(__tls_get_addr|malloc|calloc|realloc|free|operator new|operator delete|mmap|munmap)(@plt)?>"
  }
  /^[0-9a-f]+ <.*>:$/ {
    fn = $0; sub(/^[0-9a-f]+ /, "", fn); cur = ""
    for (i = 1; i <= n; ++i) if (index(fn, hot[i]) > 0) { cur = fn; seen[hot[i]] = 1 }
    next
  }
  cur != "" && /call|jmp/ && $0 ~ bad {
    t = $0; sub(/.*</, "", t); sub(/>.*/, "", t)
    print "hotpath_calls: " cur " calls " t; fails++
  }
  END {
    # LTO inlines many of these into their callers (then their calls are
    # the callers ones); the entry points themselves must be there, or the
    # list no longer describes the library.
    m = split("<recv>: <send>: io::recv( io::send( recv_stream( send_loop(", need, " ")
    for (i = 1; i <= m; ++i) if (!(need[i] in seen)) { print "hotpath_calls: no function matches " need[i] " (renamed? update the list)"; fails++ }
    k = 0; for (f in seen) ++k
    if (fails) exit 1
    print "hotpath_calls: " k " of " n " data-path functions found (the rest inlined), none calls the allocator, mmap or __tls_get_addr"
  }'
