// Lock rules checked, not only written: a function whose comment says
// "ch->mu held" starts with XP_ASSERT_HELD(ch->mu).
//
// Problem: a precondition such as "called with Channel::mu held" is easy
// to break from a new caller, and the race it opens shows up rarely and far
// from the cause.  Example: refreshing a stream's readiness without its
// channel's lock reads the receive buffer while the engine appends to it.
// Mechanism: glibc records the owner's thread id in every pthread mutex it
// locks (pthread_mutex_t.__data.__owner, set by lock, cleared by unlock),
// including the normal mutex behind std::mutex, so "held by this thread"
// is one load and a gettid.  The checked builds (common/check.h) abort with
// the lock's name, the place and both thread ids; the release library
// compiles the checks away.
#pragma once
#include <mutex>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/check.h"

namespace xp {

// This thread's id as the kernel knows it (what glibc records as owner).
inline int lock_check_tid() {
  return static_cast<int>(syscall(SYS_gettid));
}
// The thread id glibc recorded as mu's owner (0: not locked).
inline int lock_owner(const std::mutex& mu) {
  return const_cast<std::mutex&>(mu).native_handle()->__data.__owner;
}
inline bool held_by_this_thread(const std::mutex& mu) {
  return lock_owner(mu) == lock_check_tid();
}

} // namespace xp

#if XP_CHECKED
#define XP_ASSERT_HELD(mu)                                                                         \
  do {                                                                                             \
    if (!::xp::held_by_this_thread(mu))                                                            \
      ::xp::check_failed(__FILE__, __LINE__, "lock rule broken: %s held (owner tid %d, this %d)",  \
                         #mu, ::xp::lock_owner(mu), ::xp::lock_check_tid());                       \
  } while (0)
#else
#define XP_ASSERT_HELD(mu) ((void)0)
#endif
