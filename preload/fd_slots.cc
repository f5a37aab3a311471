#include "preload/fd_slots.h"

#include <sys/mman.h>

namespace xp::epoll {
namespace {

// Straight from mmap, zero-filled (FdSlot's all-zero state is its default):
// no malloc, usable from any wrapper.
template <typename T> T* page_alloc(size_t count) {
  void* p =
      mmap(nullptr, sizeof(T) * count, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<T*>(p);
}

} // namespace

// Constant-initialised: usable before any constructor ran.
constinit FdSlots g_slots;

FdSlot* FdSlots::get(int fd) {
  if (fd < 0) return nullptr;
  uint32_t u = static_cast<uint32_t>(fd);
  auto& top = top_[u >> (sw::kFdLeafBits + sw::kFdMidBits)];
  Mid* mid = top.load(std::memory_order_acquire);
  if (mid == nullptr) {
    Mid* fresh = page_alloc<Mid>(size_t{1} << sw::kFdMidBits);
    if (fresh == nullptr) return nullptr;
    if (top.compare_exchange_strong(mid, fresh, std::memory_order_acq_rel))
      mid = fresh;
    else
      munmap(fresh, sizeof(Mid) << sw::kFdMidBits);
  }
  auto& mslot = mid[(u >> sw::kFdLeafBits) & ((1u << sw::kFdMidBits) - 1)];
  FdSlot* leaf = mslot.load(std::memory_order_acquire);
  if (leaf == nullptr) {
    FdSlot* fresh = page_alloc<FdSlot>(size_t{1} << sw::kFdLeafBits);
    if (fresh == nullptr) return nullptr;
    if (mslot.compare_exchange_strong(leaf, fresh, std::memory_order_acq_rel))
      leaf = fresh;
    else
      munmap(fresh, sizeof(FdSlot) << sw::kFdLeafBits);
  }
  return &leaf[u & ((1u << sw::kFdLeafBits) - 1)];
}

} // namespace xp::epoll
