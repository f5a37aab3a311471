// The readiness layer's entry points outside epoll: hooks the fd wrappers
// call when numbers close or get duplicated, poll/ppoll/select/pselect for
// sockets in user mode (stream/ready_source.h), and xpress's internal fds.
#pragma once
#include <cstdint>
#include <poll.h>
#include <signal.h>
#include <sys/select.h>
#include <time.h>

#include "stream/spin_gate.h"

namespace xp::readiness {

// Hooks for the fd wrappers (wrap_socket.cc, wrap_ctl.cc).  All cheap when
// the number has nothing to do with the readiness layer.
void on_close(int fd);                              // before the real close
void on_close_range(unsigned first, unsigned last); // before a real close_range/closefrom
// After a successful dup/dup2/dup3/F_DUPFD, before track::on_dup: newfd's
// previous occupant (which dup2 just closed) is handled like a close -- the
// socket table still names it -- then newfd names what oldfd names.
void on_dup(int oldfd, int newfd);

// poll and select: user-mode fds are answered from their ReadySource, the
// kernel gets the others.  Identical to the real calls when no fd is in user
// mode.
int poll(struct pollfd* fds, nfds_t nfds, int timeout_ms);
int ppoll(struct pollfd* fds, nfds_t nfds, const struct timespec* tmo, const sigset_t* sigmask);
int select(int nfds, fd_set* r, fd_set* w, fd_set* e, struct timeval* tv);
int pselect(int nfds, fd_set* r, fd_set* w, fd_set* e, const struct timespec* ts,
            const sigset_t* sigmask);

// poll/select/epoll_wait on connections xpress answers for spin a short
// time before they sleep: each round polls the process's channels, so a
// request/response loop never pays for a sleep and a wake-up through the
// engine thread.  How long follows this thread's recent waits
// (stream::engine::spin_budget_ns); at most the call's timeout.  A signal
// handled during the spin does not end the call with EINTR (the kernel's
// would): XPRESS_SPIN_US=0 turns spinning off.
class SpinPhase {
public:
  SpinPhase();
  ~SpinPhase(); // a call that waited folds its wait into the thread's average
  SpinPhase(const SpinPhase&) = delete;
  SpinPhase& operator=(const SpinPhase&) = delete;
  // One more busy-poll round (left_ns: the call's time left, -1 none);
  // false: time to sleep.
  bool spin(int64_t left_ns);
  // Every few rounds: also ask the kernel about the call's other fds.
  bool kernel_round() const { return (rounds_ & 3) == 0; }

private:
  int64_t began_, end_ = -1;
  unsigned rounds_ = 0;
  stream::spin_gate::Ticket ticket_; // spinning takes one (stream/spin_gate.h)
};

// xpress's own fds: close-on-exec, made with raw system calls (never
// tracked), and moved above the numbers a program expects to get (a program
// may rely on the lowest free number, e.g. to see POLLNVAL on one it just
// closed).  -1 on failure.
int internal_eventfd();
int internal_epoll();
void close_internal(int fd);
// Eventfd counter: make readable / consume (non-blocking).
void eventfd_raise(int efd);
void eventfd_drain(int efd);

} // namespace xp::readiness
