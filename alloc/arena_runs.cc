// Page runs for the larger size classes (arena_internal.h: kRunMinBytes up
// to kMaxClass).  A block of such a class is a run of whole pages in a kRun
// chunk, found first fit (lowest chunk of the shard, lowest page), and its
// pages go back to the chunk's bitmap when freed, where they merge with
// free neighbours.  Any class can reuse them: with one chunk list per class
// (the slabs below kRunMinBytes) every class kept the free blocks of its
// own peak, and under a churn of mixed sizes that was most of the arena's
// resident memory.
//
// A chunk belongs to one shard (a lock and a chunk list); a thread takes
// blocks from its own shard, so two threads rarely contend.  A chunk with
// no page in use goes back to the pool (arena.cc), where classes, large
// groups and other shards find it.
//
// Dirty pages: a freed block's pages are marked dirty (resident, not zero)
// and counted against the budget, unless the budget is exhausted: then the
// block is purged (reclaim: MADV_DONTNEED of an unregistered chunk) and its
// pages stay clean.  A clean page of a chunk that was fresh reads as zero
// (run_zero, kept while the chunk is pooled: calloc skips the memset).
#include <pthread.h>

#include "alloc/arena_internal.h"
#include "alloc/mem_stats.h"

namespace xp::alloc::arena {
namespace {

constexpr int kWords = kChunkPages / 64;

struct Shard {
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  List chunks; // its kRun chunks, oldest first
};
Shard g_shards[kShards];

// Sets (on) or clears bits [at, at+n) of a bitmap; returns how many of them
// were set before.
uint32_t set_bits(uint64_t* w, uint32_t at, uint32_t n, bool on) {
  uint32_t was = 0;
  while (n > 0) {
    uint32_t i = at / 64, b = at % 64;
    uint32_t k = n < 64 - b ? n : 64 - b;
    uint64_t mask = (k == 64 ? ~uint64_t{0} : ((uint64_t{1} << k) - 1)) << b;
    was += static_cast<uint32_t>(__builtin_popcountll(w[i] & mask));
    w[i] = on ? (w[i] | mask) : (w[i] & ~mask);
    at += k;
    n -= k;
  }
  return was;
}

// How many of bits [at, at+n) are set.
uint32_t count_bits(const uint64_t* w, uint32_t at, uint32_t n) {
  uint32_t set = 0;
  while (n > 0) {
    uint32_t i = at / 64, b = at % 64;
    uint32_t k = n < 64 - b ? n : 64 - b;
    uint64_t mask = (k == 64 ? ~uint64_t{0} : ((uint64_t{1} << k) - 1)) << b;
    set += static_cast<uint32_t>(__builtin_popcountll(w[i] & mask));
    at += k;
    n -= k;
  }
  return set;
}

// The first run of n clear bits of used, or -1.
int find_free(const uint64_t* used, uint32_t n) {
  uint32_t run = 0, start = 0;
  for (uint32_t i = 0; i < kChunkPages;) {
    uint64_t w = used[i / 64] >> (i % 64);
    uint32_t left = 64 - i % 64; // bits of this word from i on
    if (w == 0) {
      if (run == 0) start = i;
      run += left;
      if (run >= n) return static_cast<int>(start);
      i += left;
      continue;
    }
    uint32_t z = static_cast<uint32_t>(__builtin_ctzll(w)); // free bits before a used one
    if (z > 0) {
      if (run == 0) start = i;
      run += z;
      if (run >= n) return static_cast<int>(start);
    }
    i += z;
    // Skip the used bits.
    uint64_t u = ~(used[i / 64] >> (i % 64));
    uint32_t o = u == 0 ? 64 - i % 64 : static_cast<uint32_t>(__builtin_ctzll(u));
    i += o;
    run = 0;
  }
  return -1;
}

void* page_addr(uint32_t idx, uint32_t page) {
  return reinterpret_cast<void*>(g.base + (uintptr_t{idx} << kChunkShift) +
                                 uintptr_t{page} * kPage);
}

uint32_t class_pages(int cls) {
  return static_cast<uint32_t>(class_size(cls) / kPage);
}

// A chunk from the pool becomes a run chunk of shard si (g.mu held).  Its
// dirty pages stay counted: they are tracked in its bitmap from now on.
void init_chunk(uint32_t idx, int si) {
  ChunkInfo& ch = g.info[idx];
  bool fresh = ch.fresh, registered = ch.registered, meta = ch.run_meta;
  // Clean pages read as zero in a chunk committed for runs (and kept so in
  // the pool), not in one a class or large block wrote (a prefix is a guess).
  bool zero = meta ? ch.run_zero : fresh;
  uint32_t dirty = ch.dirty;
  ch = ChunkInfo{};
  ch.state = kRun;
  ch.cls = static_cast<uint8_t>(si);
  ch.group = 1;
  ch.fresh = fresh;
  ch.registered = registered;
  ch.run_meta = true;
  ch.run_zero = zero;
  ch.dirty = dirty;
  RunMeta& m = g.runs[idx];
  for (int w = 0; w < kWords; ++w)
    m.used[w] = 0;
  if (!meta) {
    // A chunk of a large group or a class: its dirty pages are (mostly) a
    // prefix, both fill from the start.
    for (int w = 0; w < kWords; ++w)
      m.dirty[w] = 0;
    set_bits(m.dirty, 0, dirty, true);
  }
}

// One block of n pages from the shard (its lock held), or null.
void* take_locked(Shard& sh, int si, int cls, bool* zeroed) {
  uint32_t n = class_pages(cls);
  uint32_t idx = kNil;
  int at = -1;
  for (uint32_t i = sh.chunks.head; i != kNil; i = g.info[i].next) {
    if (kChunkPages - g.info[i].live < n) continue;
    at = find_free(g.runs[i].used, n);
    if (at >= 0) {
      idx = i;
      break;
    }
  }
  if (idx == kNil) {
    // The chunk's new state is set under g.mu: make_unit looks for empty
    // chunks by their state.
    pthread_mutex_lock(&g.mu);
    {
      ColdScope cold;
      idx = take_chunk();
      if (idx != kNil) init_chunk(idx, si);
    }
    pthread_mutex_unlock(&g.mu);
    if (idx == kNil) return nullptr;
    if (auto hook = g_test_after_take_chunk) hook(idx);
    list_push_tail(sh.chunks, idx);
    at = 0;
  }
  ChunkInfo& ch = g.info[idx];
  RunMeta& m = g.runs[idx];
  uint32_t page = static_cast<uint32_t>(at);
  set_bits(m.used, page, n, true);
  uint32_t dirty = set_bits(m.dirty, page, n, false);
  ch.dirty -= dirty;
  dirty_sub(dirty);
  ch.live += n;
  m.cls[page] = static_cast<uint8_t>(cls);
  *zeroed = ch.run_zero && dirty == 0;
  MemStats& st = mem_stats();
  in_use_add(class_size(cls));
  st.arena_allocs.fetch_add(1, std::memory_order_relaxed);
  return page_addr(idx, page);
}

} // namespace

bool is_run_class(int cls) {
  return class_size(cls) >= kRunMinBytes;
}

void* run_take(int cls, int shard, void** extra, uint32_t want, uint32_t* got, bool* zeroed) {
  Shard& sh = g_shards[shard];
  *got = 0;
  pthread_mutex_lock(&sh.mu);
  void* p = take_locked(sh, shard, cls, zeroed);
  for (; p != nullptr && *got < want; ++*got) {
    bool z;
    extra[*got] = take_locked(sh, shard, cls, &z);
    if (extra[*got] == nullptr) break;
  }
  pthread_mutex_unlock(&sh.mu);
  return p;
}

void run_give(void* p) {
  uintptr_t off = reinterpret_cast<uintptr_t>(p) - g.base;
  uint32_t idx = static_cast<uint32_t>(off >> kChunkShift);
  uint32_t page = static_cast<uint32_t>((off & (kChunk - 1)) / kPage);
  ChunkInfo& ch = g.info[idx];
  // The shard cannot change while a block of the chunk is in use.
  Shard& sh = g_shards[ch.cls];
  pthread_mutex_lock(&sh.mu);
  RunMeta& m = g.runs[idx];
  int cls = m.cls[page];
  uint32_t n = class_pages(cls);
  size_t sz = class_size(cls);
  set_bits(m.used, page, n, false);
  ch.live -= n;
  in_use_sub(sz);
  // ch.registered is read without g.mu here: reclaim checks it again.
  if (ch.registered || !over_budget(sz) || !reclaim(idx, p, sz)) {
    set_bits(m.dirty, page, n, true);
    ch.dirty += n;
    dirty_add(n);
  }
  if (ch.live == 0) {
    list_remove(sh.chunks, idx);
    pthread_mutex_lock(&g.mu);
    {
      ColdScope cold;
      pool_chunk(idx);
    }
    pthread_mutex_unlock(&g.mu);
  }
  pthread_mutex_unlock(&sh.mu);
}

bool run_grow(void* p, size_t size) {
  if (size > kMaxClass) return false;
  int to = class_of(size);
  uintptr_t off = reinterpret_cast<uintptr_t>(p) - g.base;
  uint32_t idx = static_cast<uint32_t>(off >> kChunkShift);
  uint32_t page = static_cast<uint32_t>((off & (kChunk - 1)) / kPage);
  ChunkInfo& ch = g.info[idx];
  Shard& sh = g_shards[ch.cls]; // fixed while the caller owns a block of it
  pthread_mutex_lock(&sh.mu);
  RunMeta& m = g.runs[idx];
  int from = m.cls[page];
  uint32_t have = class_pages(from), want = class_pages(to);
  // The pages after the block must all be free.
  bool ok = want > have && page + want <= kChunkPages &&
            count_bits(m.used, page + have, want - have) == 0;
  if (ok) {
    set_bits(m.used, page + have, want - have, true);
    uint32_t dirty = set_bits(m.dirty, page + have, want - have, false);
    ch.dirty -= dirty;
    dirty_sub(dirty);
    ch.live += want - have;
    m.cls[page] = static_cast<uint8_t>(to);
    in_use_add(class_size(to) - class_size(from));
  }
  pthread_mutex_unlock(&sh.mu);
  return ok;
}

int run_class(const void* p) {
  uintptr_t off = reinterpret_cast<uintptr_t>(p) - g.base;
  uint32_t idx = static_cast<uint32_t>(off >> kChunkShift);
  // Written when the block was taken (under the shard lock, before the
  // block was handed out): stable while the caller owns the block.
  return g.runs[idx].cls[(off & (kChunk - 1)) / kPage];
}

void runs_before_fork() {
  for (Shard& sh : g_shards)
    pthread_mutex_lock(&sh.mu);
}

void runs_after_fork_parent() {
  for (Shard& sh : g_shards)
    pthread_mutex_unlock(&sh.mu);
}

void runs_after_fork_child() {
  for (Shard& sh : g_shards)
    pthread_mutex_init(&sh.mu, nullptr);
}

} // namespace xp::alloc::arena
