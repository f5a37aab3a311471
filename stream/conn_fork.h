// What a fork leaves on one connection (docs/protocol.md §7 "Moving a
// stream", "After a fork: who else holds the socket", "A fork child that
// holds an accepted connection").
//
// Lock rule: Conn::mu for what the fork handlers, the move and the
// judgement write (unsafe, mark, used_elsewhere, judging, handed_over, the
// counts).  `ino` and the claim's schedule (claim_*) belong to the engine
// thread: `ino` under State::mu (its watch of shared sockets), claim_* in
// tick_claims, which alone writes them once the fork is over (the child's
// handler set them before any thread ran).  `claim` is atomic: data calls
// read it without a lock.
#pragma once
#include <atomic>
#include <cstdint>
#include <sys/types.h>

#include "stream/fork_bytes.h"

namespace xp::stream {

struct ConnFork {
  // A resumed stream still owed bytes to the kernel (or waited for the
  // peer's RESUME): the child must not send them a second time.
  bool unsafe = false;
  // In the parent: the socket's inode, watched until no other process
  // holds it (stream/fork_share.h); 0: none.
  uint64_t ino = 0;
  // In the parent, for a moved stream that owed the kernel nothing: the
  // counts that tell later whether another process used the socket
  // (stream/fork_bytes.h) ...
  fork_bytes::Mark mark;
  // ... and another process read or wrote it (or the counts disagreed):
  // it stays on TCP for good.
  bool used_elsewhere = false;
  // Queued for the judgement of its use since the fork (engine_fork.cc
  // judge_moved): its mark stays until then.
  bool judging = false;
  // The upgrade of an accepted connection could still start over
  // (stream/fork_handover.h): the parent let it go to the child, or this
  // child may upgrade it once no other process holds the socket.
  bool handed_over = false;
  std::atomic<bool> claim{false}; // may claim, not started (the first data call starts it)
  uint64_t claim_next_ms = 0, claim_since_ticks = 0;
  pid_t claim_parent = 0; // the process that forked (fork_share::parent_unseen)
  uint32_t claim_delay_ms = 0;
  // At the fork (before_fork): the kernel's counts of bytes written and
  // read on the socket, and the session's (kernel_counts_match).
  uint64_t k_sent = 0, k_read = 0, s_sent = 0, s_read = 0;
  bool counts = false;
};

} // namespace xp::stream
