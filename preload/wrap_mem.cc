// Calls after which memory may belong to someone else: the registration
// cache must forget registrations of the range *before* the real call (a
// registration pins the old pages; a later send from the same address would
// otherwise read them).  With an empty cache each costs one atomic load.
// Not hooked, so not covered: raw syscall(SYS_munmap, ...), and glibc's
// internal calls (its free() trimming the brk heap: reg_cache never caches
// brk-heap memory).
#include <cstdarg>
#include <cstdint>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "alloc/reg_cache.h"
#include "preload/boundary.h"

using namespace xp;
using xp::alloc::reg_cache::Invalidation;

namespace {

void* do_mmap(real::mmap_fn fn, void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  // MAP_FIXED replaces what was there; MAP_FIXED_NOREPLACE fails instead.
  bool replaces = (flags & MAP_FIXED) != 0;
  Invalidation inv(replaces ? addr : nullptr, replaces ? len : 0);
  return fn(addr, len, prot, flags, fd, off);
}

bool drops_pages(int advice) {
  switch (advice) {
  case MADV_DONTNEED:
  case MADV_FREE:
  case MADV_REMOVE:
#ifdef MADV_DONTNEED_LOCKED
  case MADV_DONTNEED_LOCKED:
#endif
    return true;
  default:
    return false;
  }
}

uintptr_t current_break() {
  return static_cast<uintptr_t>(::syscall(SYS_brk, 0));
}

} // namespace

XP_EXPORT void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) noexcept {
  return do_mmap(real::mmap(), addr, len, prot, flags, fd, off);
}

XP_EXPORT void* mmap64(void* addr, size_t len, int prot, int flags, int fd, off64_t off) noexcept {
  return do_mmap(reinterpret_cast<real::mmap_fn>(real::mmap64()), addr, len, prot, flags, fd, off);
}

XP_EXPORT int munmap(void* addr, size_t len) noexcept {
  Invalidation inv(addr, len);
  return real::munmap()(addr, len);
}

XP_EXPORT void* mremap(void* old_addr, size_t old_len, size_t new_len, int flags, ...) noexcept {
  void* new_addr = nullptr;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    new_addr = va_arg(ap, void*);
    va_end(ap);
  }
  // The old range moves or shrinks, a fixed destination is replaced.
  Invalidation old_range(old_addr, old_len);
  Invalidation new_range(new_addr, new_addr != nullptr ? new_len : 0);
  return real::mremap()(old_addr, old_len, new_len, flags, new_addr);
}

XP_EXPORT int madvise(void* addr, size_t len, int advice) noexcept {
  bool drops = drops_pages(advice);
  Invalidation inv(drops ? addr : nullptr, drops ? len : 0);
  return real::madvise()(addr, len, advice);
}

XP_EXPORT int brk(void* addr) noexcept {
  uintptr_t cur = alloc::reg_cache::active() ? current_break() : 0;
  uintptr_t want = reinterpret_cast<uintptr_t>(addr);
  bool shrinks = want < cur;
  Invalidation inv(addr, shrinks ? cur - want : 0);
  return real::brk()(addr);
}

XP_EXPORT void* sbrk(intptr_t increment) noexcept {
  uintptr_t cur = increment < 0 && alloc::reg_cache::active() ? current_break() : 0;
  size_t drop = cur != 0 ? static_cast<size_t>(-increment) : 0;
  Invalidation inv(reinterpret_cast<void*>(cur - drop), drop);
  return real::sbrk()(increment);
}

XP_EXPORT int shmdt(const void* addr) noexcept {
  // The segment's size is not known here: drop everything from addr up.
  alloc::reg_cache::invalidate_from(addr);
  return real::shmdt()(addr);
}
