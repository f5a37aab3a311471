// Registration cache for large buffers that did not come from the arenas
// (the program's own mmap, static data): a bounded set of registrations per
// protection domain slot (alloc/domain.h), least recently used evicted.
//
// An entry is dropped before its memory can change owner: preload/wrap_mem.cc
// calls invalidate_begin()/invalidate_end() around munmap, mremap,
// mmap(MAP_FIXED), madvise(MADV_DONTNEED|MADV_FREE|MADV_REMOVE), a shrinking
// brk/sbrk and shmdt.  While the cache is empty and nothing is being
// registered, a hook costs one atomic load.
//
// Not covered (so such memory is never cached): the brk heap, which glibc
// shrinks through internal calls no hook sees.  Also unseen: raw
// syscall(SYS_munmap) and glibc-internal unmapping of its non-main heaps;
// with the hook on, glibc only holds blocks below the threshold there.
//
// Data path use (stream/flow):
//   reg_cache::Ref r;
//   if (lookup_local(p, len, slot, &lkey)) ... arena memory: no cache needed
//   else if (reg_cache::get(p, len, slot, &r)) { post with r.lkey; on its
//       completion: reg_cache::put(r); }
//   else copy.
// get() on a miss registers (cold: tens of microseconds plus ~0.1 s per GB
// pinned), so callers should use it for buffers large enough to be worth it.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace xp::alloc::reg_cache {

struct Ref {
  uint32_t lkey = 0;
  uint32_t entry = 0;       // which entry holds the reference (internal)
  void* uncached = nullptr; // a registration not kept in the cache (put deregisters it)
  int slot = -1;
};

// [addr, addr+len) registered for local access with the domain in slot: a
// hit takes a reference (no system call); a miss registers and inserts.
// False (the caller copies) when the hook is off (XPRESS_ALLOC=0), the slot
// is not attached, len is 0, the range lies in the arenas or the brk heap,
// or registration failed.
bool get(const void* addr, size_t len, int slot, Ref* out);
// Drops the reference get() took (after the work request completed).
void put(const Ref& r);

// Whether a hook must do anything: entries exist or a registration is under way.
extern std::atomic<uint32_t> g_active;
inline bool active() {
  return g_active.load(std::memory_order_acquire) != 0;
}
// Memory in [addr, addr+len) is about to change owner: entries overlapping it
// are dropped (deregistered once unreferenced), and registrations that raced
// with it are not cached.  end() after the real call.
void invalidate_begin(const void* addr, size_t len);
void invalidate_end();
// shmdt: the segment's size is unknown here; drops every entry from addr up.
void invalidate_from(const void* addr);

// Hook for the libc calls: begin if active(), end on scope exit.
class Invalidation {
public:
  Invalidation(const void* addr, size_t len) : on_(len != 0 && active()) {
    if (on_) invalidate_begin(addr, len);
  }
  ~Invalidation() {
    if (on_) invalidate_end();
  }
  Invalidation(const Invalidation&) = delete;
  Invalidation& operator=(const Invalidation&) = delete;

private:
  bool on_;
};

// detach_domain(): deregister every entry of the slot.
void drop_domain(int slot);

// Bounds (defaults in the .cc); tests lower them.
void set_limits(uint32_t max_entries, size_t max_bytes);
// The most the cache pins (for the locked-memory check, stream/startup_checks.h).
size_t max_bytes();

void before_fork();
void after_fork_parent();
// The parent's registrations are unusable: forget them without deregistering.
void after_fork_child();

} // namespace xp::alloc::reg_cache
