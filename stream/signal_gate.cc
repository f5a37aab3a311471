// See signal_gate.h.
#include "stream/signal_gate.h"

#include <cerrno>
#include <ctime>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace xp::stream {
namespace {

// Synchronous faults: never held, and not a reason to end a sleep.
constexpr int kFaults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS};

bool is_fault(int sig) {
  for (int f : kFaults)
    if (sig == f) return true;
  return false;
}

} // namespace

void SignalGate::hold() {
  if (held_) return;
  sigset_t all;
  sigfillset(&all);
  for (int sig : kFaults)
    sigdelset(&all, sig);
  held_ = pthread_sigmask(SIG_BLOCK, &all, &saved_) == 0;
}

long SignalGate::sleep(pollfd* p, int n, int timeout_ms) {
  if (!held_) return syscall(SYS_poll, p, n, timeout_ms);
  timespec ts = {timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
  return syscall(SYS_ppoll, p, n, timeout_ms < 0 ? nullptr : &ts, &saved_, _NSIG / 8);
}

long SignalGate::sleep_call(pollfd* p, int n, int timeout_ms, bool timed) {
  long r = sleep(p, n, timeout_ms);
  if (r >= 0) return r;
  if (errno == EINTR && (timed || !restarts())) return -1; // errno stays EINTR
  return 0;
}

bool SignalGate::restarts() const {
  sigset_t mask;
  if (held_)
    mask = saved_;
  else if (pthread_sigmask(SIG_SETMASK, nullptr, &mask) != 0)
    sigemptyset(&mask);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (is_fault(sig) || sigismember(&mask, sig) == 1) continue;
    struct sigaction sa;
    if (sigaction(sig, nullptr, &sa) != 0) continue;
    if (sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN) continue;
    if (!(sa.sa_flags & SA_RESTART)) return false;
  }
  return true;
}

bool sleep_timeout(int64_t deadline_ms, int64_t now_ms, int cap_ms, int* timeout_ms) {
  int t = cap_ms;
  if (deadline_ms >= 0) {
    int64_t left = deadline_ms - now_ms;
    if (left <= 0) return false;
    if (t < 0 || left < t) t = left > INT32_MAX ? INT32_MAX : static_cast<int>(left);
  }
  *timeout_ms = t;
  return true;
}

} // namespace xp::stream
