// The malloc family (preload/alloc_table.def): thin forwarders to the hooked
// allocator (alloc/heap.h).  Nothing here may allocate, look up a symbol or
// depend on our constructor having run: the dynamic loader and other
// libraries' constructors call malloc before it, and dlsym calls it.
#include <cstdlib>
#include <malloc.h>
#include <pthread.h>
#include <sys/single_threaded.h>

#include "alloc/heap.h"
#include "common/fork_parts.h"

#define XP_EXPORT extern "C" __attribute__((visibility("default")))

#define XA(ret, name, params, args)                                                                \
  XP_EXPORT ret name params noexcept {                                                             \
    return xp::alloc::heap::name args;                                                             \
  }
#include "preload/alloc_table.def"
#undef XA

namespace {
namespace fp = xp::fork_parts;
// The common case decided here, on the fork handlers' page (alloc/heap.cc
// decides the rest).
XP_FORK_TEXT void before_fork() {
  if (!fp::used(fp::kAlloc) && __libc_single_threaded) return;
  xp::alloc::heap::before_fork();
}
XP_FORK_TEXT void after_fork_parent() {
  if (!fp::used(fp::kAlloc)) return;
  xp::alloc::heap::after_fork_parent();
}
XP_FORK_TEXT void after_fork_child() {
  if (!fp::used(fp::kAlloc | fp::kEngine)) return;
  xp::alloc::heap::after_fork_child();
}

// Registered before lifecycle.cc's handlers (constructor priority): prepare
// handlers run in reverse order of registration, so the arena locks are
// taken last before fork (other handlers may still allocate) and released
// first after it.
__attribute__((constructor(101))) void register_alloc_atfork() {
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}
} // namespace
