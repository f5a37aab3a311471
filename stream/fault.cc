#include "stream/fault.h"

#include "common/logsink.h"
#include "verbs/link.h"

namespace xp::stream::fault {

std::atomic<bool> g_armed{false};

namespace {
std::atomic<uint64_t> g_left{0};
}

void arm_qp_error(uint64_t at_bytes) {
  g_left.store(at_bytes, std::memory_order_relaxed);
  g_armed.store(at_bytes != 0, std::memory_order_release);
}

void on_sent(verbs::Link* link, uint64_t n) {
  uint64_t left = g_left.load(std::memory_order_relaxed);
  while (left != 0) {
    uint64_t next = n >= left ? 0 : left - n;
    if (g_left.compare_exchange_weak(left, next, std::memory_order_acq_rel)) {
      if (next != 0) return;
      g_armed.store(false, std::memory_order_release);
      Status st = link->force_error();
      XP_SLOG(XP_SLOG_WARN, "test fault: queue pair forced into the error state (%s)",
              status_name(st));
      return;
    }
  }
}

} // namespace xp::stream::fault
