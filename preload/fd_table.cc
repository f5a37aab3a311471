#include "preload/fd_table.h"

#include <new>
#include <sys/mman.h>

namespace xp {
namespace {

// Pages come straight from mmap: no malloc (which a later issue hooks), and
// callable from any context.  Zero-filled by the kernel.
void* page_alloc(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

constexpr uint64_t pack(uint32_t tag, uint32_t idx_plus_1) {
  return (uint64_t{tag} << 32) | idx_plus_1;
}

} // namespace

SocketRecord* SocketPool::at(uint32_t index) {
  SocketRecord* chunk = chunks_[index / sw::kSocketChunkRecords].load(std::memory_order_acquire);
  return chunk ? &chunk[index % sw::kSocketChunkRecords] : nullptr;
}

SocketRecord* SocketPool::alloc() {
  // Reuse a recycled record first (Treiber stack; the tag defeats ABA).
  uint64_t head = free_head_.load(std::memory_order_acquire);
  while (static_cast<uint32_t>(head) != 0) {
    SocketRecord* r = at(static_cast<uint32_t>(head) - 1);
    uint64_t next =
        pack(static_cast<uint32_t>(head >> 32) + 1, r->next_free.load(std::memory_order_relaxed));
    if (free_head_.compare_exchange_weak(head, next, std::memory_order_acq_rel)) {
      r->refs.store(1, std::memory_order_relaxed);
      live_.fetch_add(1, std::memory_order_relaxed);
      return r;
    }
  }
  uint32_t idx = next_unused_.fetch_add(1, std::memory_order_relaxed);
  if (idx >= sw::kSocketChunkRecords * sw::kSocketMaxChunks) return nullptr;
  uint32_t c = idx / sw::kSocketChunkRecords;
  SocketRecord* chunk = chunks_[c].load(std::memory_order_acquire);
  if (chunk == nullptr) {
    void* mem = page_alloc(sizeof(SocketRecord) * sw::kSocketChunkRecords);
    if (mem == nullptr) return nullptr;
    auto* fresh = static_cast<SocketRecord*>(mem);
    for (uint32_t i = 0; i < sw::kSocketChunkRecords; ++i) {
      new (&fresh[i]) SocketRecord();
      fresh[i].index = c * sw::kSocketChunkRecords + i;
    }
    SocketRecord* expected = nullptr;
    if (chunks_[c].compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) {
      chunk = fresh;
    } else {
      munmap(mem, sizeof(SocketRecord) * sw::kSocketChunkRecords);
      chunk = expected;
    }
  }
  SocketRecord* r = &chunk[idx % sw::kSocketChunkRecords];
  r->refs.store(1, std::memory_order_relaxed);
  live_.fetch_add(1, std::memory_order_relaxed);
  return r;
}

void SocketPool::release(SocketRecord* r) {
  if (r->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (on_recycle) on_recycle(r);
  // Last reference: reset and push on the free list.  The memory stays a
  // SocketRecord forever, so late readers only see a changed refs count.
  uint32_t index = r->index;
  r->fd = -1;
  r->domain = r->type = 0;
  r->role = Role::any;
  r->mode = Mode::tcp;
  r->reason = Reason::none;
  r->listener = r->counted = false;
  r->slot = nullptr;
  live_.fetch_sub(1, std::memory_order_relaxed);
  uint64_t head = free_head_.load(std::memory_order_acquire);
  do {
    r->next_free.store(static_cast<uint32_t>(head), std::memory_order_relaxed);
  } while (!free_head_.compare_exchange_weak(
      head, pack(static_cast<uint32_t>(head >> 32) + 1, index + 1), std::memory_order_acq_rel));
}

std::atomic<SocketRecord*>* FdTable::slot(int fd, bool create) {
  if (fd < 0) return nullptr;
  uint32_t u = static_cast<uint32_t>(fd);
  auto& top = top_[u >> (sw::kFdLeafBits + sw::kFdMidBits)];
  Mid* mid = top.load(std::memory_order_acquire);
  if (mid == nullptr) {
    if (!create) return nullptr;
    auto* fresh = static_cast<Mid*>(page_alloc(sizeof(Mid) << sw::kFdMidBits));
    if (fresh == nullptr) return nullptr;
    if (top.compare_exchange_strong(mid, fresh, std::memory_order_acq_rel)) {
      mid = fresh;
    } else {
      munmap(fresh, sizeof(Mid) << sw::kFdMidBits);
    }
  }
  auto& mslot = mid[(u >> sw::kFdLeafBits) & ((1u << sw::kFdMidBits) - 1)];
  Leaf* leaf = mslot.load(std::memory_order_acquire);
  if (leaf == nullptr) {
    if (!create) return nullptr;
    auto* fresh = static_cast<Leaf*>(page_alloc(sizeof(Leaf) << sw::kFdLeafBits));
    if (fresh == nullptr) return nullptr;
    if (mslot.compare_exchange_strong(leaf, fresh, std::memory_order_acq_rel)) {
      leaf = fresh;
    } else {
      munmap(fresh, sizeof(Leaf) << sw::kFdLeafBits);
    }
  }
  return &leaf[u & ((1u << sw::kFdLeafBits) - 1)];
}

SocketRef FdTable::get(int fd) {
  std::atomic<SocketRecord*>* s = slot(fd, false);
  if (s == nullptr) return {};
  while (true) {
    SocketRecord* r = s->load(std::memory_order_acquire);
    if (r == nullptr) return {};
    // Take a reference only while the record is alive (refs > 0) ...
    uint32_t refs = r->refs.load(std::memory_order_relaxed);
    bool got = false;
    while (refs != 0) {
      if (r->refs.compare_exchange_weak(refs, refs + 1, std::memory_order_acq_rel)) {
        got = true;
        break;
      }
    }
    if (!got) continue;
    // ... and keep it only if the entry still names it (not recycled for
    // another fd in between).
    if (s->load(std::memory_order_acquire) == r) return SocketRef(pool(), r);
    pool()->release(r);
  }
}

bool FdTable::install(int fd, SocketRecord* r) {
  std::atomic<SocketRecord*>* s = slot(fd, true);
  if (s == nullptr) {
    pool()->release(r);
    return false;
  }
  any_.store(true, std::memory_order_relaxed);
  SocketRecord* old = s->exchange(r, std::memory_order_acq_rel);
  if (old) pool()->release(old);
  return true;
}

bool FdTable::remove(int fd) {
  std::atomic<SocketRecord*>* s = slot(fd, false);
  if (s == nullptr) return false;
  SocketRecord* old = s->exchange(nullptr, std::memory_order_acq_rel);
  if (old == nullptr) return false;
  pool()->release(old);
  return true;
}

} // namespace xp
