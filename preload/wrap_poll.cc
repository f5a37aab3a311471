// Readiness: poll, select and epoll.  A socket in kernel mode is the
// kernel's own, so the kernel answers; a socket in user mode (its bytes
// arrive over RDMA, stream/ready_source.h) is answered by xpress
// (readiness.h for poll/select, epoll_state.h for epoll).  The checks that
// pick the kernel alone come first and cost a table lookup per fd.
#include <poll.h>
#include <sys/epoll.h>
#include <sys/select.h>

#include "preload/boundary.h"
#include "preload/epoll_state.h"
#include "preload/readiness.h"

using namespace xp;

XP_EXPORT int poll(struct pollfd* fds, nfds_t nfds, int timeout) {
  return readiness::poll(fds, nfds, timeout);
}

XP_EXPORT int ppoll(struct pollfd* fds, nfds_t nfds, const struct timespec* tmo,
                    const sigset_t* sigmask) {
  return readiness::ppoll(fds, nfds, tmo, sigmask);
}

XP_EXPORT int __poll_chk(struct pollfd* fds, nfds_t nfds, int timeout, size_t fdslen) {
  if (fdslen / sizeof(*fds) < nfds) return XP_REAL(__poll_chk, fds, nfds, timeout, fdslen);
  return readiness::poll(fds, nfds, timeout);
}

XP_EXPORT int __ppoll_chk(struct pollfd* fds, nfds_t nfds, const struct timespec* tmo,
                          const sigset_t* sigmask, size_t fdslen) {
  if (fdslen / sizeof(*fds) < nfds) return XP_REAL(__ppoll_chk, fds, nfds, tmo, sigmask, fdslen);
  return readiness::ppoll(fds, nfds, tmo, sigmask);
}

XP_EXPORT int select(int nfds, fd_set* r, fd_set* w, fd_set* e, struct timeval* timeout) {
  return readiness::select(nfds, r, w, e, timeout);
}

XP_EXPORT int pselect(int nfds, fd_set* r, fd_set* w, fd_set* e, const struct timespec* timeout,
                      const sigset_t* sigmask) {
  return readiness::pselect(nfds, r, w, e, timeout, sigmask);
}

XP_EXPORT int epoll_create(int size) noexcept {
  int fd = XP_REAL(epoll_create, size);
  if (fd >= 0) {
    int saved = errno;
    track::forget(fd);
    if (!in_vfork_child()) epoll::on_create(fd);
    errno = saved;
  }
  return fd;
}

XP_EXPORT int epoll_create1(int flags) noexcept {
  int fd = XP_REAL(epoll_create1, flags);
  if (fd >= 0) {
    int saved = errno;
    track::forget(fd);
    if (!in_vfork_child()) epoll::on_create(fd);
    errno = saved;
  }
  return fd;
}

XP_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event* event) noexcept {
  return epoll::ctl(epfd, op, fd, event);
}

XP_EXPORT int epoll_wait(int epfd, struct epoll_event* events, int maxevents, int timeout) {
  epoll::WaitCall c;
  c.kind = epoll::WaitCall::plain;
  c.timeout_ms = timeout;
  return epoll::wait(epfd, events, maxevents, c);
}

XP_EXPORT int epoll_pwait(int epfd, struct epoll_event* events, int maxevents, int timeout,
                          const sigset_t* sigmask) {
  epoll::WaitCall c;
  c.kind = epoll::WaitCall::pwait;
  c.timeout_ms = timeout;
  c.mask = sigmask;
  return epoll::wait(epfd, events, maxevents, c);
}

XP_EXPORT int epoll_pwait2(int epfd, struct epoll_event* events, int maxevents,
                           const struct timespec* timeout, const sigset_t* sigmask) {
  epoll::WaitCall c;
  c.kind = epoll::WaitCall::pwait2;
  c.ts = timeout;
  c.mask = sigmask;
  return epoll::wait(epfd, events, maxevents, c);
}
