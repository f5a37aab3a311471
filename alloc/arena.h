// The hooked allocator's arenas (internal to alloc/; alloc/heap.h is the
// malloc family on top of it, alloc/domain.h the registration interface).
//
// One contiguous reservation of address space (PROT_NONE, no memory behind
// it) is committed in 4 MiB chunks as needed.  A chunk either serves one
// small size class (16 KiB .. 112 KiB, slabs of equal blocks), or page runs
// of the larger classes (128 KiB .. 2 MiB, four classes per power of two:
// first fit, free neighbours merge, any class reuses them; arena_runs.cc),
// or is part of a "large" group of whole chunks for bigger requests.  A
// chunk or group (a "unit") is registered with a protection domain on
// demand (alloc/domain.h: prepare_local) and stays registered while
// committed.  Free blocks go back to a per-thread cache (bounded), then to
// their chunk; chunks left empty go to a pool that any use takes from.
// Free memory that stays resident ("dirty") is bounded (arena_dirty.cc):
// beyond the budget, free pages of unregistered chunks are given back with
// MADV_DONTNEED; registered chunks are never purged (the MR pins their
// pages), they are kept up to a bound and then deregistered and unmapped
// (see docs/design.md "Registered memory").
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace xp::alloc::arena {

constexpr unsigned kChunkShift = 22; // 4 MiB: two 2 MiB huge pages
constexpr size_t kChunk = size_t{1} << kChunkShift;
constexpr size_t kMinClass = 16 * 1024;
constexpr size_t kMaxClass = kChunk / 2; // above: large groups of whole chunks
constexpr int kClasses = 29;
constexpr size_t kPage = 4096;

// The reservation: [base, base+span).  span is published last (release), so
// a reader that sees span != 0 also sees base.
extern std::atomic<uintptr_t> g_base;
extern std::atomic<uintptr_t> g_span;

// The whole test a free() of a small glibc block pays: two loads, a compare.
inline bool contains(const void* p) {
  uintptr_t span = g_span.load(std::memory_order_acquire);
  return reinterpret_cast<uintptr_t>(p) - g_base.load(std::memory_order_relaxed) < span;
}

struct Options {
  size_t reserve_bytes = size_t{64} << 30; // address space only; halved until it fits
  bool hugetlb = false;                    // try MAP_HUGETLB for new chunks
};

// Reserve the address range (idempotent; false when no range could be reserved).
bool init(const Options& o);

// A block of at least size bytes aligned to align (a power of two), or null
// when the arena cannot serve it (full, alignment above what it offers):
// the caller then uses glibc.  *zeroed tells whether the memory is known to
// be zero (fresh pages), so calloc can skip the memset.
void* allocate(size_t size, size_t align, bool* zeroed);
// p must satisfy contains(p) and be a block allocate() returned.
void release(void* p);
// The block's capacity (>= the size asked for).
size_t usable_size(const void* p);
// realloc: makes block p (allocate()'s) at least size bytes without moving
// it, when the pages after it are free (page runs only); false otherwise.
bool grow_in_place(void* p, size_t size);

// Size classes (exposed for tests).
int class_of(size_t size);
size_t class_size(int cls);

// This thread's cache back to the central lists (thread exit does it too).
void flush_thread_cache();

// pthread_atfork: take every arena lock before fork, release them after.
void before_fork();
void after_fork_parent();
void after_fork_child();

// True while this thread is inside an arena cold path (chunk commit,
// registration): a large allocation made by rdma-core from there goes to glibc.
bool in_cold_path();

} // namespace xp::alloc::arena
