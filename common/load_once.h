// A library loaded on first use, once per process, from any thread
// (verbs/rdma_lib.cc, recover/sodium_lib.cc).  No libstdc++ (std::call_once
// needs its run time) and safe across fork: while a thread loads, the state
// holds its process's pid; a fork child that finds its parent's pid there
// (no thread of its own will finish that load) starts over rather than wait.
#pragma once
#include <atomic>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace xp {

class LoadOnce {
public:
  // True once load() returned true; load() runs in one thread only, and
  // every later call returns its answer.
  template <typename Load> bool get(Load load) {
    while (true) {
      long s = state_.load(std::memory_order_acquire);
      if (__builtin_expect(s == kLoaded, 1)) return true;
      if (s == kMissing) return false;
      const long self = ::syscall(SYS_getpid);
      if (s == 0) {
        if (!state_.compare_exchange_strong(s, self, std::memory_order_acq_rel)) continue;
        const bool ok = load();
        state_.store(ok ? kLoaded : kMissing, std::memory_order_release);
        return ok;
      }
      if (s == self)
        sched_yield(); // another thread of ours is loading: it does not block for long
      else
        state_.compare_exchange_strong(s, 0, std::memory_order_acq_rel);
    }
  }

private:
  static constexpr long kLoaded = -1, kMissing = -2;
  std::atomic<long> state_{0};
};

} // namespace xp
