#include "stream/bind_failures.h"

#include <cstring>

namespace xp::stream {

void BindFailures::note(const uint8_t addr[4], uint64_t now_ms) {
  uint32_t a;
  memcpy(&a, addr, 4);
  std::lock_guard<std::mutex> l(mu_);
  Slot& s = slots_[index(a)];
  if (s.addr != a || now_ms - s.start_ms >= kWindowMs) {
    s.addr = a;
    s.count = 0;
    s.start_ms = now_ms;
  }
  ++s.count;
}

bool BindFailures::blocked(const uint8_t addr[4], uint64_t now_ms) const {
  uint32_t a;
  memcpy(&a, addr, 4);
  std::lock_guard<std::mutex> l(mu_);
  const Slot& s = slots_[index(a)];
  return s.addr == a && s.count >= kLimit && now_ms - s.start_ms < kWindowMs;
}

} // namespace xp::stream
