#include "preload/real.h"

#include <atomic>
#include <cstdint>
#include <dlfcn.h>
#include <link.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload/log.h"

namespace xp::real {
namespace {

// The address range of our own loaded segments, to recognise a lookup that
// found our own wrapper (which would recurse forever).  Computed once with
// dl_iterate_phdr: a dladdr per symbol costs ~100k instructions at start-up.
struct Range {
  uintptr_t lo = 0, hi = 0;
};

int find_self(dl_phdr_info* info, size_t, void* data) {
  auto* r = static_cast<Range*>(data);
  uintptr_t self = reinterpret_cast<uintptr_t>(&find_self);
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    uintptr_t a = info->dlpi_addr + ph.p_vaddr;
    if (a < lo) lo = a;
    if (a + ph.p_memsz > hi) hi = a + ph.p_memsz;
  }
  if (self < lo || self >= hi) return 0;
  r->lo = lo;
  r->hi = hi;
  return 1;
}

const Range& own_range() {
  static const Range range = [] {
    Range r;
    dl_iterate_phdr(find_self, &r);
    return r;
  }();
  return range;
}

void* lookup(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (f != nullptr) {
    uintptr_t a = reinterpret_cast<uintptr_t>(f);
    if (a >= own_range().lo && a < own_range().hi) {
      // Cannot happen with a sane link order; say so instead of recursing.
      static const char msg[] = "xpress: fatal: dlsym(RTLD_NEXT) returned xpress's own wrapper\n";
      ::syscall(SYS_write, 2, msg, sizeof msg - 1);
      ::abort();
    }
  }
  return f;
}

} // namespace

// A missing symbol (e.g. an older glibc without epoll_pwait2) stays null; the
// wrapper then reports ENOSYS as a libc without that function would.
#define XP(ret, name, params)                                                                      \
  static std::atomic<name##_fn> g_##name{nullptr};                                                 \
  name##_fn name() {                                                                               \
    name##_fn f = g_##name.load(std::memory_order_acquire);                                        \
    if (__builtin_expect(f == nullptr, 0)) {                                                       \
      f = reinterpret_cast<name##_fn>(lookup(#name));                                              \
      g_##name.store(f, std::memory_order_release);                                                \
    }                                                                                              \
    return f;                                                                                      \
  }
#include "preload/interpose_table.def"
#undef XP

void resolve_all() {
  static std::atomic<bool> done{false};
  if (__builtin_expect(done.load(std::memory_order_acquire), 1)) return;
#define XP(ret, name, params) (void)name();
#include "preload/interpose_table.def"
#undef XP
  done.store(true, std::memory_order_release);
}

} // namespace xp::real
