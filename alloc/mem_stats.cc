#include "alloc/mem_stats.h"

namespace xp::alloc {
namespace {
// Static storage: counted from the first malloc on, before any constructor.
// In a zero-filled section of its own, placed after .bss (x86-64's large-data
// .lbss): its page alignment would otherwise align the start of .bss, and the
// first .bss variable, which crt's exit code reads in every process, would sit
// on a page of its own instead of the one where .data ends (written by the
// loader anyway; tests/unit/startup.sh).
__attribute__((section(".lbss.xp_mem_stats"))) MemStats g_mem_stats;
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
