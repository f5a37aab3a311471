// Data calls.  On a TCP-mode socket they are the kernel's calls plus a few
// relaxed counter updates; the record is looked up first so the RDMA data
// path can take over here without changing the shape of the wrappers.
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "preload/boundary.h"

using namespace xp;

namespace {

// TCP-mode sockets only need their statistics updated: an uncounted peek
// suffices (a close racing the call at worst credits the bytes to a
// recycled record).  The RDMA data path takes a counted reference instead.
template <typename T> inline T count_rx(SocketRecord* s, T n) {
  if (s && n > 0) track::count_rx(*s, static_cast<ssize_t>(n));
  return n;
}
template <typename T> inline T count_tx(SocketRecord* s, T n) {
  if (s && n > 0) track::count_tx(*s, static_cast<ssize_t>(n));
  return n;
}

ssize_t mmsg_bytes(const struct mmsghdr* v, int n) {
  ssize_t total = 0;
  for (int i = 0; i < n; ++i)
    total += v[i].msg_len;
  return total;
}

} // namespace

// ---- in ------------------------------------------------------------------

XP_EXPORT ssize_t read(int fd, void* buf, size_t count) {
  SocketRecord* s = track::peek(fd);
  return count_rx(s, XP_REAL(read, fd, buf, count));
}

XP_EXPORT ssize_t readv(int fd, const struct iovec* iov, int iovcnt) {
  SocketRecord* s = track::peek(fd);
  return count_rx(s, XP_REAL(readv, fd, iov, iovcnt));
}

XP_EXPORT ssize_t recv(int fd, void* buf, size_t len, int flags) {
  SocketRecord* s = track::peek(fd);
  ssize_t r = XP_REAL(recv, fd, buf, len, flags);
  return (flags & MSG_PEEK) ? r : count_rx(s, r);
}

XP_EXPORT ssize_t recvfrom(int fd, void* buf, size_t len, int flags, struct sockaddr* addr,
                           socklen_t* alen) {
  SocketRecord* s = track::peek(fd);
  ssize_t r = XP_REAL(recvfrom, fd, buf, len, flags, addr, alen);
  return (flags & MSG_PEEK) ? r : count_rx(s, r);
}

XP_EXPORT ssize_t recvmsg(int fd, struct msghdr* msg, int flags) {
  SocketRecord* s = track::peek(fd);
  ssize_t r = XP_REAL(recvmsg, fd, msg, flags);
  if (r >= 0 && msg != nullptr && msg->msg_controllen > 0) {
    int saved = errno;
    track::forget_passed_fds(msg);
    errno = saved;
  }
  return (flags & MSG_PEEK) ? r : count_rx(s, r);
}

XP_EXPORT int recvmmsg(int fd, struct mmsghdr* vec, unsigned int vlen, int flags,
                       struct timespec* timeout) {
  SocketRecord* s = track::peek(fd);
  int n = XP_REAL(recvmmsg, fd, vec, vlen, flags, timeout);
  if (n > 0) {
    int saved = errno;
    for (int i = 0; i < n; ++i)
      track::forget_passed_fds(&vec[i].msg_hdr);
    if (!(flags & MSG_PEEK)) count_rx(s, mmsg_bytes(vec, n));
    errno = saved;
  }
  return n;
}

// ---- out -----------------------------------------------------------------

XP_EXPORT ssize_t write(int fd, const void* buf, size_t count) {
  SocketRecord* s = track::peek(fd);
  return count_tx(s, XP_REAL(write, fd, buf, count));
}

XP_EXPORT ssize_t writev(int fd, const struct iovec* iov, int iovcnt) {
  SocketRecord* s = track::peek(fd);
  return count_tx(s, XP_REAL(writev, fd, iov, iovcnt));
}

XP_EXPORT ssize_t send(int fd, const void* buf, size_t len, int flags) {
  SocketRecord* s = track::peek(fd);
  return count_tx(s, XP_REAL(send, fd, buf, len, flags));
}

XP_EXPORT ssize_t sendto(int fd, const void* buf, size_t len, int flags,
                         const struct sockaddr* addr, socklen_t alen) {
  SocketRecord* s = track::peek(fd);
  return count_tx(s, XP_REAL(sendto, fd, buf, len, flags, addr, alen));
}

XP_EXPORT ssize_t sendmsg(int fd, const struct msghdr* msg, int flags) {
  SocketRecord* s = track::peek(fd);
  return count_tx(s, XP_REAL(sendmsg, fd, msg, flags));
}

XP_EXPORT int sendmmsg(int fd, struct mmsghdr* vec, unsigned int vlen, int flags) {
  SocketRecord* s = track::peek(fd);
  int n = XP_REAL(sendmmsg, fd, vec, vlen, flags);
  if (n > 0) count_tx(s, mmsg_bytes(vec, n));
  return n;
}

XP_EXPORT ssize_t sendfile(int out_fd, int in_fd, off_t* offset, size_t count) noexcept {
  SocketRecord* s = track::peek(out_fd);
  return count_tx(s, XP_REAL(sendfile, out_fd, in_fd, offset, count));
}

XP_EXPORT ssize_t sendfile64(int out_fd, int in_fd, off64_t* offset, size_t count) noexcept {
  SocketRecord* s = track::peek(out_fd);
  return count_tx(s, XP_REAL(sendfile64, out_fd, in_fd, offset, count));
}

XP_EXPORT ssize_t splice(int fd_in, loff_t* off_in, int fd_out, loff_t* off_out, size_t len,
                         unsigned int flags) {
  SocketRecord* in = track::peek(fd_in);
  SocketRecord* out = track::peek(fd_out);
  ssize_t r = XP_REAL(splice, fd_in, off_in, fd_out, off_out, len, flags);
  count_rx(in, r);
  return count_tx(out, r);
}

// ---- _FORTIFY_SOURCE entry points ----------------------------------------
// The size check stays glibc's (the real __*_chk reports the overflow);
// within bounds they are the plain calls above.

XP_EXPORT ssize_t __read_chk(int fd, void* buf, size_t nbytes, size_t buflen) {
  if (nbytes > buflen) return XP_REAL(__read_chk, fd, buf, nbytes, buflen);
  return read(fd, buf, nbytes);
}

XP_EXPORT ssize_t __recv_chk(int fd, void* buf, size_t len, size_t buflen, int flags) {
  if (len > buflen) return XP_REAL(__recv_chk, fd, buf, len, buflen, flags);
  return recv(fd, buf, len, flags);
}

XP_EXPORT ssize_t __recvfrom_chk(int fd, void* buf, size_t len, size_t buflen, int flags,
                                 struct sockaddr* addr, socklen_t* alen) {
  if (len > buflen) return XP_REAL(__recvfrom_chk, fd, buf, len, buflen, flags, addr, alen);
  return recvfrom(fd, buf, len, flags, addr, alen);
}
