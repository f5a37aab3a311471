// The sleep of a blocked data call, safe against a lost EINTR.
//
// Problem: a blocked recv() checks its state, then sleeps in poll().  A
// signal that arrives between the two runs its handler in user space; the
// poll() that follows never sees it and sleeps on, where the kernel's own
// recv() would have returned EINTR (a handler without SA_RESTART).
// Example: the semantics case eintr_restart hung this way.
// Mechanism (the pselect idiom): from its first sleep on, the call holds
// asynchronous signals and lets them in only inside ppoll(), which then
// returns EINTR; the call's mask is restored when it returns.  Calls that
// never sleep pay nothing.
#pragma once
#include <csignal>
#include <poll.h>

namespace xp::stream {

class SignalGate {
public:
  SignalGate() = default;
  SignalGate(const SignalGate&) = delete;
  SignalGate& operator=(const SignalGate&) = delete;
  ~SignalGate() {
    if (held_) pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
  }

  // Holds every asynchronous signal until the call returns (faults such as
  // SIGSEGV still reach their handlers at once).  The caller re-checks its
  // state before the first sleep: what came before is seen then.
  void hold();
  bool held() const { return held_; }

  // poll(p, n, timeout_ms) (-1: no timeout), with the held signals let in
  // while it sleeps.  The system call's result, errno set.
  long sleep(pollfd* p, int n, int timeout_ms);

private:
  bool held_ = false;
  sigset_t saved_; // the call's own mask, valid once held_
};

// Whether every installed handler restarts calls (SA_RESTART): a blocked
// call without a timeout then goes on after a handler ran, as the kernel's.
bool signals_restart();

} // namespace xp::stream
