// Kernel features that must see a connection's bytes (docs/protocol.md §7,
// "Moving a stream"; README "Kernel features"): kernel TLS, io_uring,
// IPsec, socket filters, zero-copy, TCP repair.  Once a direction is on
// RDMA the kernel socket no longer carries the stream's bytes, so anything
// that makes the kernel, not the program, read or write them would see
// nothing (a hang) or, for kernel TLS, let plaintext cross the fabric.  A
// connection such a feature is turned on for leaves RDMA for good first: an
// upgrade under way stays on TCP, a stream on RDMA moves to its TCP
// connection (as at fork, stream/move.h), and it never goes back.
#pragma once
#include "common/reasons.h"

namespace xp::stream {

class Conn;

namespace pin {

// The program is about to turn a kernel feature on for c's socket (no lock
// held, c referenced).  Returns true when from here the kernel socket
// carries the connection as kernel TCP would: nothing of xpress's is still
// to be written on it, and with `rx` also nothing of the peer's is held in
// user space or still to be read from it by xpress (the feature takes over
// the receive side).  false: that cannot be had (the stream took the failure
// path, or the program has not read bytes xpress holds): the caller refuses
// the option.  Blocks for at most about two seconds (one round trip to the
// peer, usually).
bool to_tcp(Conn* c, Reason why, bool rx);

// A process-wide feature (an io_uring): no new connection upgrades (reason
// `why`), every connection leaves RDMA as to_tcp(c, why, true) does.
void all_to_tcp(Reason why);

} // namespace pin
} // namespace xp::stream
