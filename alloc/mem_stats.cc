#include "alloc/mem_stats.h"

namespace xp::alloc {
namespace {
// Static storage: counted from the first malloc on, before any constructor.
MemStats g_mem_stats;
} // namespace

MemStats& mem_stats() {
  return g_mem_stats;
}

void mem_stats_after_fork_child() {
  MemStats& s = g_mem_stats;
  for (MemCounter* c :
       {&s.arena_allocs, &s.arena_fallbacks, &s.arena_purged_bytes, &s.arena_decommits,
        &s.registration_failures, &s.cache_hits, &s.cache_misses, &s.cache_invalidations,
        &s.cache_evictions, &s.tx_zero_copy_bytes, &s.tx_copied_bytes, &s.rx_zero_copy_bytes,
        &s.rx_copied_bytes, &s.tx_zero_copy_staged_bytes})
    c->store(0, std::memory_order_relaxed);
}

} // namespace xp::alloc
