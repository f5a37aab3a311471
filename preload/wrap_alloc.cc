// The malloc family (preload/alloc_table.def): thin forwarders to the hooked
// allocator (alloc/heap.h).  Nothing here may allocate, look up a symbol or
// depend on our constructor having run: the dynamic loader and other
// libraries' constructors call malloc before it, and dlsym calls it.
#include <cstdlib>
#include <malloc.h>
#include <pthread.h>

#include "alloc/heap.h"

#define XP_EXPORT extern "C" __attribute__((visibility("default")))

#define XA(ret, name, params, args)                                                                \
  XP_EXPORT ret name params noexcept {                                                             \
    return xp::alloc::heap::name args;                                                             \
  }
#include "preload/alloc_table.def"
#undef XA

namespace {
void before_fork() {
  xp::alloc::heap::before_fork();
}
void after_fork_parent() {
  xp::alloc::heap::after_fork_parent();
}
void after_fork_child() {
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
