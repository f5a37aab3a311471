// Test-only fault injection (README: XPRESS_FAULT_QP_ERROR_AT): once this
// process has sent that many stream bytes over RDMA, the queue pair of the
// channel that carried the last of them is forced into the error state,
// so the recovery tests can break a channel at a chosen byte offset.  Off
// (one relaxed load per send) unless the variable is set.  Compiled only
// into the test library (XP_TESTING, build/test/libxpress.so); in the
// release library these are empty and the data path has no check at all.
#pragma once
#include <atomic>
#include <cstdint>

namespace xp::verbs {
class Link;
}

namespace xp::stream::fault {

#ifdef XP_TESTING
extern std::atomic<bool> g_armed;
inline bool armed() {
  return __builtin_expect(g_armed.load(std::memory_order_relaxed), false);
}
void arm_qp_error(uint64_t at_bytes); // 0: off
void on_sent(verbs::Link* link, uint64_t n);
#else
constexpr bool armed() {
  return false;
}
inline void arm_qp_error(uint64_t) {}
inline void on_sent(verbs::Link*, uint64_t) {}
#endif

} // namespace xp::stream::fault
