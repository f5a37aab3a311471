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

namespace xp::alloc::arena {

constexpr uint32_t kNil = UINT32_MAX;

enum : uint8_t {
  kFree = 0,  // reserved only (PROT_NONE)
  kEmpty,     // committed, in the empty pool
  kClass,     // committed, serving one size class
  kLarge,     // committed, head of a large group in use
  kLargeIdle, // committed, head of a large group kept for reuse
  kLargeTail, // committed, a later chunk of a group (group = head's index)
};

// Per chunk of the reservation.  A "unit" (one class or empty chunk, or a
// large group) is what gets registered: its head holds the keys.
struct ChunkInfo {
  uint8_t state;
  uint8_t cls;
  bool fresh;      // untouched since committed: reads as zero
  bool registered; // (head) registered with at least one domain
  uint32_t group;  // head: chunks in the unit; kLargeTail: the head's index
  uint32_t live;   // kClass: blocks out of the central lists
  uint32_t bump;   // kClass: blocks carved so far
  void* free;      // kClass: returned blocks, linked through their first word
  uint32_t prev, next;
};

struct List {
  uint32_t head = kNil, tail = kNil, count = 0;
};

struct Global {
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; // everything below
  bool inited = false;
  bool hugetlb = false;
  uintptr_t base = 0;
  uint32_t nchunks = 0;
  uint32_t high = 0; // chunks [0, high) were ever committed
  ChunkInfo* info = nullptr;
  std::atomic<uint64_t>* lkeys = nullptr; // [chunk][slot]: bit 32 = valid
  void** mrs = nullptr;                   // [chunk][slot]: the registrar's handle
  List empty;                             // kEmpty chunks
  List idle_large;                        // kLargeIdle heads
  size_t retained_bytes = 0;              // empty + idle large
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

// arena_domains.cc; callers hold g.mu.
void deregister_unit(uint32_t head, uint32_t n); // from every domain
void release_unit(uint32_t head, uint32_t n);    // deregister and decommit
// Fork child: drop every key and handle without calling the registrars.
void forget_registrations();

} // namespace xp::alloc::arena
