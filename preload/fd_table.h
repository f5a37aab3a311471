// fd number -> SocketRecord, for any fd number (0 .. 2^31-1).
// A three-level radix tree whose pages are allocated on first use, so memory
// follows the fds actually tracked, never RLIMIT_NOFILE.  Readers take no lock
// (a signal handler may call close()/write()); writers publish with CAS.
#pragma once
#include <atomic>
#include <cstdint>

#include "common/switches.h"
#include "preload/socket_record.h"

namespace xp {

// Allocates and recycles SocketRecords (lock-free free list).
class SocketPool {
public:
  constexpr SocketPool() = default;
  constexpr explicit SocketPool(void (*recycle_hook)(SocketRecord*)) : on_recycle(recycle_hook) {}
  SocketRecord* alloc();            // refs == 1 on return; null when exhausted
  void release(SocketRecord* r);    // drop one reference; recycles at zero
  SocketRecord* at(uint32_t index); // null if that chunk was never allocated
  // Called with the record just before it is recycled (stats row release).
  void (*on_recycle)(SocketRecord*) = nullptr;
  uint64_t live() const { return live_.load(std::memory_order_relaxed); }

private:
  std::atomic<SocketRecord*> chunks_[sw::kSocketMaxChunks] = {};
  std::atomic<uint64_t> free_head_{0}; // (tag << 32) | (index + 1), 0 = empty
  std::atomic<uint32_t> next_unused_{0};
  std::atomic<uint64_t> live_{0};
};

// A counted reference to a record; releases on destruction.
class SocketRef {
public:
  SocketRef() = default;
  SocketRef(SocketPool* pool, SocketRecord* r) : pool_(pool), r_(r) {}
  SocketRef(const SocketRef&) = delete;
  SocketRef& operator=(const SocketRef&) = delete;
  SocketRef(SocketRef&& o) noexcept : pool_(o.pool_), r_(o.r_) { o.r_ = nullptr; }
  SocketRef& operator=(SocketRef&& o) noexcept {
    if (this != &o) {
      if (r_) pool_->release(r_);
      pool_ = o.pool_;
      r_ = o.r_;
      o.r_ = nullptr;
    }
    return *this;
  }
  ~SocketRef() {
    if (r_) pool_->release(r_);
  }
  explicit operator bool() const { return r_ != nullptr; }
  SocketRecord* operator->() const { return r_; }
  SocketRecord& operator*() const { return *r_; }
  SocketRecord* get() const { return r_; }

private:
  SocketPool* pool_ = nullptr;
  SocketRecord* r_ = nullptr;
};

class FdTable {
public:
  constexpr explicit FdTable(SocketPool* pool) : pool_(pool) {}
  // No pool yet: set_pool() before the first install.  A global table
  // that names its pool in its initialiser gets a load-time relocation,
  // a page of it written in every process, socket or not.
  constexpr FdTable() = default;
  void set_pool(SocketPool* pool) { pool_.store(pool, std::memory_order_release); }
  // Lock-free lookup; empty ref when fd is not tracked (or out of range).
  SocketRef get(int fd);
  // Lookup without taking a reference: the record may be recycled for
  // another fd at any moment (its memory stays a SocketRecord), so callers
  // may only do what is harmless then (statistics).  Costs three loads.
  SocketRecord* peek(int fd) const {
    if (fd < 0) return nullptr;
    uint32_t u = static_cast<uint32_t>(fd);
    Mid* mid = top_[u >> (sw::kFdLeafBits + sw::kFdMidBits)].load(std::memory_order_acquire);
    if (mid == nullptr) return nullptr;
    Leaf* leaf =
        mid[(u >> sw::kFdLeafBits) & ((1u << sw::kFdMidBits) - 1)].load(std::memory_order_acquire);
    if (leaf == nullptr) return nullptr;
    return leaf[u & ((1u << sw::kFdLeafBits) - 1)].load(std::memory_order_acquire);
  }
  // Puts r (whose table reference the caller hands over) at fd; a record that
  // was there is released.  Returns false if fd is out of range or memory for
  // the page could not be had (r is then released).
  bool install(int fd, SocketRecord* r);
  // Forgets fd; returns whether a record was there.
  bool remove(int fd);
  // Cheap check used on hot paths: has anything ever been tracked?
  bool empty() const { return !any_.load(std::memory_order_relaxed); }
  // Calls fn(fd) for every tracked fd in [lo, hi] (close_range, fork).
  template <typename Fn> void for_each_in(int lo, int hi, Fn fn);
  SocketPool* pool() const { return pool_.load(std::memory_order_relaxed); }

private:
  using Leaf = std::atomic<SocketRecord*>;
  using Mid = std::atomic<Leaf*>;
  std::atomic<SocketRecord*>* slot(int fd, bool create);

  std::atomic<SocketPool*> pool_{nullptr};
  std::atomic<Mid*> top_[1u << sw::kFdTopBits] = {};
  std::atomic<bool> any_{false};
};

template <typename Fn> void FdTable::for_each_in(int lo, int hi, Fn fn) {
  if (lo < 0) lo = 0;
  for (int64_t fd = lo; fd <= hi; ++fd) {
    uint32_t u = static_cast<uint32_t>(fd);
    Mid* mid = top_[u >> (sw::kFdLeafBits + sw::kFdMidBits)].load(std::memory_order_acquire);
    if (mid == nullptr) { // skip the whole absent middle page
      fd |= (int64_t{1} << (sw::kFdLeafBits + sw::kFdMidBits)) - 1;
      continue;
    }
    Leaf* leaf =
        mid[(u >> sw::kFdLeafBits) & ((1u << sw::kFdMidBits) - 1)].load(std::memory_order_acquire);
    if (leaf == nullptr) {
      fd |= (int64_t{1} << sw::kFdLeafBits) - 1;
      continue;
    }
    if (leaf[u & ((1u << sw::kFdLeafBits) - 1)].load(std::memory_order_acquire) != nullptr)
      fn(static_cast<int>(fd));
  }
}

} // namespace xp
