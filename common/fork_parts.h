// Which parts of the library this process has used, for the fork handlers:
// each handler does nothing (touches no page) until its part was used, so a
// process that never opens an inet socket pays nothing at fork (issue 31:
// a forking shell copied a page of the library's for every lock taken or
// counter reset, in parent and child).  The word lives in the start-up
// section (preload/lifecycle.h), on a page every process has written and
// keeps: reading it faults nothing, before or after a fork.
//
// A part is marked before its first lock or state change, so a fork that
// happens after it finds the mark in parent and child (the fork's snapshot
// holds every store that preceded it).
#pragma once

#include <atomic>
#include <cstdint>

namespace xp::fork_parts {

enum Part : uint32_t {
  kAlloc = 1u << 0,  // alloc/: the arenas, the registration cache
  kEngine = 1u << 1, // stream/: the engine's state (stream/engine_at_fork.cc)
  kIo = 1u << 2,     // stream/conn_io.cc: cached socket options
  kLog = 1u << 3,    // preload/log.cc: a log file named per process (%p)
  kStats = 1u << 4,  // preload/stats.cc: the statistics block
  kEpoll = 1u << 5,  // preload/epoll_state.cc: its list lock and states
  kWatch = 1u << 6,  // stream/wake.cc: the readiness watchers' locks
};

extern std::atomic<uint32_t> g_used;
// What lifecycle's handlers look after (preload/lifecycle.cc).
constexpr uint32_t kLifecycle = kEngine | kIo | kLog | kStats;

// Cheap once marked: a load, no store.
inline void mark(Part p) {
  if (__builtin_expect((g_used.load(std::memory_order_relaxed) & p) == 0, 0))
    g_used.fetch_or(p, std::memory_order_seq_cst);
}
// Any of the parts in the mask.
inline bool used(uint32_t parts) {
  return (g_used.load(std::memory_order_seq_cst) & parts) != 0;
}

// Parts whose prepare handler ran for this thread's fork under way: their
// parent handler undoes what it did, and only then.  A part may become
// used between the two (another library's fork handler, a signal handler,
// or another thread may make its first use), so the parent handler cannot
// go by used().  Per thread: since glibc 2.36 two threads' forks may run
// their handlers at the same time; a fork's prepare, parent and child
// handlers all run on the forking thread (the child inherits its value).
extern __attribute__((tls_model("initial-exec"))) thread_local uint32_t t_prepared;
inline void set_prepared(Part p) {
  t_prepared |= p;
}
// Whether p's prepare handler ran; clears it.
inline bool take_prepared(Part p) {
  if ((t_prepared & p) == 0) return false;
  t_prepared &= ~static_cast<uint32_t>(p);
  return true;
}

// The registered fork handlers and the fork wrapper, together on the pages
// the linker gives .text.hot: a fork child faults in every page of the
// library's text it runs (fork copies no page table of a file mapping), so
// a child of a process that used nothing runs one page of ours.
#define XP_FORK_TEXT __attribute__((section(".text.hot.xp_fork")))

} // namespace xp::fork_parts
