#include "alloc/reg_cache.h"
#include "common/fork_parts.h"

#include <cstring>
#include <fcntl.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "alloc/arena.h"
#include "alloc/arena_internal.h"
#include "alloc/domain.h"
#include "alloc/heap.h"
#include "alloc/mem_stats.h"

namespace xp::alloc::reg_cache {

std::atomic<uint32_t> g_active{0};

namespace {

constexpr uint32_t kCapacity = 256;
constexpr size_t kPage = 4096;

struct Entry {
  uintptr_t start, end; // page-rounded
  void* mr;             // the registrar's handle (null: already deregistered)
  uint64_t used;        // LRU clock
  uint32_t lkey, refs;
  int slot;
  bool occupied; // the slot of the table is taken
  bool live;     // findable (false: invalidated, waiting for its last put)
};

struct State {
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  Entry e[kCapacity] = {};
  uint32_t max_entries = 128;
  size_t max_bytes = size_t{256} << 20; // pinned by the cache at most
  uint32_t count = 0;                   // occupied entries
  size_t bytes = 0;                     // their registered bytes
  uint64_t clock = 0;
  uint64_t seq = 0;       // bumped by every invalidation
  uint32_t in_flight = 0; // invalidations between begin and end
};
State s;

// Marked before the lock is first taken: the fork handlers then take it
// (common/fork_parts.h).
void lock() {
  fork_parts::mark(fork_parts::kAlloc);
  pthread_mutex_lock(&s.mu);
}

// Deregistrations collected under the lock, done after it: the registrar
// (rdma-core) may call munmap, whose hook takes the lock again.
struct Pending {
  void* mr[kCapacity + 1];
  int slot[kCapacity + 1];
  uint32_t n = 0;
  void add(void* m, int sl) {
    if (m == nullptr) return;
    mr[n] = m;
    slot[n++] = sl;
  }
  void run() {
    for (uint32_t i = 0; i < n; ++i)
      if (DomainRegistrar* r = arena::domain_registrar(slot[i])) r->dereg(mr[i]);
  }
};

void update_gauges() {
  mem_stats().cache_entries.store(s.count, std::memory_order_relaxed);
  mem_stats().cache_bytes.store(s.bytes, std::memory_order_relaxed);
}

void free_entry(Entry& e, Pending* p) {
  p->add(e.mr, e.slot);
  s.bytes -= e.end - e.start;
  --s.count;
  e = Entry{};
  g_active.fetch_sub(1, std::memory_order_release);
}

// Drops (or, when referenced, hides) every live entry matching.
template <typename Match> void drop_if(Match m, Pending* p, bool count_invalidation) {
  for (Entry& e : s.e) {
    if (!e.occupied || !e.live || !m(e)) continue;
    e.live = false;
    if (count_invalidation) mem_stats().cache_invalidations.fetch_add(1, std::memory_order_relaxed);
    if (e.refs == 0) free_entry(e, p);
  }
}

// Start of the brk heap (field 47 of /proc/self/stat), read once; 0 unknown.
uintptr_t brk_start() {
  static std::atomic<uintptr_t> cached{1};
  uintptr_t v = cached.load(std::memory_order_relaxed);
  if (v != 1) return v;
  v = 0;
  char buf[1024];
  int fd =
      static_cast<int>(::syscall(SYS_openat, AT_FDCWD, "/proc/self/stat", O_RDONLY | O_CLOEXEC));
  if (fd >= 0) {
    long n = ::syscall(SYS_read, fd, buf, sizeof buf - 1);
    ::syscall(SYS_close, fd);
    if (n > 0) {
      buf[n] = '\0';
      const char* p = strrchr(buf, ')');
      for (int field = 2; p != nullptr && field < 47; ++field)
        p = strchr(p + 1, ' ');
      if (p != nullptr) v = strtoull(p + 1, nullptr, 10);
    }
  }
  cached.store(v, std::memory_order_relaxed);
  return v;
}

bool in_brk_heap(uintptr_t start, uintptr_t end) {
  uintptr_t lo = brk_start();
  uintptr_t hi = static_cast<uintptr_t>(::syscall(SYS_brk, 0));
  return lo != 0 && start < hi && end > lo;
}

// Room for one more entry of `bytes`: evicts least recently used
// unreferenced entries.  False when everything left is referenced.
bool make_room(size_t bytes, Pending* p) {
  while (s.count >= s.max_entries || s.count >= kCapacity || s.bytes + bytes > s.max_bytes) {
    Entry* lru = nullptr;
    for (Entry& e : s.e)
      if (e.occupied && e.refs == 0 && (lru == nullptr || e.used < lru->used)) lru = &e;
    if (lru == nullptr) return false;
    mem_stats().cache_evictions.fetch_add(1, std::memory_order_relaxed);
    free_entry(*lru, p);
  }
  return true;
}

} // namespace

bool get(const void* addr, size_t len, int slot, Ref* out) {
  if (len == 0 || slot < 0 || slot >= kMaxDomains || !heap::hook_enabled()) return false;
  uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  if (arena::contains(addr) || a + len < a) return false;
  uintptr_t start = a & ~(kPage - 1);
  uintptr_t end = (a + len + kPage - 1) & ~(kPage - 1);
  MemStats& st = mem_stats();

  lock();
  for (uint32_t i = 0; i < kCapacity; ++i) {
    Entry& e = s.e[i];
    if (e.occupied && e.live && e.slot == slot && e.start <= a && a + len <= e.end) {
      ++e.refs;
      e.used = ++s.clock;
      *out = Ref{e.lkey, i, nullptr, slot};
      pthread_mutex_unlock(&s.mu);
      st.cache_hits.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
  }
  uint64_t seq = s.seq;
  g_active.fetch_add(1, std::memory_order_acq_rel); // hooks must look from now on
  pthread_mutex_unlock(&s.mu);
  st.cache_misses.fetch_add(1, std::memory_order_relaxed);

  DomainRegistrar* r = arena::domain_registrar(slot);
  uint32_t lkey = 0;
  void* mr = nullptr;
  if (r == nullptr || in_brk_heap(start, end) ||
      !r->reg_local(reinterpret_cast<void*>(start), end - start, &lkey, &mr)) {
    g_active.fetch_sub(1, std::memory_order_release);
    return false;
  }

  Pending evicted;
  lock();
  // An invalidation since the lookup may have changed what we registered:
  // use it for this request only.
  bool cache = s.seq == seq && s.in_flight == 0 && make_room(end - start, &evicted);
  uint32_t idx = kCapacity;
  for (uint32_t i = 0; cache && i < kCapacity && idx == kCapacity; ++i)
    if (!s.e[i].occupied) idx = i;
  if (cache && idx != kCapacity) {
    s.e[idx] = Entry{start, end, mr, ++s.clock, lkey, 1, slot, true, true};
    ++s.count;
    s.bytes += end - start;
    *out = Ref{lkey, idx, nullptr, slot}; // the entry keeps g_active raised
  } else {
    *out = Ref{lkey, 0, mr, slot};
    g_active.fetch_sub(1, std::memory_order_release);
  }
  update_gauges();
  pthread_mutex_unlock(&s.mu);
  evicted.run();
  return true;
}

void put(const Ref& r) {
  if (r.uncached != nullptr) {
    if (DomainRegistrar* reg = arena::domain_registrar(r.slot)) reg->dereg(r.uncached);
    return;
  }
  if (r.entry >= kCapacity) return;
  Pending p;
  lock();
  Entry& e = s.e[r.entry];
  if (e.occupied && e.refs > 0 && --e.refs == 0 && !e.live) free_entry(e, &p);
  update_gauges();
  pthread_mutex_unlock(&s.mu);
  p.run();
}

void invalidate_begin(const void* addr, size_t len) {
  uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  uintptr_t b = a + len < a ? UINTPTR_MAX : a + len;
  Pending p;
  lock();
  ++s.seq;
  ++s.in_flight;
  drop_if([a, b](const Entry& e) { return e.start < b && a < e.end; }, &p, true);
  update_gauges();
  pthread_mutex_unlock(&s.mu);
  p.run();
}

void invalidate_end() {
  lock();
  --s.in_flight;
  ++s.seq;
  pthread_mutex_unlock(&s.mu);
}

void invalidate_from(const void* addr) {
  if (!active()) return;
  invalidate_begin(addr, UINTPTR_MAX - reinterpret_cast<uintptr_t>(addr));
  invalidate_end();
}

void drop_domain(int slot) {
  Pending p;
  lock();
  for (Entry& e : s.e) {
    if (!e.occupied || e.slot != slot) continue;
    e.live = false;
    if (e.refs == 0) {
      free_entry(e, &p);
    } else {
      p.add(e.mr, e.slot); // the domain goes away: its keys die with it
      e.mr = nullptr;
    }
  }
  update_gauges();
  pthread_mutex_unlock(&s.mu);
  p.run();
}

void set_limits(uint32_t max_entries, size_t max_bytes) {
  lock();
  s.max_entries = max_entries < kCapacity ? max_entries : kCapacity;
  s.max_bytes = max_bytes;
  pthread_mutex_unlock(&s.mu);
}

size_t max_bytes() {
  pthread_mutex_lock(&s.mu);
  size_t n = s.max_bytes;
  pthread_mutex_unlock(&s.mu);
  return n;
}

void before_fork() {
  pthread_mutex_lock(&s.mu);
}

void after_fork_parent() {
  pthread_mutex_unlock(&s.mu);
}

void after_fork_child() {
  pthread_mutex_init(&s.mu, nullptr);
  for (Entry& e : s.e)
    e = Entry{};
  s.count = 0;
  s.bytes = 0;
  s.in_flight = 0;
  g_active.store(0, std::memory_order_relaxed);
  update_gauges();
}

} // namespace xp::alloc::reg_cache
