// What xpress knows about one tracked socket.  Records live in type-stable
// memory (never unmapped) and are reference counted, so a lock-free reader
// racing a close() never touches freed memory and never acts on a reused fd.
#pragma once
#include <atomic>
#include <cstdint>

#include "common/reasons.h"
#include "preload/rules.h"

namespace xp {

struct ConnSlot; // stats.h: the record's row in the live statistics
namespace stream {
class ReadySource;
class Conn;
struct ListenShare;
} // namespace stream

struct SocketRecord {
  std::atomic<uint32_t> refs{0};      // one for the fd table entry, one per reader
  uint32_t index = 0;                 // position in the pool (free list link)
  std::atomic<uint32_t> next_free{0}; // free list: index+1 of the next free record
  int fd = -1;
  int domain = 0;
  int type = 0;          // SOCK_STREAM etc. (flags stripped)
  Role role = Role::any; // client after connect, server after accept
  Mode mode = Mode::tcp;
  Reason reason = Reason::none;
  bool listener = false;
  bool counted = false;     // connection counted in the per-mode totals
  ConnSlot* slot = nullptr; // live statistics row, or null when full
  // Set while xpress, not the kernel, answers readiness for this socket
  // (stream/ready_source.h); null on plain TCP sockets.
  std::atomic<stream::ReadySource*> ready{nullptr};
  // The connection's upgrade/RDMA state (stream/conn.h) once one exists.
  std::atomic<stream::Conn*> conn{nullptr};
  // A non-blocking connect in progress: the upgrade starts at the first data
  // call (the connection is established by then).
  std::atomic<bool> deferred{false};
  bool outcome_pending = false;         // counted once the upgrade decided
  std::atomic<int> names{1};            // fds naming this record (dup family)
  stream::ListenShare* share = nullptr; // listener: rendezvous state (engine.h)
  // A kernel feature was turned on (preload/kernel_features.h): the
  // connection stays on TCP (a listener's passes to what it accepts).
  std::atomic<Reason> pinned{Reason::none};
};

} // namespace xp
