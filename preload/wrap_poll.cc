// Readiness: poll, select and epoll.  A TCP-mode socket is the kernel's own,
// so the kernel answers; RDMA streams join here with the data path.
#include <poll.h>
#include <sys/epoll.h>
#include <sys/select.h>

#include "preload/boundary.h"

using namespace xp;

XP_EXPORT int poll(struct pollfd* fds, nfds_t nfds, int timeout) {
  return XP_REAL(poll, fds, nfds, timeout);
}

XP_EXPORT int ppoll(struct pollfd* fds, nfds_t nfds, const struct timespec* tmo,
                    const sigset_t* sigmask) {
  return XP_REAL(ppoll, fds, nfds, tmo, sigmask);
}

XP_EXPORT int __poll_chk(struct pollfd* fds, nfds_t nfds, int timeout, size_t fdslen) {
  if (fdslen / sizeof(*fds) < nfds) return XP_REAL(__poll_chk, fds, nfds, timeout, fdslen);
  return poll(fds, nfds, timeout);
}

XP_EXPORT int __ppoll_chk(struct pollfd* fds, nfds_t nfds, const struct timespec* tmo,
                          const sigset_t* sigmask, size_t fdslen) {
  if (fdslen / sizeof(*fds) < nfds) return XP_REAL(__ppoll_chk, fds, nfds, tmo, sigmask, fdslen);
  return ppoll(fds, nfds, tmo, sigmask);
}

XP_EXPORT int select(int nfds, fd_set* r, fd_set* w, fd_set* e, struct timeval* timeout) {
  return XP_REAL(select, nfds, r, w, e, timeout);
}

XP_EXPORT int pselect(int nfds, fd_set* r, fd_set* w, fd_set* e, const struct timespec* timeout,
                      const sigset_t* sigmask) {
  return XP_REAL(pselect, nfds, r, w, e, timeout, sigmask);
}

XP_EXPORT int epoll_create(int size) noexcept {
  int fd = XP_REAL(epoll_create, size);
  if (fd >= 0) track::forget(fd);
  return fd;
}

XP_EXPORT int epoll_create1(int flags) noexcept {
  int fd = XP_REAL(epoll_create1, flags);
  if (fd >= 0) track::forget(fd);
  return fd;
}

XP_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event* event) noexcept {
  return XP_REAL(epoll_ctl, epfd, op, fd, event);
}

XP_EXPORT int epoll_wait(int epfd, struct epoll_event* events, int maxevents, int timeout) {
  return XP_REAL(epoll_wait, epfd, events, maxevents, timeout);
}

XP_EXPORT int epoll_pwait(int epfd, struct epoll_event* events, int maxevents, int timeout,
                          const sigset_t* sigmask) {
  return XP_REAL(epoll_pwait, epfd, events, maxevents, timeout, sigmask);
}

XP_EXPORT int epoll_pwait2(int epfd, struct epoll_event* events, int maxevents,
                           const struct timespec* timeout, const sigset_t* sigmask) {
  return XP_REAL(epoll_pwait2, epfd, events, maxevents, timeout, sigmask);
}
