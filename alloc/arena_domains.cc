// Registration of arena units with protection domains, and the lock-free
// lookup the data path uses (alloc/domain.h).
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "alloc/arena_internal.h"
#include "alloc/heap.h"
#include "alloc/mem_stats.h"
#include "alloc/reg_cache.h"

namespace xp::alloc {
namespace arena {

Global g;

namespace {

constexpr uint64_t kValid = uint64_t{1} << 32;

std::atomic<uint64_t>& key_of(uint32_t head, int slot) {
  return g.lkeys[size_t{head} * kMaxDomains + static_cast<size_t>(slot)];
}
void*& mr_of(uint32_t head, int slot) {
  return g.mrs[size_t{head} * kMaxDomains + static_cast<size_t>(slot)];
}
void* unit_addr(uint32_t head) {
  return reinterpret_cast<void*>(g.base + (uintptr_t{head} << kChunkShift));
}

// Registers one unit with one domain; false when the registrar failed.
bool register_one(uint32_t head, uint32_t n, int slot) {
  uint32_t lkey = 0;
  void* handle = nullptr;
  MemStats& st = mem_stats();
  if (!g.domains[slot]->reg_local(unit_addr(head), n * kChunk, &lkey, &handle)) {
    st.registration_failures.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  mr_of(head, slot) = handle;
  key_of(head, slot).store(kValid | lkey, std::memory_order_release);
  st.registrations.fetch_add(1, std::memory_order_relaxed);
  if (!g.info[head].registered) {
    g.info[head].registered = true;
    st.arena_registered_bytes.fetch_add(n * kChunk, std::memory_order_relaxed);
  }
  return true;
}

void deregister_one(uint32_t head, int slot) {
  void*& mr = mr_of(head, slot);
  if (mr == nullptr) return;
  key_of(head, slot).store(0, std::memory_order_release);
  g.domains[slot]->dereg(mr);
  mr = nullptr;
  mem_stats().registrations.fetch_sub(1, std::memory_order_relaxed);
}

void unit_unregistered(uint32_t head, uint32_t n) {
  if (!g.info[head].registered) return;
  g.info[head].registered = false;
  mem_stats().arena_registered_bytes.fetch_sub(n * kChunk, std::memory_order_relaxed);
}

bool any_domain() {
  for (DomainRegistrar* d : g.domains)
    if (d != nullptr) return true;
  return false;
}

// The unit holding [p, p+len) when it is a class chunk or a large group in
// use, else kNil.  Callers own the memory, so the unit cannot change.
uint32_t unit_of(const void* p, size_t len) {
  if (len == 0 || !contains(p)) return kNil;
  uintptr_t off = reinterpret_cast<uintptr_t>(p) - g.base;
  if (len > g_span.load(std::memory_order_relaxed) - off) return kNil;
  uint32_t idx = static_cast<uint32_t>(off >> kChunkShift);
  uint32_t last = static_cast<uint32_t>((off + len - 1) >> kChunkShift);
  const ChunkInfo& c = g.info[idx];
  uint32_t head = c.state == kLargeTail ? c.group : idx;
  uint8_t s = g.info[head].state;
  if (s != kClass && s != kLarge && s != kRun) return kNil;
  if (last >= head + g.info[head].group) return kNil;
  return head;
}

// Calls f(head, n) for every committed unit.
template <typename F> void for_each_unit(F f) {
  for (uint32_t i = 0; i < g.high; ++i) {
    uint8_t s = g.info[i].state;
    if (s == kEmpty || s == kClass || s == kRun || s == kLarge || s == kLargeIdle)
      f(i, g.info[i].group);
  }
}

} // namespace

void deregister_unit(uint32_t head, uint32_t n) {
  for (int s = 0; s < kMaxDomains; ++s)
    if (g.domains[s] != nullptr) deregister_one(head, s);
  unit_unregistered(head, n);
}

void release_unit(uint32_t head, uint32_t n) {
  // Deregister first: pages are only returned once nothing pins them.
  deregister_unit(head, n);
  ::syscall(SYS_mmap, unit_addr(head), n * kChunk, PROT_NONE,
            MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  dirty_sub(g.info[head].dirty);
  for (uint32_t i = head; i < head + n; ++i)
    g.info[i] = ChunkInfo{};
  mem_stats().arena_committed_bytes.fetch_sub(n * kChunk, std::memory_order_relaxed);
}

void forget_registrations() {
  if (g.info != nullptr) {
    for_each_unit([](uint32_t head, uint32_t n) {
      for (int s = 0; s < kMaxDomains; ++s) {
        key_of(head, s).store(0, std::memory_order_relaxed);
        mr_of(head, s) = nullptr;
      }
      unit_unregistered(head, n);
    });
  }
  for (DomainRegistrar*& d : g.domains)
    d = nullptr;
  mem_stats().registrations.store(0, std::memory_order_relaxed);
  mem_stats().domains.store(0, std::memory_order_relaxed);
}

} // namespace arena

using namespace arena;

int attach_domain(DomainRegistrar* r) {
  if (r == nullptr || !heap::hook_enabled()) return kNoDomain;
  pthread_mutex_lock(&g.mu);
  int slot = kNoDomain;
  for (int s = 0; s < kMaxDomains && slot == kNoDomain; ++s)
    if (g.domains[s] == nullptr) slot = s;
  if (slot != kNoDomain) {
    __atomic_store_n(&g.domains[slot], r, __ATOMIC_RELEASE);
    mem_stats().domains.fetch_add(1, std::memory_order_relaxed);
  }
  pthread_mutex_unlock(&g.mu);
  return slot;
}

void detach_domain(int slot) {
  if (slot < 0 || slot >= kMaxDomains) return;
  // Cache entries first (they take their own lock and call the registrar).
  reg_cache::drop_domain(slot);
  pthread_mutex_lock(&g.mu);
  if (g.domains[slot] != nullptr) {
    ColdScope cold;
    if (g.info != nullptr) {
      for_each_unit([slot](uint32_t head, uint32_t) { deregister_one(head, slot); });
    }
    __atomic_store_n(&g.domains[slot], nullptr, __ATOMIC_RELEASE);
    mem_stats().domains.fetch_sub(1, std::memory_order_relaxed);
    if (!any_domain() && g.info != nullptr)
      for_each_unit([](uint32_t head, uint32_t n) { unit_unregistered(head, n); });
  }
  pthread_mutex_unlock(&g.mu);
}

namespace arena {
DomainRegistrar* domain_registrar(int slot) {
  if (slot < 0 || slot >= kMaxDomains) return nullptr;
  return __atomic_load_n(&g.domains[slot], __ATOMIC_ACQUIRE);
}
} // namespace arena

bool lookup_local(const void* p, size_t len, int slot, uint32_t* lkey) {
  if (slot < 0 || slot >= kMaxDomains) return false;
  uint32_t head = unit_of(p, len);
  if (head == kNil) return false;
  uint64_t v = key_of(head, slot).load(std::memory_order_acquire);
  if ((v & kValid) == 0) return false;
  *lkey = static_cast<uint32_t>(v);
  return true;
}

bool prepare_local(const void* p, size_t len, int slot) {
  if (slot < 0 || slot >= kMaxDomains) return false;
  uint32_t head = unit_of(p, len);
  if (head == kNil) return false;
  pthread_mutex_lock(&g.mu);
  bool ok = (key_of(head, slot).load(std::memory_order_relaxed) & kValid) != 0;
  if (!ok && g.domains[slot] != nullptr) {
    ColdScope cold;
    uint32_t n = g.info[head].group;
    // Pinned pages are resident anyway: let them be huge pages.
    ::syscall(SYS_madvise, unit_addr(head), n * kChunk, MADV_HUGEPAGE);
    ok = register_one(head, n, slot);
  }
  pthread_mutex_unlock(&g.mu);
  return ok;
}

} // namespace xp::alloc
