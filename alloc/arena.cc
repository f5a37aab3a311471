#include "alloc/arena.h"
#include "common/fork_parts.h"

#include <cstring>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "alloc/arena_internal.h"
#include "alloc/mem_stats.h"

namespace xp::alloc::arena {

std::atomic<uintptr_t> g_base{0};
std::atomic<uintptr_t> g_span{0};
__attribute__((tls_model("initial-exec"))) thread_local int t_cold;
void (*g_test_after_take_chunk)(uint32_t idx) = nullptr;

namespace {

// Our own calls to mmap are raw system calls: the exported mmap
// family (preload/wrap_mem.cc) would resolve the real function with dlsym,
// which may allocate, from inside malloc.
void* sys_mmap(void* addr, size_t len, int prot, int flags) {
  long r = ::syscall(SYS_mmap, addr, len, prot, flags, -1, 0);
  return r < 0 && r > -4096 ? nullptr : reinterpret_cast<void*>(r);
}

constexpr size_t kThreadCacheBytes = 4 << 20; // per thread, all classes
constexpr size_t kClassCacheBytes = 1 << 20;  // per thread and class
constexpr uint32_t kMaxCacheBlocks = 16;

uint32_t blocks_per_chunk(int cls) {
  return static_cast<uint32_t>(kChunk / class_size(cls));
}
uint32_t cache_cap(int cls) {
  size_t n = kClassCacheBytes / class_size(cls);
  return n < 1 ? 1 : (n > kMaxCacheBlocks ? kMaxCacheBlocks : static_cast<uint32_t>(n));
}

struct ClassState {
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  List partial; // chunks with a free or never-carved block
};
ClassState g_classes[kClasses];

// Which threads registered for the exit flush.
pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
pthread_key_t g_key;

struct ThreadCache {
  void* head[kClasses];
  uint16_t count[kClasses];
  size_t bytes;
  int shard;     // 1 + the run shard this thread takes from, 0: none yet
  uint8_t state; // 0: exit flush not registered yet, 1: registered, 2: thread exiting
};
__attribute__((tls_model("initial-exec"))) thread_local ThreadCache t_cache;

void* block_addr(uint32_t idx, uint32_t n, int cls) {
  return reinterpret_cast<void*>(g.base + (uintptr_t{idx} << kChunkShift) + n * class_size(cls));
}
void* p_of(uint32_t idx) {
  return reinterpret_cast<void*>(g.base + (uintptr_t{idx} << kChunkShift));
}
uint32_t chunk_of(const void* p) {
  return static_cast<uint32_t>((reinterpret_cast<uintptr_t>(p) - g.base) >> kChunkShift);
}

// --- the global (chunk) level; callers hold g.mu --------------------------

// A committed run of n chunks (first fit in the reservation), or kNil.
// Backs [start, start+n) chunks, all kFree, with memory; false over the
// commit limit (the range then stays reserved).
bool commit(uint32_t start, uint32_t n) {
  void* addr = reinterpret_cast<void*>(g.base + (uintptr_t{start} << kChunkShift));
  size_t len = n * kChunk;
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED;
  void* got = nullptr;
  if (g.hugetlb) {
    got = sys_mmap(addr, len, PROT_READ | PROT_WRITE, flags | MAP_HUGETLB);
    if (got == nullptr) g.hugetlb = false; // none configured or left: do not retry
  }
  if (got == nullptr) got = sys_mmap(addr, len, PROT_READ | PROT_WRITE, flags);
  if (got == nullptr) {
    sys_mmap(addr, len, PROT_NONE, flags | MAP_NORESERVE);
    return false;
  }
  mem_stats().arena_committed_bytes.fetch_add(len, std::memory_order_relaxed);
  if (start + n > g.high) g.high = start + n;
  return true;
}

// The run of n empty chunks (committed, in the pool) with the most dirty
// pages (resident: no page faults when reused), kNil when there is none.
uint32_t find_empty_run(uint32_t n) {
  uint32_t run = 0, best = kNil;
  uint64_t dirty = 0, best_dirty = 0;
  for (uint32_t i = 0; i < g.high; ++i) {
    if (g.info[i].state != kEmpty) {
      run = 0;
      dirty = 0;
      continue;
    }
    dirty += g.info[i].dirty;
    if (++run > n) dirty -= g.info[i - n].dirty;
    if (run >= n && (best == kNil || dirty > best_dirty)) {
      best = i + 1 - n;
      best_dirty = dirty;
    }
  }
  return best;
}

// The first run of n chunks that are empty or reserved-only, or kNil.
uint32_t find_run(uint32_t n) {
  uint32_t run = 0, start = 0;
  for (uint32_t i = 0; i < g.nchunks && run < n; ++i) {
    uint8_t s = g.info[i].state;
    if (s != kEmpty && s != kFree) {
      run = 0;
      continue;
    }
    if (run++ == 0) start = i;
  }
  return run < n ? kNil : start;
}

// A unit of n contiguous chunks made of reserved-only chunks and chunks of
// the empty pool, committed and registered as one; kNil when the
// reservation has no such run.  Neighbouring empty chunks (e.g. a freed
// large group's) merge into one unit this way, and a run of empty chunks
// only is preferred: their pages are resident, new ones cost a page fault
// each on first touch.
uint32_t make_unit(uint32_t n) {
  uint32_t start = find_empty_run(n);
  if (start == kNil) start = find_run(n);
  if (start == kNil) return kNil;
  bool fresh = true;
  uint32_t resident = 0; // pages from the unit's start that may be resident
  for (uint32_t i = start; i < start + n;) {
    if (g.info[i].state == kEmpty) {
      list_remove(g.empty, i);
      g.retained_bytes -= kChunk;
      dirty_sub(g.info[i].dirty);
      if (g.info[i].dirty > 0) resident = (i - start) * kChunkPages + g.info[i].dirty;
      deregister_unit(i, 1);
      fresh = false;
      ++i;
      continue;
    }
    uint32_t j = i;
    while (j < start + n && g.info[j].state == kFree)
      ++j;
    if (!commit(i, j - i)) {
      // Put back what was taken so far: committed chunks join the pool.
      for (uint32_t k = start; k < i; ++k) {
        g.info[k] = ChunkInfo{};
        g.info[k].state = kEmpty;
        g.info[k].group = 1;
        list_push(g.empty, k);
        g.retained_bytes += kChunk;
      }
      return kNil;
    }
    for (uint32_t k = i; k < j; ++k)
      g.info[k].state = kLargeTail; // taken (set properly below)
    i = j;
  }
  for (uint32_t i = start; i < start + n; ++i) {
    g.info[i] = ChunkInfo{};
    g.info[i].state = kLargeTail;
    g.info[i].group = start;
  }
  g.info[start].group = n;
  g.info[start].fresh = fresh;
  g.info[start].dirty = resident; // see large_take
  return start;
}

// Gives back every retained chunk (the reservation is full or fragmented).
void release_retained() {
  while (g.empty.tail != kNil || g.idle_large.tail != kNil) {
    List& from = g.idle_large.tail != kNil ? g.idle_large : g.empty;
    uint32_t t = from.tail;
    list_remove(from, t);
    g.retained_bytes -= g.info[t].group * kChunk;
    release_unit(t, g.info[t].group);
  }
}

// Chunks [h, h+n), the former group of a large block whose first dirty
// pages were written, become empty chunks of the pool (lowest first, so
// that they are reused in address order).  The caller did the accounting
// of the dirty pages and deregistered the group.
void split_to_empty(uint32_t h, uint32_t n, uint32_t dirty) {
  constexpr uint32_t kChunkPages = kChunk / kPage;
  for (uint32_t i = h; i < h + n; ++i) {
    g.info[i] = ChunkInfo{};
    g.info[i].state = kEmpty;
    g.info[i].group = 1;
    g.info[i].dirty = dirty < kChunkPages ? dirty : kChunkPages;
    dirty -= g.info[i].dirty;
  }
  for (uint32_t i = h + n; i-- > h;)
    list_push(g.empty, i);
  g.retained_bytes += n * kChunk;
}

} // namespace

// One chunk for a size class or runs: from the empty pool, else split off
// an idle large group (its other chunks join the pool), else newly
// committed.  Its dirty pages stay counted: the caller decides.
uint32_t take_chunk() {
  if (g.empty.head == kNil && g.idle_large.head != kNil) {
    uint32_t h = g.idle_large.head;
    uint32_t n = g.info[h].group;
    list_remove(g.idle_large, h);
    g.retained_bytes -= n * kChunk;
    deregister_unit(h, n);
    split_to_empty(h, n, g.info[h].dirty); // already counted as dirty
  }
  uint32_t idx = g.empty.head;
  if (idx != kNil) {
    list_remove(g.empty, idx);
    g.retained_bytes -= kChunk;
    return idx;
  }
  idx = make_unit(1);
  if (idx == kNil && g.retained_bytes > 0) {
    release_retained();
    idx = make_unit(1);
  }
  return idx;
}

// Back to the pool (bounded, most recent reused first: a block freed and
// allocated again costs a pool round trip, not a commit and registration).
// Classes keep no empty chunks of their own: 29 classes each holding one
// would pin up to 116 MiB.
void pool_chunk(uint32_t idx) {
  ChunkInfo& ch = g.info[idx];
  ch.state = kEmpty;
  ch.fresh = false;
  list_push(g.empty, idx);
  g.retained_bytes += kChunk;
  trim_retained();
}

namespace {

// --- the class level; callers hold the class's lock -----------------------

bool chunk_full(const ChunkInfo& ch) {
  return ch.free == nullptr && ch.purged == nullptr && ch.bump == blocks_per_chunk(ch.cls);
}

void* class_take(int cls, bool* zeroed) {
  ClassState& cs = g_classes[cls];
  uint32_t idx = cs.partial.head;
  if (idx == kNil) {
    // The chunk's new state is set under g.mu: make_unit looks for empty
    // chunks by their state.
    pthread_mutex_lock(&g.mu);
    {
      ColdScope cold;
      idx = take_chunk();
      if (idx != kNil) {
        // The chunk is ours before g.mu goes: a chunk that still read
        // kEmpty would be taken again by make_unit's scan (found by the
        // multi-threaded churn test: two owners of one chunk).
        ChunkInfo& ch = g.info[idx];
        dirty_sub(ch.dirty); // in use again (as carved blocks)
        bool fresh = ch.fresh, registered = ch.registered;
        ch = ChunkInfo{};
        ch.state = kClass;
        ch.cls = static_cast<uint8_t>(cls);
        ch.group = 1;
        ch.fresh = fresh;
        ch.registered = registered;
      }
    }
    pthread_mutex_unlock(&g.mu);
    if (idx == kNil) return nullptr;
    if (auto hook = g_test_after_take_chunk) hook(idx);
    list_push(cs.partial, idx);
  }
  ChunkInfo& ch = g.info[idx];
  void* p;
  // Resident blocks first, then purged ones (a page fault per page).
  if (ch.free != nullptr) {
    p = ch.free;
    ch.free = *static_cast<void**>(p);
    uint32_t pages = static_cast<uint32_t>(class_size(cls) / kPage);
    ch.dirty -= pages;
    dirty_sub(pages);
    *zeroed = false;
  } else if (ch.purged != nullptr) {
    p = ch.purged;
    ch.purged = *static_cast<void**>(p);
    *zeroed = false;
  } else {
    p = block_addr(idx, ch.bump++, cls);
    *zeroed = ch.fresh;
  }
  ++ch.live;
  if (chunk_full(ch)) list_remove(cs.partial, idx);
  MemStats& st = mem_stats();
  in_use_add(class_size(cls));
  st.arena_allocs.fetch_add(1, std::memory_order_relaxed);
  return p;
}

void class_give(int cls, void* p) {
  ClassState& cs = g_classes[cls];
  uint32_t idx = chunk_of(p);
  ChunkInfo& ch = g.info[idx];
  bool was_full = chunk_full(ch);
  size_t sz = class_size(cls);
  // ch.registered is read without g.mu here: reclaim checks it again.  The
  // first page keeps the free-list link.
  if (!ch.registered && over_budget(sz) &&
      reclaim(idx, static_cast<char*>(p) + kPage, sz - kPage)) {
    *static_cast<void**>(p) = ch.purged;
    ch.purged = p;
  } else {
    *static_cast<void**>(p) = ch.free;
    ch.free = p;
    uint32_t pages = static_cast<uint32_t>(sz / kPage);
    ch.dirty += pages;
    dirty_add(pages);
  }
  --ch.live;
  if (was_full) list_push(cs.partial, idx);
  in_use_sub(sz);
  if (ch.live == 0) {
    list_remove(cs.partial, idx);
    pthread_mutex_lock(&g.mu);
    {
      ColdScope cold;
      pool_chunk(idx);
    }
    pthread_mutex_unlock(&g.mu);
  }
}

// --- large groups ---------------------------------------------------------

void* large_take(size_t size) {
  uint32_t n = static_cast<uint32_t>((size + kChunk - 1) >> kChunkShift);
  pthread_mutex_lock(&g.mu);
  ColdScope cold;
  uint32_t best = kNil;
  for (uint32_t i = g.idle_large.head; i != kNil; i = g.info[i].next) {
    uint32_t have = g.info[i].group;
    if (have >= n && have <= n + n / 4 && (best == kNil || have < g.info[best].group)) best = i;
  }
  if (best != kNil) {
    list_remove(g.idle_large, best);
    g.retained_bytes -= g.info[best].group * kChunk;
    dirty_sub(g.info[best].dirty); // kept as the resident pages (below)
  } else {
    best = make_unit(n);
    if (best == kNil && g.retained_bytes > 0) {
      release_retained();
      best = make_unit(n);
    }
  }
  void* p = nullptr;
  if (best != kNil) {
    ChunkInfo& ch = g.info[best];
    ch.state = kLarge;
    // What the program may touch: its dirty pages once the group is free.
    ch.bump = static_cast<uint32_t>((size + kPage - 1) / kPage);
    // Pages past the request that a former user wrote stay resident (a
    // larger request next time reuses them) and count as dirty meanwhile.
    if (ch.dirty > ch.bump) {
      dirty_add(ch.dirty - ch.bump);
      trim_retained();
    }
    in_use_add(size_t{ch.bump} * kPage);
    mem_stats().arena_allocs.fetch_add(1, std::memory_order_relaxed);
    p = p_of(best);
  }
  pthread_mutex_unlock(&g.mu);
  return p;
}

void large_give(uint32_t idx) {
  pthread_mutex_lock(&g.mu);
  {
    ColdScope cold;
    ChunkInfo& ch = g.info[idx];
    size_t bytes = ch.group * kChunk;
    in_use_sub(size_t{ch.bump} * kPage);
    // The pages the program may have written, and those that were resident
    // before (a prefix either way; large_take counted those past the request).
    uint32_t dirty = ch.bump > ch.dirty ? ch.bump : ch.dirty;
    dirty_add(dirty - (ch.dirty - (ch.dirty < ch.bump ? ch.dirty : ch.bump)));
    if (ch.registered) {
      // Kept whole (hysteresis): a request of about the same size reuses
      // it, registration and all.
      ch.state = kLargeIdle;
      ch.fresh = false;
      ch.dirty = dirty;
      list_push(g.idle_large, idx);
      g.retained_bytes += bytes;
    } else {
      // Single empty chunks: any size class or large request can use
      // them, merged with their neighbours (make_unit).
      split_to_empty(idx, ch.group, dirty);
    }
    trim_retained();
  }
  pthread_mutex_unlock(&g.mu);
}

// --- the thread cache -----------------------------------------------------

void flush_class(ThreadCache& t, int cls, uint32_t keep) {
  if (t.count[cls] <= keep) return;
  if (is_run_class(cls)) {
    while (t.count[cls] > keep) {
      void* p = t.head[cls];
      t.head[cls] = *static_cast<void**>(p);
      --t.count[cls];
      t.bytes -= class_size(cls);
      run_give(p);
    }
    return;
  }
  ClassState& cs = g_classes[cls];
  pthread_mutex_lock(&cs.mu);
  while (t.count[cls] > keep) {
    void* p = t.head[cls];
    t.head[cls] = *static_cast<void**>(p);
    --t.count[cls];
    t.bytes -= class_size(cls);
    class_give(cls, p);
  }
  pthread_mutex_unlock(&cs.mu);
}

void flush_all(ThreadCache& t) {
  for (int c = 0; c < kClasses; ++c)
    flush_class(t, c, 0);
}

void thread_exit(void*) {
  flush_all(t_cache);
  t_cache.state = 2; // frees from later destructors go straight to the chunks
}

void make_key() {
  pthread_key_create(&g_key, thread_exit);
}

void register_thread(ThreadCache& t) {
  t.state = 1;
  pthread_once(&g_key_once, make_key);
  pthread_setspecific(g_key, &t); // any non-null value: the destructor runs
}

} // namespace

int class_of(size_t size) {
  if (size <= kMinClass) return 0;
  size_t n = size - 1;
  int hb = 63 - __builtin_clzl(n);
  size_t q = n >> (hb - 2); // 4..7
  return (hb - 14) * 4 + static_cast<int>(q - 4) + 1;
}

size_t class_size(int cls) {
  if (cls == 0) return kMinClass;
  int hb = 14 + (cls - 1) / 4;
  size_t q = 4 + static_cast<size_t>((cls - 1) % 4);
  return (q + 1) << (hb - 2);
}

bool init(const Options& o) {
  fork_parts::mark(fork_parts::kAlloc); // before the first lock
  pthread_mutex_lock(&g.mu);
  if (g.inited) {
    pthread_mutex_unlock(&g.mu);
    return g.base != 0;
  }
  g.inited = true;
  g.hugetlb = o.hugetlb;
  // Over-reserve by one chunk to align the range to a chunk (huge pages).
  for (size_t want = o.reserve_bytes; want >= (size_t{1} << 30); want /= 2) {
    size_t n = want / kChunk;
    size_t meta = n * (sizeof(ChunkInfo) + sizeof(RunMeta) +
                       kMaxDomains * (sizeof(uint64_t) + sizeof(void*)));
    void* r =
        sys_mmap(nullptr, want + kChunk, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE);
    if (r == nullptr) continue;
    void* m = sys_mmap(nullptr, meta, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE);
    if (m == nullptr) {
      ::syscall(SYS_munmap, r, want + kChunk);
      continue;
    }
    uintptr_t raw = reinterpret_cast<uintptr_t>(r);
    uintptr_t base = (raw + kChunk - 1) & ~(kChunk - 1);
    if (base > raw) ::syscall(SYS_munmap, r, base - raw);
    if (base + want < raw + want + kChunk)
      ::syscall(SYS_munmap, base + want, raw + want + kChunk - (base + want));
    g.base = base;
    g.nchunks = static_cast<uint32_t>(n);
    g.info = static_cast<ChunkInfo*>(m);
    g.runs = reinterpret_cast<RunMeta*>(g.info + n);
    g.lkeys = reinterpret_cast<std::atomic<uint64_t>*>(g.runs + n);
    g.mrs = reinterpret_cast<void**>(g.lkeys + n * kMaxDomains);
    g_base.store(base, std::memory_order_relaxed);
    g_span.store(want, std::memory_order_release);
    break;
  }
  pthread_mutex_unlock(&g.mu);
  return g.base != 0;
}

void* allocate(size_t size, size_t align, bool* zeroed) {
  *zeroed = false;
  if (g_span.load(std::memory_order_acquire) == 0) return nullptr;
  if (size > kMaxClass) {
    if (align > kChunk || size > g.nchunks * kChunk) return nullptr;
    void* p = large_take(size);
    if (p != nullptr) *zeroed = g.info[chunk_of(p)].fresh;
    return p;
  }
  if (align > kPage) return nullptr; // blocks are page aligned
  int cls = class_of(size);
  ThreadCache& t = t_cache;
  if (t.count[cls] > 0) {
    void* p = t.head[cls];
    t.head[cls] = *static_cast<void**>(p);
    --t.count[cls];
    t.bytes -= class_size(cls);
    return p;
  }
  if (is_run_class(cls)) {
    if (t.shard == 0) {
      static std::atomic<unsigned> next_shard{0};
      t.shard = 1 + static_cast<int>(next_shard.fetch_add(1, std::memory_order_relaxed) % kShards);
    }
    void* extra[kMaxCacheBlocks];
    uint32_t want = t.state != 2 ? cache_cap(cls) / 2 : 0, got = 0;
    while (want > 0 && t.bytes + want * class_size(cls) > kThreadCacheBytes)
      --want;
    void* p = run_take(cls, t.shard - 1, extra, want, &got, zeroed);
    for (uint32_t i = 0; i < got; ++i) {
      *static_cast<void**>(extra[i]) = t.head[cls];
      t.head[cls] = extra[i];
      ++t.count[cls];
      t.bytes += class_size(cls);
    }
    if (p != nullptr && t.state == 0) register_thread(t);
    return p;
  }
  ClassState& cs = g_classes[cls];
  pthread_mutex_lock(&cs.mu);
  void* p = class_take(cls, zeroed);
  // Refill: half the cache's capacity in one lock round trip.
  if (p != nullptr && t.state != 2) {
    uint32_t want = cache_cap(cls) / 2;
    for (uint32_t i = 0; i < want && t.bytes + class_size(cls) <= kThreadCacheBytes; ++i) {
      bool z;
      void* extra = class_take(cls, &z);
      if (extra == nullptr) break;
      *static_cast<void**>(extra) = t.head[cls];
      t.head[cls] = extra;
      ++t.count[cls];
      t.bytes += class_size(cls);
    }
  }
  pthread_mutex_unlock(&cs.mu);
  if (p != nullptr && t.state == 0) register_thread(t);
  return p;
}

void release(void* p) {
  uint32_t idx = chunk_of(p);
  const ChunkInfo& ch = g.info[idx];
  if (ch.state == kLarge) {
    large_give(idx);
    return;
  }
  int cls = ch.state == kRun ? run_class(p) : ch.cls;
  size_t sz = class_size(cls);
  ThreadCache& t = t_cache;
  // Inside a cold path (rdma-core freeing during a registration) the class
  // lock may be ours already: always cache.
  bool cache = t.state != 2 &&
               ((t.count[cls] < cache_cap(cls) && t.bytes + sz <= kThreadCacheBytes) || t_cold > 0);
  if (!cache && t.state != 2 && t.count[cls] >= cache_cap(cls)) {
    flush_class(t, cls, cache_cap(cls) / 2);
    cache = t.bytes + sz <= kThreadCacheBytes;
  }
  if (cache) {
    *static_cast<void**>(p) = t.head[cls];
    t.head[cls] = p;
    ++t.count[cls];
    t.bytes += sz;
    if (t.state == 0) register_thread(t);
    return;
  }
  if (ch.state == kRun) {
    run_give(p);
    return;
  }
  ClassState& cs = g_classes[cls];
  pthread_mutex_lock(&cs.mu);
  class_give(cls, p);
  pthread_mutex_unlock(&cs.mu);
}

size_t usable_size(const void* p) {
  uint32_t idx = chunk_of(p);
  const ChunkInfo& ch = g.info[idx];
  if (ch.state == kLarge) return ch.group * kChunk;
  return class_size(ch.state == kRun ? run_class(p) : ch.cls);
}

bool grow_in_place(void* p, size_t size) {
  return g.info[chunk_of(p)].state == kRun && run_grow(p, size);
}

void flush_thread_cache() {
  flush_all(t_cache);
}

bool in_cold_path() {
  return t_cold > 0;
}

void before_fork() {
  for (ClassState& cs : g_classes)
    pthread_mutex_lock(&cs.mu);
  runs_before_fork();
  pthread_mutex_lock(&g.mu);
}

void after_fork_parent() {
  pthread_mutex_unlock(&g.mu);
  runs_after_fork_parent();
  for (ClassState& cs : g_classes)
    pthread_mutex_unlock(&cs.mu);
}

void after_fork_child() {
  // The child has one thread, ours: fresh locks are as good as released ones.
  pthread_mutex_init(&g.mu, nullptr);
  for (ClassState& cs : g_classes)
    pthread_mutex_init(&cs.mu, nullptr);
  runs_after_fork_child();
  forget_registrations();
}

} // namespace xp::alloc::arena
