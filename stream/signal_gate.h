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
//
// Every blocked data call sleeps through here (conn_io.cc Waiter, the
// resumed stream's resume_io.cc wait): one deadline rule (sleep_timeout)
// and one restart rule (SignalGate::sleep_call), as the kernel's blocked
// socket calls have.
#pragma once
#include <csignal>
#include <cstdint>
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

  // One sleep of a blocked socket call, then the kernel's rule for a call
  // a signal handler interrupted (signal(7)): with a socket timeout
  // (`timed`) it ends with EINTR even under SA_RESTART, otherwise it
  // restarts unless the handler lacks SA_RESTART.  Which signal it was is
  // not known, so every handler that could have run counts (restarts()).
  // The number of ready entries (>= 0: 0 also after a restart or another
  // failure of the sleep: the caller re-checks its state and sleeps
  // again), or -1 with errno EINTR: the call returns EINTR.
  long sleep_call(pollfd* p, int n, int timeout_ms, bool timed);

  // Whether every handler that could interrupt this call's sleep asks for
  // SA_RESTART: those of the signals the call's own mask lets in, except
  // the faults hold() never holds (they interrupt no sleep: they come from
  // the faulting instruction, and a crash handler's flags say nothing
  // about restarting).
  bool restarts() const;

private:
  bool held_ = false;
  sigset_t saved_; // the call's own mask, valid once held_
};

// The timeout of a blocked call's next sleep: what is left until
// deadline_ms (-1: no deadline; now_ms: the same clock), at most cap_ms
// (-1: no cap), -1 for neither.  False once the deadline passed: the
// call's socket timeout ends it with EAGAIN, as the kernel's.
bool sleep_timeout(int64_t deadline_ms, int64_t now_ms, int cap_ms, int* timeout_ms);

} // namespace xp::stream
