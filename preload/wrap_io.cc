// Data calls.  On a TCP-mode socket they are the kernel's calls plus a few
// relaxed counter updates; the record is looked up first so the RDMA data
// path can take over here without changing the shape of the wrappers.
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include "preload/boundary.h"
#include "preload/io_boundary.h"
#include "stream/conn_io.h"

using namespace xp;

namespace {

// Whether fd needs the connection path (an upgrade under way or done, or
// one to start): one relaxed load on plain TCP sockets.
inline bool slow(SocketRecord* s) {
  return s && __builtin_expect(s->conn.load(std::memory_order_relaxed) != nullptr ||
                                   s->deferred.load(std::memory_order_relaxed),
                               0);
}

// MSG_ZEROCOPY: the kernel reports the send's completion on the socket's
// error queue, which a stream on RDMA never gets, so the stream moves to
// TCP before the first such send (README "Kernel features").  False: it
// could not, and the send fails with ENOBUFS, as the kernel's does when it
// cannot send zero-copy (programs then send with a copy).
inline bool zerocopy_send_ok(int fd, SocketRecord* s, int flags) {
  if (__builtin_expect(!(flags & MSG_ZEROCOPY) || !slow(s), 1)) return true;
  if (track::on_kernel_feature(fd, Reason::kernel_feature, false)) return true;
  errno = ENOBUFS;
  return false;
}

// A receive the stream serves: not one of the socket's error queue (zero-copy
// completions, timestamps, ICMP errors: the kernel's, whatever carries the
// bytes), which reads no stream byte.
inline bool stream_recv(SocketRecord* s, int flags) {
  return slow(s) && !(flags & MSG_ERRQUEUE);
}
// Bytes a receive took from the stream (statistics): not a peek, not the
// error queue's.
inline bool takes_bytes(int flags) {
  return !(flags & (MSG_PEEK | MSG_ERRQUEUE));
}

// The connection behind fd, counted, once any deferred upgrade started;
// null when the kernel serves fd.
struct ConnRef {
  SocketRef rec;
  stream::Conn* c = nullptr;
};
bool conn_of(int fd, ConnRef* out) {
  out->rec = track::lookup(fd);
  if (!out->rec) return false;
  if (out->rec->deferred.load(std::memory_order_acquire)) {
    int saved = errno;
    track::start_deferred(*out->rec);
    errno = saved;
  }
  out->c = out->rec->conn.load(std::memory_order_acquire);
  return out->c != nullptr && out->c->phase.load(std::memory_order_acquire) != stream::Phase::tcp;
}

// recv/send through the connection, as the libc call returns
// (preload::served); *kernel when the kernel must do it.
using preload::served;
ssize_t conn_recv(int fd, const iovec* iov, int n, int flags, bool* kernel) {
  ConnRef r;
  if (!conn_of(fd, &r)) {
    *kernel = true;
    return 0;
  }
  return served(stream::io::recv(r.c, iov, n, flags), kernel);
}
ssize_t conn_send(int fd, const iovec* iov, int n, int flags, bool* kernel) {
  ConnRef r;
  if (!conn_of(fd, &r)) {
    *kernel = true;
    return 0;
  }
  return served(stream::io::send(r.c, iov, n, flags), kernel);
}

// splice needs a pipe on one side (else the kernel's EINVAL).
bool is_pipe(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
}

// Staging for sendfile/splice on RDMA streams: allocated by a thread's first
// such call, kept until the thread exits (no allocation per call).  Only its
// pointer is thread-local: every thread of a preloaded program carries the
// library's static TLS, and glibc refuses a thread whose stack cannot hold it.
constexpr size_t kStage = 64 * 1024;
struct Stage {
  char* p = nullptr;
  ~Stage() { free(p); }
};
thread_local Stage t_stage;

// This thread's staging buffer; null (errno ENOMEM) when none can be had.
char* stage() {
  Stage& st = t_stage;
  if (__builtin_expect(st.p == nullptr, 0)) {
    st.p = static_cast<char*>(malloc(kStage));
    if (!st.p) errno = ENOMEM;
  }
  return st.p;
}

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
  track::CallInFlight in_flight(s);
  if (slow(s)) {
    bool kernel;
    iovec v{buf, count};
    ssize_t r = conn_recv(fd, &v, 1, 0, &kernel);
    if (!kernel) return count_rx(s, r);
  }
  return count_rx(s, XP_REAL(read, fd, buf, count));
}

XP_EXPORT ssize_t readv(int fd, const struct iovec* iov, int iovcnt) {
  SocketRecord* s = track::peek(fd);
  track::CallInFlight in_flight(s);
  if (slow(s) && iovcnt >= 0) {
    bool kernel;
    ssize_t r = conn_recv(fd, iov, iovcnt, 0, &kernel);
    if (!kernel) return count_rx(s, r);
  }
  return count_rx(s, XP_REAL(readv, fd, iov, iovcnt));
}

XP_EXPORT ssize_t recv(int fd, void* buf, size_t len, int flags) {
  SocketRecord* s = track::peek(fd);
  track::CallInFlight in_flight(s);
  if (stream_recv(s, flags)) {
    bool kernel;
    iovec v{buf, len};
    ssize_t r = conn_recv(fd, &v, 1, flags, &kernel);
    if (!kernel) return (flags & MSG_PEEK) ? r : count_rx(s, r);
  }
  ssize_t r = XP_REAL(recv, fd, buf, len, flags);
  return takes_bytes(flags) ? count_rx(s, r) : r;
}

XP_EXPORT ssize_t recvfrom(int fd, void* buf, size_t len, int flags, struct sockaddr* addr,
                           socklen_t* alen) {
  SocketRecord* s = track::peek(fd);
  track::CallInFlight in_flight(s);
  if (stream_recv(s, flags)) {
    bool kernel;
    iovec v{buf, len};
    ssize_t r = conn_recv(fd, &v, 1, flags, &kernel);
    if (!kernel) {
      if (r >= 0 && addr && alen) *alen = 0; // TCP reports no source address
      return (flags & MSG_PEEK) ? r : count_rx(s, r);
    }
  }
  ssize_t r = XP_REAL(recvfrom, fd, buf, len, flags, addr, alen);
  return takes_bytes(flags) ? count_rx(s, r) : r;
}

XP_EXPORT ssize_t recvmsg(int fd, struct msghdr* msg, int flags) {
  SocketRecord* s = track::peek(fd);
  track::CallInFlight in_flight(s);
  if (stream_recv(s, flags) && msg != nullptr && msg->msg_iovlen <= 1024) {
    bool kernel;
    ssize_t r = conn_recv(fd, msg->msg_iov, static_cast<int>(msg->msg_iovlen), flags, &kernel);
    if (!kernel) {
      if (r >= 0) {
        msg->msg_namelen = 0;
        msg->msg_controllen = 0; // no ancillary data travels over RDMA
        msg->msg_flags = 0;
      }
      return (flags & MSG_PEEK) ? r : count_rx(s, r);
    }
  }
  ssize_t r = XP_REAL(recvmsg, fd, msg, flags);
  if (r >= 0 && msg != nullptr && msg->msg_controllen > 0) {
    int saved = errno;
    track::forget_passed_fds(msg);
    errno = saved;
  }
  return takes_bytes(flags) ? count_rx(s, r) : r;
}

XP_EXPORT int recvmmsg(int fd, struct mmsghdr* vec, unsigned int vlen, int flags,
                       struct timespec* timeout) {
  SocketRecord* s = track::peek(fd);
  track::CallInFlight in_flight(s);
  if (stream_recv(s, flags) && vec != nullptr && vlen > 0) {
    // One message per stream read: the first as the flags say, the rest
    // only while bytes are ready (a byte stream has no message boundaries).
    unsigned i = 0;
    for (; i < vlen; ++i) {
      bool kernel;
      int f = i == 0 ? (flags & ~MSG_WAITFORONE) : (flags | MSG_DONTWAIT);
      if ((flags & MSG_WAITFORONE) && i > 0) f |= MSG_DONTWAIT;
      msghdr* m = &vec[i].msg_hdr;
      ssize_t r = conn_recv(fd, m->msg_iov, static_cast<int>(m->msg_iovlen), f, &kernel);
      if (kernel) break;
      if (r < 0) {
        if (i == 0) return -1;
        break;
      }
      vec[i].msg_len = static_cast<unsigned>(r);
      m->msg_controllen = 0;
      m->msg_flags = 0;
      if (r == 0) {
        ++i;
        break;
      }
    }
    if (i > 0) {
      if (!(flags & MSG_PEEK)) count_rx(s, mmsg_bytes(vec, static_cast<int>(i)));
      return static_cast<int>(i);
    }
  }
  int n = XP_REAL(recvmmsg, fd, vec, vlen, flags, timeout);
  if (n > 0) {
    int saved = errno;
    for (int i = 0; i < n; ++i)
      track::forget_passed_fds(&vec[i].msg_hdr);
    if (takes_bytes(flags)) count_rx(s, mmsg_bytes(vec, n));
    errno = saved;
  }
  return n;
}

// ---- out -----------------------------------------------------------------

XP_EXPORT ssize_t write(int fd, const void* buf, size_t count) {
  SocketRecord* s = track::peek(fd);
  track::CallInFlight in_flight(s);
  if (slow(s)) {
    bool kernel;
    iovec v{const_cast<void*>(buf), count};
    ssize_t r = conn_send(fd, &v, 1, 0, &kernel);
    if (!kernel) return count_tx(s, r);
  }
  return count_tx(s, XP_REAL(write, fd, buf, count));
}

XP_EXPORT ssize_t writev(int fd, const struct iovec* iov, int iovcnt) {
  SocketRecord* s = track::peek(fd);
  track::CallInFlight in_flight(s);
  if (slow(s) && iovcnt >= 0) {
    bool kernel;
    ssize_t r = conn_send(fd, iov, iovcnt, 0, &kernel);
    if (!kernel) return count_tx(s, r);
  }
  return count_tx(s, XP_REAL(writev, fd, iov, iovcnt));
}

XP_EXPORT ssize_t send(int fd, const void* buf, size_t len, int flags) {
  SocketRecord* s = track::peek(fd);
  track::CallInFlight in_flight(s);
  if (!zerocopy_send_ok(fd, s, flags)) return -1;
  if (slow(s)) {
    bool kernel;
    iovec v{const_cast<void*>(buf), len};
    ssize_t r = conn_send(fd, &v, 1, flags, &kernel);
    if (!kernel) return count_tx(s, r);
  }
  return count_tx(s, XP_REAL(send, fd, buf, len, flags));
}

XP_EXPORT ssize_t sendto(int fd, const void* buf, size_t len, int flags,
                         const struct sockaddr* addr, socklen_t alen) {
  SocketRecord* s = track::peek(fd);
  track::CallInFlight in_flight(s);
  if (!zerocopy_send_ok(fd, s, flags)) return -1;
  if (slow(s)) { // a connected TCP socket ignores the address
    bool kernel;
    iovec v{const_cast<void*>(buf), len};
    ssize_t r = conn_send(fd, &v, 1, flags, &kernel);
    if (!kernel) return count_tx(s, r);
  }
  return count_tx(s, XP_REAL(sendto, fd, buf, len, flags, addr, alen));
}

XP_EXPORT ssize_t sendmsg(int fd, const struct msghdr* msg, int flags) {
  SocketRecord* s = track::peek(fd);
  track::CallInFlight in_flight(s);
  if (!zerocopy_send_ok(fd, s, flags)) return -1;
  if (slow(s) && msg != nullptr && msg->msg_iovlen <= 1024) {
    bool kernel;
    ssize_t r = conn_send(fd, msg->msg_iov, static_cast<int>(msg->msg_iovlen), flags, &kernel);
    if (!kernel) return count_tx(s, r);
  }
  return count_tx(s, XP_REAL(sendmsg, fd, msg, flags));
}

XP_EXPORT int sendmmsg(int fd, struct mmsghdr* vec, unsigned int vlen, int flags) {
  SocketRecord* s = track::peek(fd);
  track::CallInFlight in_flight(s);
  if (!zerocopy_send_ok(fd, s, flags)) return -1;
  if (slow(s) && vec != nullptr && vlen > 0) {
    unsigned i = 0;
    for (; i < vlen; ++i) {
      bool kernel;
      msghdr* m = &vec[i].msg_hdr;
      ssize_t r = conn_send(fd, m->msg_iov, static_cast<int>(m->msg_iovlen), flags, &kernel);
      if (kernel) break;
      if (r < 0) {
        if (i == 0) return -1;
        break;
      }
      vec[i].msg_len = static_cast<unsigned>(r);
    }
    if (i > 0) {
      count_tx(s, mmsg_bytes(vec, static_cast<int>(i)));
      return static_cast<int>(i);
    }
  }
  int n = XP_REAL(sendmmsg, fd, vec, vlen, flags);
  if (n > 0) count_tx(s, mmsg_bytes(vec, n));
  return n;
}

namespace {

// sendfile onto a stream: file bytes through a staging buffer.  The file
// offset (or position) advances only by what the stream took.
ssize_t stream_sendfile(int out_fd, int in_fd, off64_t* offset, size_t count, bool* kernel) {
  ConnRef r;
  if (!conn_of(out_fd, &r)) {
    *kernel = true;
    return 0;
  }
  *kernel = false;
  // The kernel's rules for the source: a file it can read pages from.
  struct stat st;
  int fl = fcntl(in_fd, F_GETFL);
  if (fl < 0 || (fl & O_ACCMODE) == O_WRONLY || fstat(in_fd, &st) != 0) {
    errno = EBADF; // not open for reading
    return -1;
  }
  if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
    errno = EINVAL;
    return -1;
  }
  char* stg = stage();
  if (!stg) return -1;
  size_t done = 0;
  while (done < count) {
    size_t want = count - done < kStage ? count - done : kStage;
    ssize_t n = offset ? pread64(in_fd, stg, want, *offset) : XP_REAL(read, in_fd, stg, want);
    if (n < 0) return done > 0 ? static_cast<ssize_t>(done) : -1;
    if (n == 0) break;
    iovec v{stg, static_cast<size_t>(n)};
    bool k2;
    ssize_t w = served(stream::io::send(r.c, &v, 1, done > 0 ? MSG_DONTWAIT : 0), &k2);
    if (k2) w = XP_REAL(write, out_fd, stg, static_cast<size_t>(n));
    size_t took = w > 0 ? static_cast<size_t>(w) : 0;
    if (offset)
      *offset += static_cast<off64_t>(took);
    else if (took < static_cast<size_t>(n))
      lseek64(in_fd, static_cast<off64_t>(took) - n, SEEK_CUR);
    done += took;
    if (w < 0) return done > 0 ? static_cast<ssize_t>(done) : -1;
    if (took < static_cast<size_t>(n)) break;
  }
  return static_cast<ssize_t>(done);
}

} // namespace

XP_EXPORT ssize_t sendfile(int out_fd, int in_fd, off_t* offset, size_t count) noexcept {
  SocketRecord* s = track::peek(out_fd);
  track::CallInFlight in_flight(s);
  if (slow(s)) {
    bool kernel;
    off64_t o = offset ? *offset : 0;
    ssize_t r = stream_sendfile(out_fd, in_fd, offset ? &o : nullptr, count, &kernel);
    if (!kernel) {
      if (offset) *offset = static_cast<off_t>(o);
      return count_tx(s, r);
    }
  }
  return count_tx(s, XP_REAL(sendfile, out_fd, in_fd, offset, count));
}

XP_EXPORT ssize_t sendfile64(int out_fd, int in_fd, off64_t* offset, size_t count) noexcept {
  SocketRecord* s = track::peek(out_fd);
  track::CallInFlight in_flight(s);
  if (slow(s)) {
    bool kernel;
    ssize_t r = stream_sendfile(out_fd, in_fd, offset, count, &kernel);
    if (!kernel) return count_tx(s, r);
  }
  return count_tx(s, XP_REAL(sendfile64, out_fd, in_fd, offset, count));
}

XP_EXPORT ssize_t splice(int fd_in, loff_t* off_in, int fd_out, loff_t* off_out, size_t len,
                         unsigned int flags) {
  SocketRecord* in = track::peek(fd_in);
  SocketRecord* out = track::peek(fd_out);
  track::CallInFlight in_flight_in(in), in_flight_out(out);
  if (slow(out) && off_out == nullptr && is_pipe(fd_in)) {
    // pipe -> stream: read what the stream will take, send it all.
    ConnRef r;
    if (conn_of(fd_out, &r)) {
      char* stg = stage();
      if (!stg) return -1;
      size_t want = len < kStage ? len : kStage;
      ssize_t n = off_in ? pread64(fd_in, stg, want, *off_in) : XP_REAL(read, fd_in, stg, want);
      if (n <= 0) return n;
      if (off_in) *off_in += n;
      size_t done = 0;
      while (done < static_cast<size_t>(n)) {
        iovec v{stg + done, static_cast<size_t>(n) - done};
        bool k;
        ssize_t w = served(stream::io::send(r.c, &v, 1, 0), &k);
        if (k) w = XP_REAL(write, fd_out, stg + done, static_cast<size_t>(n) - done);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return done > 0 ? static_cast<ssize_t>(done) : -1;
        done += static_cast<size_t>(w);
      }
      return count_tx(out, static_cast<ssize_t>(done));
    }
  }
  if (slow(in) && off_in == nullptr && is_pipe(fd_out)) {
    // stream -> pipe: peek, write what the pipe takes, then consume that much.
    ConnRef r;
    if (conn_of(fd_in, &r)) {
      char* stg = stage();
      if (!stg) return -1;
      size_t want = len < kStage ? len : kStage;
      iovec v{stg, want};
      bool k;
      int f = (flags & SPLICE_F_NONBLOCK) ? MSG_DONTWAIT : 0;
      ssize_t n = served(stream::io::recv(r.c, &v, 1, f | MSG_PEEK), &k);
      if (!k) {
        if (n <= 0) return n;
        ssize_t w = off_out ? pwrite64(fd_out, stg, static_cast<size_t>(n), *off_out)
                            : XP_REAL(write, fd_out, stg, static_cast<size_t>(n));
        if (w <= 0) return w;
        if (off_out) *off_out += w;
        iovec c{stg, static_cast<size_t>(w)};
        stream::io::recv(r.c, &c, 1, MSG_DONTWAIT);
        return count_rx(in, w);
      }
    }
  }
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
