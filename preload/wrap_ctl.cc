// Control calls: fcntl, ioctl, socket options and names.  All reach the
// kernel socket unchanged; F_DUPFD creates a second name for a tracked socket.
#include <cstdarg>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "preload/boundary.h"
#include "preload/readiness.h"
#include "stream/conn_io.h"

using namespace xp;

namespace {
// fcntl's third argument is an int or a pointer; passing it on as a
// pointer-sized integer is what glibc itself does.
int do_fcntl(real::fcntl_fn fn, int fd, int cmd, void* arg) {
  if (fn == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  int r = fn(fd, cmd, arg);
  if (r >= 0 && cmd == F_SETFL) stream::io::fd_options_changed(); // O_NONBLOCK
  if (r >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)) {
    int saved = errno;
    readiness::on_dup(fd, r);
    track::on_dup(fd, r);
    errno = saved;
  }
  return r;
}
} // namespace

XP_EXPORT int fcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return do_fcntl(real::fcntl(), fd, cmd, arg);
}

XP_EXPORT int fcntl64(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return do_fcntl(real::fcntl64(), fd, cmd, arg);
}

XP_EXPORT int ioctl(int fd, unsigned long request, ...) noexcept {
  va_list ap;
  va_start(ap, request);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  if (request == FIONREAD && arg != nullptr) {
    SocketRef r = track::lookup(fd);
    stream::Conn* c = r ? r->conn.load(std::memory_order_acquire) : nullptr;
    if (c && c->phase.load() != stream::Phase::tcp) {
      bool kernel;
      int x = stream::io::readable_bytes(c, static_cast<int*>(arg), &kernel);
      if (!kernel) return x;
    }
  }
  int r = XP_REAL(ioctl, fd, request, arg);
  if (r == 0 && request == FIONBIO) stream::io::fd_options_changed();
  return r;
}

XP_EXPORT int getsockopt(int fd, int level, int name, void* val, socklen_t* len) noexcept {
  return XP_REAL(getsockopt, fd, level, name, val, len);
}

XP_EXPORT int setsockopt(int fd, int level, int name, const void* val, socklen_t len) noexcept {
  int r = XP_REAL(setsockopt, fd, level, name, val, len);
  if (r == 0 && level == SOL_SOCKET) stream::io::fd_options_changed(); // SO_RCVTIMEO, SO_SNDTIMEO
  return r;
}

XP_EXPORT int getsockname(int fd, struct sockaddr* addr, socklen_t* len) noexcept {
  return XP_REAL(getsockname, fd, addr, len);
}

XP_EXPORT int getpeername(int fd, struct sockaddr* addr, socklen_t* len) noexcept {
  return XP_REAL(getpeername, fd, addr, len);
}
