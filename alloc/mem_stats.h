// Registered-memory statistics: the hooked allocator's arenas, the
// registration cache and the zero-copy byte counts.  They live in one
// page-aligned page of their own so that preload/stats.cc can publish them in
// the live statistics file next to the StatsBlock (it maps the file's second
// part over this page, as it does for the block): xpress-stat sees them live.
//
// Everything is a relaxed atomic.  The allocator updates its counters only
// on its cold paths (under a size class's or the arena's lock), never per
// small allocation.
#pragma once
#include <atomic>
#include <cstdint>

namespace xp::alloc {

using MemCounter = std::atomic<uint64_t>;

struct alignas(4096) MemStats {
  // Arenas (sizes >= XPRESS_ALLOC_MIN_KB).
  MemCounter arena_committed_bytes;  // chunks backed by memory (gauge)
  MemCounter arena_in_use_bytes;     // blocks held by the program or a thread cache (gauge)
  MemCounter arena_registered_bytes; // committed bytes registered with the domains (gauge)
  MemCounter arena_allocs;           // blocks handed out by the central lists (monotonic)
  MemCounter arena_fallbacks;        // large requests served by glibc: arena full, alignment
  MemCounter arena_dirty_bytes;      // free arena memory left resident (gauge, bounded)
  MemCounter arena_purged_bytes;     // free block pages given back with MADV_DONTNEED
  MemCounter arena_decommits;        // retained units (empty chunks, idle groups) unmapped
  MemCounter domains;                // protection domains attached (gauge)
  MemCounter registrations;          // live ibv_reg_mr of arena chunks, all domains (gauge)
  MemCounter registration_failures;
  // Registration cache (buffers that did not come from the arenas).
  MemCounter cache_hits;
  MemCounter cache_misses;
  MemCounter cache_invalidations; // entries dropped because their memory changed owner
  MemCounter cache_evictions;     // entries dropped by LRU (size or count bound)
  MemCounter cache_entries;       // gauge
  MemCounter cache_bytes;         // gauge
  // Bytes the data path sent from a registered application buffer (zero
  // copy) and bytes it copied into its staging ring (every byte of the copy
  // path); received bytes are all copied (out of the receive ring).
  // Incremented by stream/ once per call.
  MemCounter tx_zero_copy_bytes;
  MemCounter tx_copied_bytes;
  MemCounter rx_zero_copy_bytes;
  MemCounter rx_copied_bytes;
  // Zero-copy bytes copied into staging after their send, before send()
  // returned: the tail the peer had neither acknowledged nor credited,
  // which recovery might have to re-send (part of tx_zero_copy_bytes).
  MemCounter tx_zero_copy_staged_bytes;
};
static_assert(sizeof(MemStats) == 4096, "one page: preload maps the live file over it");

// The process's counters (a page of static storage, usable before any
// constructor ran).
MemStats& mem_stats();

// Fork child: counts of events start over; gauges (the memory the child
// inherited) stay.
void mem_stats_after_fork_child();

} // namespace xp::alloc
