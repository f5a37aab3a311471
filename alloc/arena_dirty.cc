// The arena's free memory: how much of it stays resident (dirty pages,
// bounded by dirty_budget) and how much stays committed (retained units),
// and giving the rest back to the kernel.  Callers hold g.mu unless said
// otherwise (arena_internal.h).
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "alloc/arena_internal.h"
#include "alloc/mem_stats.h"

namespace xp::alloc::arena {
namespace {

// Retained units (empty chunks, idle large groups) kept committed for reuse
// beyond the dirty budget's say: registered ones are worth more (a new
// registration costs about 0.4 ms per chunk), unregistered ones only save
// a system call.
constexpr size_t kRetainBytes = 64 << 20;
constexpr size_t kRetainRegisteredBytes = 32 << 20;

size_t in_use_bytes() {
  return mem_stats().arena_in_use_bytes.load(std::memory_order_relaxed);
}

// The oldest retained unit of a list that is (not) registered: list tails
// are the oldest, the most recently emptied units are the warm ones.
uint32_t oldest(const List& l, bool registered) {
  for (uint32_t i = l.tail; i != kNil; i = g.info[i].prev)
    if (g.info[i].registered == registered) return i;
  return kNil;
}

// The oldest retained unit (idle large groups first: they are the least
// likely to fit the next request), or kNil.
uint32_t oldest_retained(bool registered, List** from) {
  for (List* l : {&g.idle_large, &g.empty}) {
    uint32_t i = oldest(*l, registered);
    if (i != kNil) {
      *from = l;
      return i;
    }
  }
  return kNil;
}

void drop_retained(List& from, uint32_t idx) {
  uint32_t n = g.info[idx].group;
  list_remove(from, idx);
  g.retained_bytes -= n * kChunk;
  release_unit(idx, n);
  mem_stats().arena_decommits.fetch_add(1, std::memory_order_relaxed);
}

// Gives back (MADV_DONTNEED) up to k of the dirty pages of empty chunk idx,
// which is not registered: the last ones, so that what stays dirty is
// where the next user starts.  Only as much as the budget needs: a whole
// chunk unmapped for a block's worth of overshoot would cost page faults
// for all of it when it is used again.
void purge_pages(uint32_t idx, uint32_t k) {
  ChunkInfo& c = g.info[idx];
  if (k > c.dirty) k = c.dirty;
  if (k == 0) return;
  uint32_t lo;
  uint64_t* d = g.runs[idx].dirty;
  if (c.run_meta) {
    // A former run chunk: its dirty pages are in its bitmap.
    uint32_t found = 0;
    for (lo = kChunkPages; found < k && lo > 0;) {
      --lo;
      if (d[lo / 64] & (uint64_t{1} << (lo % 64))) ++found;
    }
    k = found;
  } else {
    lo = c.dirty - k; // a prefix
  }
  char* base = reinterpret_cast<char*>(g.base + (uintptr_t{idx} << kChunkShift));
  size_t len = c.run_meta ? (kChunkPages - lo) * kPage : size_t{k} * kPage;
  // A failure (hugetlb pages need aligned ranges) leaves the pages dirty:
  // clean pages of a fresh chunk must read as zero.
  if (::syscall(SYS_madvise, base + size_t{lo} * kPage, len, MADV_DONTNEED) != 0) return;
  if (c.run_meta)
    for (uint32_t p = lo; p < kChunkPages; ++p)
      d[p / 64] &= ~(uint64_t{1} << (p % 64));
  c.dirty -= k;
  dirty_sub(k);
  mem_stats().arena_purged_bytes.fetch_add(size_t{k} * kPage, std::memory_order_relaxed);
}

} // namespace

// Over the dirty budget (plus extra: what the caller is about to add), the
// oldest unregistered empty chunks give back dirty pages until it is met.
// Unregistered retained units are unmapped over their own bound (address
// space and metadata only: their dirty pages are bounded by the budget),
// registered ones over theirs (hysteresis: a chunk emptied and refilled
// keeps its registration).
void trim_retained(size_t extra) {
  // The high-water mark decays towards what is in use by a fraction of the
  // gap per second (not per event: a busy churn would otherwise forget its
  // peak within a fraction of a second and fault its memory in again).
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  if (now.tv_sec != g.decayed_at) {
    g.decayed_at = now.tv_sec;
    size_t use = in_use_bytes(), high = g.in_use_high.load(std::memory_order_relaxed);
    if (high > use)
      g.in_use_high.store(high - ((high - use) >> kHighDecayShift), std::memory_order_relaxed);
  }
  for (uint32_t i = g.empty.tail; i != kNil && over_budget(extra); i = g.info[i].prev) {
    if (g.info[i].registered || g.info[i].dirty == 0) continue;
    size_t need =
        mem_stats().arena_dirty_bytes.load(std::memory_order_relaxed) + extra - dirty_budget();
    size_t pages = (need + kPage - 1) / kPage;
    purge_pages(i, pages < kChunkPages ? static_cast<uint32_t>(pages) : kChunkPages);
  }
  size_t unreg = 0, reg = 0;
  for (const List* l : {&g.idle_large, &g.empty})
    for (uint32_t i = l->head; i != kNil; i = g.info[i].next)
      (g.info[i].registered ? reg : unreg) += g.info[i].group * kChunk;
  size_t share = in_use_bytes() / 4;
  List* from = nullptr;
  while (unreg > kRetainBytes + share) {
    uint32_t idx = oldest_retained(false, &from);
    if (idx == kNil) break;
    unreg -= g.info[idx].group * kChunk;
    drop_retained(*from, idx);
  }
  while (reg > kRetainRegisteredBytes + share) {
    uint32_t idx = oldest_retained(true, &from);
    if (idx == kNil) break;
    reg -= g.info[idx].group * kChunk;
    drop_retained(*from, idx);
  }
}

bool reclaim(uint32_t idx, void* from, size_t len) {
  pthread_mutex_lock(&g.mu);
  bool purged = false;
  {
    ColdScope cold;
    trim_retained(len);
    if (over_budget(len) && !g.info[idx].registered &&
        ::syscall(SYS_madvise, from, len, MADV_DONTNEED) == 0) {
      mem_stats().arena_purged_bytes.fetch_add(len, std::memory_order_relaxed);
      purged = true;
    }
  }
  pthread_mutex_unlock(&g.mu);
  return purged;
}

size_t dirty_budget() {
  MemStats& st = mem_stats();
  size_t use = st.arena_in_use_bytes.load(std::memory_order_relaxed);
  size_t high = g.in_use_high.load(std::memory_order_relaxed);
  size_t room = high > use ? high - use : 0;
  if (room > use * kRoomPerUse) room = use * kRoomPerUse;
  return kDirtyMinBytes + (use >> kDirtyShareShift) + room +
         st.arena_registered_bytes.load(std::memory_order_relaxed);
}

void in_use_add(size_t bytes) {
  size_t use = mem_stats().arena_in_use_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  if (use > g.in_use_high.load(std::memory_order_relaxed))
    g.in_use_high.store(use, std::memory_order_relaxed);
}

void in_use_sub(size_t bytes) {
  mem_stats().arena_in_use_bytes.fetch_sub(bytes, std::memory_order_relaxed);
}

void dirty_add(uint32_t pages) {
  mem_stats().arena_dirty_bytes.fetch_add(uint64_t{pages} * kPage, std::memory_order_relaxed);
}

void dirty_sub(uint32_t pages) {
  mem_stats().arena_dirty_bytes.fetch_sub(uint64_t{pages} * kPage, std::memory_order_relaxed);
}

} // namespace xp::alloc::arena
