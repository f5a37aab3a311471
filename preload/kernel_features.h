// Kernel features that must see a connection's bytes, and how xpress
// notices them (README "Kernel features that keep a connection on TCP"):
// socket options the program sets (interposed setsockopt/getsockopt), an
// io_uring in the process (syscall(__NR_io_uring_setup), or its fd in
// /proc/self/fd when a connection is about to upgrade), an IPsec (xfrm)
// policy covering the connection (asked of the kernel over netlink when it
// is about to upgrade).  What happens then: stream/pin.h.
#pragma once
#include <sys/socket.h>

#include "common/reasons.h"

namespace xp::kfeat {

// setsockopt(level, name, val): the feature it turns on (none: an ordinary
// option); *rx: the feature takes over the receive side too (every byte
// must be in the kernel's receive queue first).
Reason of_setsockopt(int level, int name, const void* val, socklen_t len, bool* rx);
// The errno a refused option fails with: what the kernel says when it
// cannot do the feature (kernel TLS without its module: ENOENT), so that
// programs take their usual way without it (OpenSSL: TLS in user space).
int refusal_errno(Reason why);

// A connection between these addresses is about to upgrade: a reason to
// keep it on TCP (an io_uring in the process, an IPsec policy), or none.
Reason before_upgrade(const sockaddr_storage& local, const sockaddr_storage& peer);

// The process created an io_uring: no connection upgrades from now on and
// those on RDMA move to TCP (stream/pin.h).
void on_io_uring();

// Tests: the decision on one xfrm policy dump (netlink messages as the
// kernel sends them), for the 4-tuple local -> peer (IPv4, IPv6, or
// IPv4-mapped IPv6 taken as IPv4). 1: a policy with a transform covers it,
// 0: none, -1: the dump failed (*err: its errno).
int xfrm_covers(const void* dump, size_t len, const sockaddr_storage& local,
                const sockaddr_storage& peer, int* err);

} // namespace xp::kfeat
