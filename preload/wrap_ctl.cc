// Control calls: fcntl, ioctl, socket options and names.  All reach the
// kernel socket unchanged; F_DUPFD creates a second name for a tracked socket.
#include <cstdarg>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include "preload/boundary.h"
#include "preload/io_boundary.h"
#include "preload/kernel_features.h"
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
      IoResult n = stream::io::readable_bytes(c);
      if (!n.is(Status::to_kernel)) return preload::ioctl_count_return(n, static_cast<int*>(arg));
    }
  }
  int r = XP_REAL(ioctl, fd, request, arg);
  if (r == 0 && request == FIONBIO) stream::io::fd_options_changed();
  return r;
}

XP_EXPORT int getsockopt(int fd, int level, int name, void* val, socklen_t* len) noexcept {
  if (level == IPPROTO_TCP && name == TCP_ZEROCOPY_RECEIVE && val != nullptr && len != nullptr &&
      *len >= static_cast<socklen_t>(sizeof(tcp_zerocopy_receive))) {
    // Zero-copy receive maps the kernel's receive queue: every byte must be
    // there.  Bytes xpress still holds go first, by the copy path, as the
    // kernel asks for bytes it cannot map (nothing mapped, recv_skip_hint).
    if (!track::on_kernel_feature(fd, Reason::kernel_feature, true)) {
      auto* zc = static_cast<tcp_zerocopy_receive*>(val);
      SocketRef r = track::lookup(fd);
      stream::Conn* c = r ? r->conn.load(std::memory_order_acquire) : nullptr;
      IoResult held = c ? stream::io::readable_bytes(c) : IoResult::fail(Status::to_kernel);
      if (held.ok() && held.n > 0) {
        zc->length = 0;
        zc->recv_skip_hint = static_cast<uint32_t>(held.n);
        return 0;
      }
      // Framed on TCP for good (it resumed): the kernel's queue holds
      // frames, never to be mapped as the program's bytes.
      errno = EINVAL;
      return -1;
    }
  }
  return XP_REAL(getsockopt, fd, level, name, val, len);
}

XP_EXPORT int setsockopt(int fd, int level, int name, const void* val, socklen_t len) noexcept {
  bool rx;
  Reason why = kfeat::of_setsockopt(level, name, val, len, &rx);
  if (why != Reason::none && !track::on_kernel_feature(fd, why, rx)) {
    // The kernel could not be given the connection cleanly: the program
    // goes on without the feature (kernel_features.h, refusal_errno).
    errno = kfeat::refusal_errno(why);
    return -1;
  }
  int r = XP_REAL(setsockopt, fd, level, name, val, len);
  if (r == 0 && why != Reason::none) {
    int saved = errno;
    track::after_kernel_feature(fd, why);
    errno = saved;
  }
  if (r == 0 && level == SOL_SOCKET) stream::io::fd_options_changed(); // SO_RCVTIMEO, SO_SNDTIMEO
  return r;
}

XP_EXPORT int getsockname(int fd, struct sockaddr* addr, socklen_t* len) noexcept {
  return XP_REAL(getsockname, fd, addr, len);
}

XP_EXPORT int getpeername(int fd, struct sockaddr* addr, socklen_t* len) noexcept {
  return XP_REAL(getpeername, fd, addr, len);
}

// syscall(): io_uring_setup makes the process's connections stay on TCP
// (kernel_features.h).  Six arguments are passed on, as glibc's syscall()
// reads them: the kernel looks only at those the call has.
XP_EXPORT long syscall(long number, ...) noexcept {
  va_list ap;
  va_start(ap, number);
  long a[6];
  for (long& x : a)
    x = va_arg(ap, long);
  va_end(ap);
  auto fn = real::syscall();
  if (fn == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  long r = fn(number, a[0], a[1], a[2], a[3], a[4], a[5]);
  if (number == SYS_io_uring_setup && r >= 0) {
    int saved = errno;
    kfeat::on_io_uring();
    errno = saved;
  }
  return r;
}
