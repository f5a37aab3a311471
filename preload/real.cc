#include "preload/real.h"

#include <atomic>
#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload/log.h"

namespace xp::real {
namespace {

// Our own load address, to recognise a lookup that found our own wrapper
// (which would recurse forever).
const void* own_base() {
  static const void* base = [] {
    Dl_info info{};
    dladdr(reinterpret_cast<void*>(&own_base), &info);
    return static_cast<const void*>(info.dli_fbase);
  }();
  return base;
}

void* lookup(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (f != nullptr) {
    Dl_info info{};
    if (dladdr(f, &info) != 0 && info.dli_fbase == own_base()) {
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
#define XP(ret, name, params) (void)name();
#include "preload/interpose_table.def"
#undef XP
}

} // namespace xp::real
