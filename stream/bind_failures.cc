#include "stream/bind_failures.h"

#include <cstring>
#include <ctime>
#include <sys/random.h>

#include "recover/siphash.h"

namespace xp::stream {

BindFailures::BindFailures() {
  if (getrandom(key_, sizeof key_, 0) != static_cast<ssize_t>(sizeof key_)) {
    timespec t{};
    clock_gettime(CLOCK_MONOTONIC, &t);
    memcpy(key_, &t, sizeof t < sizeof key_ ? sizeof t : sizeof key_);
  }
}

namespace {

// What counts as one requester: an IPv4 address, an IPv6 /64.
recover::IpAddr counted(const recover::IpAddr& a) {
  recover::IpAddr r = a;
  if (r.family == 6) memset(r.b + 8, 0, 8);
  return r;
}

} // namespace

uint32_t BindFailures::index(const recover::IpAddr& addr) const {
  uint8_t in[17];
  in[0] = addr.family;
  memcpy(in + 1, addr.b, 16);
  return static_cast<uint32_t>(recover::siphash24_64(key_, in, sizeof in)) % kSlots;
}

const BindFailures::Slot* BindFailures::find(const recover::IpAddr& addr, uint64_t now_ms) const {
  const uint32_t i = index(addr);
  for (uint32_t j : {i, i ^ 1}) {
    const Slot& s = slots_[j];
    if (s.count > 0 && s.addr == addr && now_ms - s.start_ms < kWindowMs) return &s;
  }
  return nullptr;
}

void BindFailures::note(const recover::IpAddr& addr, uint64_t now_ms) {
  const recover::IpAddr a = counted(addr);
  std::lock_guard<std::mutex> l(mu_);
  if (Slot* s = const_cast<Slot*>(find(a, now_ms))) {
    ++s->count;
    return;
  }
  // A free slot, or one whose window ended; never one that still counts.
  const uint32_t i = index(a);
  for (uint32_t j : {i, i ^ 1}) {
    Slot& s = slots_[j];
    if (s.count == 0 || now_ms - s.start_ms >= kWindowMs) {
      s.addr = a;
      s.count = 1;
      s.start_ms = now_ms;
      return;
    }
  }
}

bool BindFailures::blocked(const recover::IpAddr& addr, uint64_t now_ms) const {
  const recover::IpAddr a = counted(addr);
  std::lock_guard<std::mutex> l(mu_);
  const Slot* s = find(a, now_ms);
  return s != nullptr && s->count >= kLimit;
}

} // namespace xp::stream
