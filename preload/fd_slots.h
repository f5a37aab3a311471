// What the readiness layer knows per fd number, besides the socket table:
// epoll sets (their state), xpress's own internal fds, and how many epoll
// registrations of tracked sockets name the number.  The same lazily
// allocated three-level radix as the fd table (any fd number, memory follows
// the fds in use); readers take no lock, so epoll_wait on an epoll fd that
// never saw a tracked socket costs this one lookup.
#pragma once
#include <atomic>
#include <cstdint>

#include "common/switches.h"

namespace xp::epoll {

class EpollState;

struct FdSlot {
  std::atomic<EpollState*> ep{nullptr}; // an epoll set with state (one reference)
  std::atomic<uint32_t> flags{0};       // kSlotEpoll, kSlotInternal
  std::atomic<uint32_t> nregs{0};       // registrations of tracked sockets under this number
  std::atomic<uint32_t> raw_waiters{0}; // epoll_wait calls passed straight to the kernel
};
constexpr uint32_t kSlotEpoll = 1;    // made by epoll_create*/dup of one (state or not)
constexpr uint32_t kSlotInternal = 2; // one of xpress's own fds

class FdSlots {
public:
  // No allocation: null when the number's page was never needed.
  FdSlot* find(int fd) const {
    if (fd < 0) return nullptr;
    uint32_t u = static_cast<uint32_t>(fd);
    Mid* mid = top_[u >> (sw::kFdLeafBits + sw::kFdMidBits)].load(std::memory_order_acquire);
    if (mid == nullptr) return nullptr;
    FdSlot* leaf =
        mid[(u >> sw::kFdLeafBits) & ((1u << sw::kFdMidBits) - 1)].load(std::memory_order_acquire);
    if (leaf == nullptr) return nullptr;
    return &leaf[u & ((1u << sw::kFdLeafBits) - 1)];
  }
  // Allocates the page if needed; null if out of range or out of memory.
  FdSlot* get(int fd);
  // fn(fd, slot) for every slot in [lo, hi] with something in it.
  template <typename Fn> void for_each_in(int lo, int hi, Fn fn);

private:
  using Mid = std::atomic<FdSlot*>;
  std::atomic<Mid*> top_[1u << sw::kFdTopBits] = {};
};

extern FdSlots g_slots;

template <typename Fn> void FdSlots::for_each_in(int lo, int hi, Fn fn) {
  if (lo < 0) lo = 0;
  for (int64_t fd = lo; fd <= hi; ++fd) {
    uint32_t u = static_cast<uint32_t>(fd);
    Mid* mid = top_[u >> (sw::kFdLeafBits + sw::kFdMidBits)].load(std::memory_order_acquire);
    if (mid == nullptr) {
      fd |= (int64_t{1} << (sw::kFdLeafBits + sw::kFdMidBits)) - 1;
      continue;
    }
    FdSlot* leaf =
        mid[(u >> sw::kFdLeafBits) & ((1u << sw::kFdMidBits) - 1)].load(std::memory_order_acquire);
    if (leaf == nullptr) {
      fd |= (int64_t{1} << sw::kFdLeafBits) - 1;
      continue;
    }
    FdSlot& s = leaf[u & ((1u << sw::kFdLeafBits) - 1)];
    if (s.ep.load(std::memory_order_acquire) != nullptr ||
        s.flags.load(std::memory_order_acquire) != 0 ||
        s.nregs.load(std::memory_order_acquire) != 0)
      fn(static_cast<int>(fd), s);
  }
}

} // namespace xp::epoll
