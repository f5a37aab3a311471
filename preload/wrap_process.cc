// Processes.  fork's bookkeeping lives in pthread_atfork handlers (lifecycle)
// so that daemon() and other internal forks get it too.  vfork is an assembly
// stub (vfork_entry.S) on x86-64: a C wrapper's frame would be destroyed by
// the child before the parent returns through it.
#include <sys/syscall.h>
#include <unistd.h>

#include "common/fork_parts.h"
#include "preload/boundary.h"
#include "preload/log.h"
#include "stream/engine.h"

using namespace xp;

// On the fork handlers' page (common/fork_parts.h): the child returns through it.
XP_EXPORT XP_FORK_TEXT pid_t fork(void) noexcept {
  ensure_init();
  pid_t pid = XP_REAL(fork);
  if (pid > 0) {
    XP_LOG(debug, "fork: child %d", pid);
    // The sockets shared with the child are watched until it (and whatever
    // inherited them from it) let go (docs/protocol.md §7 "After a fork"):
    // a pidfd for this pid wakes the engine when it exits.
    if (fork_parts::used(fork_parts::kEngine)) stream::engine::forked(pid);
  }
  return pid;
}

// _exit skips atexit handlers and destructors, not the kernel's close of
// the sockets: the streams end here as they would at exit().  (exit()
// reaches the kernel through glibc's own _exit, not this one.)  Never in a
// vfork child, which runs on its parent's memory (before_exit checks).
XP_EXPORT void _exit(int status) noexcept {
  before_exit();
  if (auto fn = real::_exit()) fn(status);
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
}
XP_EXPORT void _Exit(int status) noexcept {
  before_exit();
  if (auto fn = real::_Exit()) fn(status);
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
}

XP_EXPORT int daemon(int nochdir, int noclose) noexcept {
  ensure_init();
  return XP_REAL(daemon, nochdir, noclose);
}

#if !defined(__x86_64__)
// Elsewhere vfork is served by fork, which POSIX allows (a vfork child may
// only exec or _exit, and both behave the same after fork).
XP_EXPORT pid_t vfork(void) noexcept {
  return fork();
}
#endif
