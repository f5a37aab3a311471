// The return of a moved stream after a fork, step 1: where the stream is,
// as both ends can name it, and whether another process used the socket
// (docs/protocol.md §7 "After a fork: who else holds the socket", "The
// return of a moved stream").
//
// A stream moved at a fork is served by the kernel in parent and child, so
// the parent's own counts do not say where it is.  The kernel's do: what
// the programs wrote is what the peer acknowledged plus the send queue,
// what they read is what arrived less the receive queue.  Those are the
// positions both ends can name for a switch (our written count is the
// peer's read count once it drained its queue).  Comparing how far they
// moved since the fork with how far this process's own calls moved the
// stream tells whether another process read or wrote a byte of it.
//
// No lock inside; the caller holds what keeps the counts still enough
// (see observe()).
#pragma once
#include <cstdint>

namespace xp::stream::fork_bytes {

// What the kernel moved through a TCP socket since it was connected.  The
// end that connected counts its SYN among the written bytes (the SYN-ACK
// advanced what the peer acknowledged): one more than the peer reads.
// Only differences between two counts of the same socket are used here.
struct Kernel {
  uint64_t written = 0; // bytes the programs wrote (acknowledged + queued)
  uint64_t read = 0;    // bytes the programs read (received - queued)
  bool operator==(const Kernel&) const = default;
};
// The counts come from three calls (TCP_INFO, SIOCOUTQ, SIOCINQ): an ACK or
// bytes arriving between them would make one count short, so TCP_INFO is
// read again after the two and its counts must not have moved.
// false: not an established TCP socket (a FIN sent or received counts one
// sequence number the counts cannot tell from a byte), a kernel without
// tcpi_bytes_acked/tcpi_bytes_received (Linux 4.1/4.2), or (*moving set)
// the socket's counts moved during each of a few reads.
bool kernel(int fd, Kernel* out, bool* moving = nullptr);

// This process's own calls on the socket: bytes their results said were
// written and read (no peek), and how many calls began and how many were
// counted.  Counted by the layer that sees every call (preload/track.cc
// registers it), which reads `done` before `begun`, both before the bytes.
// false: not counted for this fd.
struct Ours {
  uint64_t tx = 0, rx = 0;
  uint64_t begun = 0, done = 0;
};
using AppCounts = bool (*)(int fd, Ours* out);
void set_app_counts(AppCounts f);
bool app_counts(int fd, Ours* out);

// The kernel's counts and ours at one instant.  Problem: a call of ours in
// another thread moves bytes in the kernel before it counts them, so for
// a while the kernel is ahead of us (a preempted thread: for a time
// slice).  Mechanism: ours, the kernel's, ours again; the sample holds
// only if no call was in flight at the first read and none began by the
// second (then every byte the kernel moved by the middle read was counted
// by the first).  busy: a call was in flight, or the kernel's counts kept
// moving (kernel()); take another sample later.
enum class Sample { ok, busy, failed };
Sample sample(int fd, Kernel* k, uint64_t* tx, uint64_t* rx);

// Taken in the parent before fork() runs, once the stream moved and owes
// the kernel nothing (stream/move.cc): the kernel's counts, ours, and the
// bytes we hold in user space that our program will read without the
// kernel (the peer's bytes over RDMA not read yet, raw bytes read ahead).
struct Mark {
  Kernel k;
  uint64_t app_tx = 0, app_rx = 0;
  uint64_t held_rx = 0;
  bool valid = false;
};

enum class Use {
  alone,        // only this process's calls moved the stream since the mark
  other,        // the kernel moved more: another process read or wrote
  inconsistent, // the kernel moved less than our calls did (a counter was reset): unknown
};
// held_left: bytes of mark.held_rx our program has not read yet.
Use judge(const Mark& mark, const Kernel& now, uint64_t app_tx, uint64_t app_rx,
          uint64_t held_left);
const char* use_name(Use u);

// judge() on the first sample() of fd that holds, of at most `tries`.
// false: no answer (*busy: our calls were in flight in every sample, ask
// again later; else kernel() or app_counts() failed).
bool observe(int fd, const Mark& mark, uint64_t held_left, int tries, Use* out, bool* busy);

} // namespace xp::stream::fork_bytes
