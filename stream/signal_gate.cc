// See signal_gate.h.
#include "stream/signal_gate.h"

#include <ctime>
#include <initializer_list>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace xp::stream {

void SignalGate::hold() {
  if (held_) return;
  sigset_t all;
  sigfillset(&all);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS})
    sigdelset(&all, sig);
  held_ = pthread_sigmask(SIG_BLOCK, &all, &saved_) == 0;
}

long SignalGate::sleep(pollfd* p, int n, int timeout_ms) {
  if (!held_) return syscall(SYS_poll, p, n, timeout_ms);
  timespec ts = {timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
  return syscall(SYS_ppoll, p, n, timeout_ms < 0 ? nullptr : &ts, &saved_, _NSIG / 8);
}

bool signals_restart() {
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction sa;
    if (sigaction(sig, nullptr, &sa) != 0) continue;
    if (sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN) continue;
    if (!(sa.sa_flags & SA_RESTART)) return false;
  }
  return true;
}

} // namespace xp::stream
