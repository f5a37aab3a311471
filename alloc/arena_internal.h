// State shared by the arena (arena.cc: chunks, classes, thread caches) and
// its registrations (arena_domains.cc: protection domains, lookups).
// Internal to alloc/.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <pthread.h>

#include "alloc/arena.h"
#include "alloc/domain.h"
#include "alloc/mem_stats.h"

namespace xp::alloc::arena {

constexpr uint32_t kNil = UINT32_MAX;

enum : uint8_t {
  kFree = 0,  // reserved only (PROT_NONE)
  kEmpty,     // committed, in the empty pool
  kClass,     // committed, serving one size class
  kLarge,     // committed, head of a large group in use
  kLargeIdle, // committed, head of a large group kept for reuse
  kLargeTail, // committed, a later chunk of a group (group = head's index)
  kRun,       // committed, page runs of the larger classes (arena_runs.cc)
};

constexpr uint32_t kChunkPages = kChunk / kPage;

// Per chunk of the reservation.  A "unit" (one class or empty chunk, or a
// large group) is what gets registered: its head holds the keys.
//
// "Dirty" bytes are free memory whose pages are (probably) resident: free
// blocks of class chunks kept as they were, and the retained units.  They
// are counted per unit head (dirty) and in mem_stats().arena_dirty_bytes,
// whose bound (dirty_budget) decides when free memory goes back to the
// kernel: a free block of a chunk that is not registered is purged
// (MADV_DONTNEED after its first page, which keeps the free-list link), a
// retained unit is decommitted.  Registered chunks are never purged: the
// MR pins their pages, and a purged page would come back as a different
// page than the one the NIC reads.
struct ChunkInfo {
  uint8_t state;
  uint8_t cls;     // kClass: the class; kRun: the shard
  bool fresh;      // untouched since committed: reads as zero (kRun: its clean pages)
  bool registered; // (head) registered with at least one domain
  bool run_meta;   // its RunMeta.dirty tells its dirty pages (a run chunk, maybe pooled since)
  bool run_zero;   // run_meta, and its pages not marked dirty read as zero
  uint32_t group;  // head: chunks in the unit; kLargeTail: the head's index
  uint32_t live;   // kClass: blocks out of the central lists; kRun: pages in use
  uint32_t bump;   // kClass: blocks carved so far; kLarge: pages asked for
  uint32_t dirty;  // head: dirty pages (see above); kLarge: pages resident before (not counted)
  void* free;      // kClass: returned blocks, linked through their first word
  void* purged;    // kClass: returned blocks with all but their first page purged
  uint32_t prev, next;
};

struct List {
  uint32_t head = kNil, tail = kNil, count = 0;
};

// Per chunk, used while it is a kRun chunk: which pages are in use, which
// free ones are dirty, and the class of the block starting at each page.
struct RunMeta {
  uint64_t used[kChunkPages / 64];
  uint64_t dirty[kChunkPages / 64];
  uint8_t cls[kChunkPages];
};

struct Global {
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; // everything below
  bool inited = false;
  bool hugetlb = false;
  uintptr_t base = 0;
  uint32_t nchunks = 0;
  uint32_t high = 0; // chunks [0, high) were ever committed
  ChunkInfo* info = nullptr;
  RunMeta* runs = nullptr;                // [chunk]
  std::atomic<uint64_t>* lkeys = nullptr; // [chunk][slot]: bit 32 = valid
  void** mrs = nullptr;                   // [chunk][slot]: the registrar's handle
  List empty;                             // kEmpty chunks
  List idle_large;                        // kLargeIdle heads
  size_t retained_bytes = 0;              // empty + idle large
  // High-water mark of the bytes in use, decaying towards the current value
  // (dirty_budget).  Relaxed: a heuristic, updated without g.mu.
  std::atomic<size_t> in_use_high{0};
  long decayed_at = 0; // second of the last decay (CLOCK_MONOTONIC_COARSE)
  DomainRegistrar* domains[kMaxDomains] = {};
};
extern Global g;

inline void list_push(List& l, uint32_t idx) {
  ChunkInfo& c = g.info[idx];
  c.prev = kNil;
  c.next = l.head;
  if (l.head != kNil) g.info[l.head].prev = idx;
  l.head = idx;
  if (l.tail == kNil) l.tail = idx;
  ++l.count;
}

inline void list_push_tail(List& l, uint32_t idx) {
  ChunkInfo& c = g.info[idx];
  c.next = kNil;
  c.prev = l.tail;
  if (l.tail != kNil) g.info[l.tail].next = idx;
  l.tail = idx;
  if (l.head == kNil) l.head = idx;
  ++l.count;
}

inline void list_remove(List& l, uint32_t idx) {
  ChunkInfo& c = g.info[idx];
  if (c.prev != kNil)
    g.info[c.prev].next = c.next;
  else
    l.head = c.next;
  if (c.next != kNil)
    g.info[c.next].prev = c.prev;
  else
    l.tail = c.prev;
  c.prev = c.next = kNil;
  --l.count;
}

// Depth of arena cold paths on this thread (chunk commit, registration).
// initial-exec: the preloaded library's TLS is static, and the default
// (global-dynamic) model may call __tls_get_addr, which may call malloc.
extern __attribute__((tls_model("initial-exec"))) thread_local int t_cold;
struct ColdScope {
  ColdScope() { ++t_cold; }
  ~ColdScope() { --t_cold; }
  ColdScope(const ColdScope&) = delete;
  ColdScope& operator=(const ColdScope&) = delete;
};

// Unit tests: called when a size class took a chunk, after g.mu was
// released (what another thread may then see of the chunk).
extern void (*g_test_after_take_chunk)(uint32_t idx);

// The registrar of an attached domain (the registration cache's misses).
DomainRegistrar* domain_registrar(int slot);

// The dirty bytes allowed before free memory is purged or decommitted: a
// floor and a quarter of what is in use, plus what in use has recently been
// above its current value (free memory that the next rise reuses without
// page faults, so the resident set stays near the high-water mark of what
// is in use; at most four times what is in use, so that it goes when use
// ends, and the mark decays), plus everything registered
// (pinned pages are resident whatever we do, so their free blocks must not
// push the others out).  Measured with bench/alloc-churn: a smaller budget
// turns resident memory into page faults (system time), a larger one into
// resident set.
constexpr size_t kDirtyMinBytes = 4 << 20;
constexpr unsigned kDirtyShareShift = 2; // in use / 4
constexpr size_t kRoomPerUse = 4;        // room at most 4x in use
constexpr unsigned kHighDecayShift = 3;  // per second: 1/8 of the gap
size_t dirty_budget();
// The bytes in use (mem_stats: blocks held by the program or a thread
// cache; a large block counts the pages asked for) and their high-water mark.
void in_use_add(size_t bytes);
void in_use_sub(size_t bytes);
void dirty_add(uint32_t pages);
void dirty_sub(uint32_t pages);
inline bool over_budget(size_t extra) {
  return mem_stats().arena_dirty_bytes.load(std::memory_order_relaxed) + extra > dirty_budget();
}
// [from, from+len) of chunk idx is free and about to count as dirty while
// the budget is exhausted: retained units go first (the oldest memory),
// then the range is purged unless its chunk is registered (checked under
// g.mu, which registration holds: a chunk is never purged while an MR pins
// it).  True when it was purged.  Takes g.mu.
bool reclaim(uint32_t idx, void* from, size_t len);

// Callers hold g.mu.  After retained units joined the pool or dirty pages
// were added (plus extra, about to be): purges and unmaps what exceeds the
// budgets (arena_dirty.cc).
void trim_retained(size_t extra = 0);

// arena.cc, callers hold g.mu: a chunk for a class or runs (kNil when the
// reservation is exhausted), and a chunk whose blocks are all free back to
// the pool.
uint32_t take_chunk();
void pool_chunk(uint32_t idx);

// arena_runs.cc: the classes from kFirstRunClass on are served from page
// runs (first fit, free neighbours merge) in chunks owned by shards (a
// thread uses one; a block goes back to its chunk's).
constexpr size_t kRunMinBytes = 128 * 1024;
constexpr int kShards = 4;
bool is_run_class(int cls);
// Up to 1 + want blocks of class cls; extra ones are returned through
// extra[] (*got of them).  Null when the arena is exhausted.
void* run_take(int cls, int shard, void** extra, uint32_t want, uint32_t* got, bool* zeroed);
void run_give(void* p);
// Grows run block p in place to the class of size when the pages after it
// are free.
bool run_grow(void* p, size_t size);
int run_class(const void* p);
void runs_before_fork();
void runs_after_fork_parent();
void runs_after_fork_child();

// arena_domains.cc; callers hold g.mu.
void deregister_unit(uint32_t head, uint32_t n); // from every domain
void release_unit(uint32_t head, uint32_t n);    // deregister and decommit (drops its dirty pages)
// Fork child: drop every key and handle without calling the registrars.
void forget_registrations();

} // namespace xp::alloc::arena
