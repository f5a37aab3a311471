// Connection set-up and teardown: socket, bind, listen, accept, connect,
// shutdown, close and the dup family.  The fd the program sees is always the
// real kernel socket; we only record what happened.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/fd_place.h"
#include "preload/boundary.h"
#include "preload/io_boundary.h"
#include "preload/readiness.h"
#include "stream/conn_io.h"

using namespace xp;

XP_EXPORT int socket(int domain, int type, int protocol) noexcept {
  int fd = XP_REAL(socket, domain, type, protocol);
  if (fd >= 0) {
    int saved = errno;
    track::on_socket(fd, domain, type);
    errno = saved;
  }
  return fd;
}

XP_EXPORT int socketpair(int domain, int type, int protocol, int sv[2]) noexcept {
  int r = XP_REAL(socketpair, domain, type, protocol, sv);
  if (r == 0) { // AF_UNIX (the only family Linux allows here): forget stale numbers
    track::forget(sv[0]);
    track::forget(sv[1]);
  }
  return r;
}

XP_EXPORT int bind(int fd, const struct sockaddr* addr, socklen_t len) noexcept {
  return XP_REAL(bind, fd, addr, len);
}

XP_EXPORT int listen(int fd, int backlog) noexcept {
  int r = XP_REAL(listen, fd, backlog);
  if (r == 0) track::on_listen(fd);
  return r;
}

XP_EXPORT int accept4(int fd, struct sockaddr* addr, socklen_t* len, int flags) {
  int nfd = XP_REAL(accept4, fd, addr, len, flags);
  if (nfd >= 0) {
    int saved = errno;
    track::on_accept(fd, nfd);
    errno = saved;
  }
  return nfd;
}

XP_EXPORT int accept(int fd, struct sockaddr* addr, socklen_t* len) {
  int nfd = XP_REAL(accept, fd, addr, len);
  if (nfd >= 0) {
    int saved = errno;
    track::on_accept(fd, nfd);
    errno = saved;
  }
  return nfd;
}

XP_EXPORT int connect(int fd, const struct sockaddr* addr, socklen_t len) {
  int r = XP_REAL(connect, fd, addr, len);
  if (r == 0 || errno == EINPROGRESS) {
    int saved = errno;
    track::on_connect(fd, addr, len);
    errno = saved;
  }
  return r;
}

XP_EXPORT int shutdown(int fd, int how) noexcept {
  SocketRef r = track::lookup(fd);
  if (r) {
    stream::Conn* c = r->conn.load(std::memory_order_acquire);
    if (c && c->phase.load() != stream::Phase::tcp) {
      IoResult x = stream::io::shutdown(c, how);
      if (!x.is(Status::to_kernel)) return static_cast<int>(preload::libc_return(x));
    }
  }
  return XP_REAL(shutdown, fd, how);
}

XP_EXPORT int close(int fd) {
  // Forget first: once the kernel closes, the number can be reused at once by
  // another thread's socket(), whose record we must not drop.
  readiness::on_close(fd);
  track::on_close(fd);
  return XP_REAL(close, fd);
}

namespace {
// close_range over [first, last] except xpress's own fds (common/fd_place.h):
// a daemon's "close everything" must not take the engine's channels away.
int close_range_sparing(unsigned first, unsigned last, int flags) {
  unsigned lo = first;
  while (true) {
    int in = next_internal(static_cast<int>(lo > 0x7fffffffu ? 0x7fffffffu : lo));
    if (in < 0 || static_cast<unsigned>(in) > last) return XP_REAL(close_range, lo, last, flags);
    if (static_cast<unsigned>(in) > lo) {
      int r = XP_REAL(close_range, lo, static_cast<unsigned>(in) - 1, flags);
      if (r != 0) return r;
    }
    if (static_cast<unsigned>(in) >= last) return 0;
    lo = static_cast<unsigned>(in) + 1;
  }
}
} // namespace

XP_EXPORT int close_range(unsigned int first, unsigned int last, int flags) noexcept {
  if ((flags & CLOSE_RANGE_CLOEXEC) == 0 && first <= last) {
    readiness::on_close_range(first, last);
    track::on_close_range(first, last);
    return close_range_sparing(first, last, flags);
  }
  return XP_REAL(close_range, first, last, flags);
}

XP_EXPORT void closefrom(int lowfd) noexcept {
  if (lowfd >= 0) {
    readiness::on_close_range(static_cast<unsigned>(lowfd), ~0u);
    track::on_close_range(static_cast<unsigned>(lowfd), ~0u);
    if (next_internal(lowfd) >= 0 && close_range_sparing(static_cast<unsigned>(lowfd), ~0u, 0) == 0)
      return;
  }
  auto fn = real::closefrom();
  if (fn) fn(lowfd);
}

XP_EXPORT int dup(int fd) noexcept {
  int nfd = XP_REAL(dup, fd);
  if (nfd >= 0) {
    readiness::on_dup(fd, nfd);
    track::on_dup(fd, nfd);
  }
  return nfd;
}

XP_EXPORT int dup2(int fd, int fd2) noexcept {
  int r = XP_REAL(dup2, fd, fd2);
  if (r >= 0) {
    readiness::on_dup(fd, r);
    track::on_dup(fd, r);
  }
  return r;
}

XP_EXPORT int dup3(int fd, int fd2, int flags) noexcept {
  int r = XP_REAL(dup3, fd, fd2, flags);
  if (r >= 0) {
    readiness::on_dup(fd, r);
    track::on_dup(fd, r);
  }
  return r;
}
