// Test-only fault injection (README: XPRESS_FAULT_QP_ERROR_AT): once this
// process has sent that many stream bytes over RDMA, the queue pair of the
// channel that carried the last of them is forced into the error state,
// so the recovery tests can break a channel at a chosen byte offset.  Off
// (one relaxed load per send) unless the variable is set.
#pragma once
#include <atomic>
#include <cstdint>

namespace xp::verbs {
class Link;
}

namespace xp::stream::fault {

extern std::atomic<bool> g_armed;
void arm_qp_error(uint64_t at_bytes); // 0: off
void on_sent(verbs::Link* link, uint64_t n);

} // namespace xp::stream::fault
