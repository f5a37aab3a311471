// ioctl queues (FIONREAD, SIOCINQ, SIOCOUTQ), socket options (TCP_INFO, SO_*),
// socket names, AF_UNIX and UDP sockets, SO_RCVTIMEO/SO_SNDTIMEO, and threads
// racing close() against recv()/send().
#include "sem.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/errqueue.h>
#include <linux/sockios.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

static int ioctl_int(int fd, unsigned long req) {
  int v = -1;
  return ioctl(fd, req, &v) == 0 ? v : -1;
}

static void ioctl_queues(void) {
  int a, b;
  tcp_pair(&a, &b);
  int n = -1;
  RC(0, ioctl(b, FIONREAD, &n));
  EQ("FIONREAD (empty)", n, 0);
  char data[1234];
  fill_pattern(data, sizeof data, 7);
  send_all(a, data, sizeof data);
  wait_avail(b, sizeof data);
  EQ("FIONREAD", ioctl_int(b, FIONREAD), 1234);
  EQ("SIOCINQ", ioctl_int(b, SIOCINQ), 1234);
  long end = now_ms() + 2000;
  while (ioctl_int(a, SIOCOUTQ) != 0 && now_ms() < end)
    msleep(1);
  EQ("SIOCOUTQ once acknowledged", ioctl_int(a, SIOCOUTQ), 0);
  char buf[1000];
  RC(1000, recv(b, buf, sizeof buf, 0));
  EQ("FIONREAD after reading 1000", ioctl_int(b, FIONREAD), 234);
  RC(0, shutdown(a, SHUT_WR));
  REQUIRE(wait_ready(b, POLLRDHUP, 2000) & POLLRDHUP);
  EQ("FIONREAD with EOF queued", ioctl_int(b, FIONREAD), 234);
  // a peer that does not read: the sender's queue fills
  int c, d;
  tcp_pair(&c, &d);
  char* chunk = calloc(1, 65536);
  REQUIRE(chunk);
  while (send(c, chunk, 65536, MSG_DONTWAIT) > 0) {
  }
  CHECK(errno == EAGAIN);
  end = now_ms() + 2000;
  while (ioctl_int(c, SIOCOUTQ) <= 0 && now_ms() < end)
    msleep(1);
  CHECK(ioctl_int(c, SIOCOUTQ) > 0);
  CHECK(ioctl_int(c, SIOCOUTQNSD) >= 0);
  CHECK(ioctl_int(d, FIONREAD) > 0);
  free(chunk);
  // other fd kinds
  int l = tcp_listener(NULL);
  ERR(EINVAL, ioctl(l, FIONREAD, &n));
  int p[2];
  REQUIRE(pipe(p) == 0);
  RC(7, write(p[1], "1234567", 7));
  EQ("FIONREAD(pipe)", ioctl_int(p[0], FIONREAD), 7);
  ERR(ENOTTY, ioctl(b, _IO('x', 99), &n));
  int fds[] = {a, b, c, d, l, p[0], p[1]};
  for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
    RC(0, close(fds[i]));
}

static int iopt(int fd, int level, int name) {
  int v = -1;
  socklen_t len = sizeof v;
  if (getsockopt(fd, level, name, &v, &len) != 0) return -1000 - errno;
  return v;
}

static int tcp_state(int fd) {
  struct tcp_info ti;
  socklen_t len = sizeof ti;
  memset(&ti, 0, sizeof ti);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return -1;
  return ti.tcpi_state;
}

static void sockopt_info(void) {
  struct sockaddr_in addr;
  int l = tcp_listener(&addr);
  int a = OK(socket(AF_INET, SOCK_STREAM, 0));
  EQ("tcpi_state (new socket: TCP_CLOSE)", tcp_state(a), TCP_CLOSE);
  RC(0, connect(a, (struct sockaddr*)&addr, sizeof addr));
  int b = OK(accept(l, NULL, NULL));
  struct tcp_info ti;
  socklen_t len = sizeof ti;
  RC(0, getsockopt(a, IPPROTO_TCP, TCP_INFO, &ti, &len));
  EQ("TCP_INFO len", len, sizeof ti);
  EQ("tcpi_state (TCP_ESTABLISHED)", ti.tcpi_state, TCP_ESTABLISHED);
  len = 8;
  RC(0, getsockopt(b, IPPROTO_TCP, TCP_INFO, &ti, &len));
  EQ("TCP_INFO short len", len, 8);
  EQ("tcpi_state (TCP_ESTABLISHED)", ti.tcpi_state, TCP_ESTABLISHED);
  EQ("tcpi_state (listener: TCP_LISTEN)", tcp_state(l), TCP_LISTEN);
  EQ("SO_TYPE", iopt(a, SOL_SOCKET, SO_TYPE), SOCK_STREAM);
  EQ("SO_DOMAIN", iopt(a, SOL_SOCKET, SO_DOMAIN), AF_INET);
  EQ("SO_PROTOCOL", iopt(a, SOL_SOCKET, SO_PROTOCOL), IPPROTO_TCP);
  EQ("SO_ERROR", iopt(a, SOL_SOCKET, SO_ERROR), 0);
  EQ("SO_ACCEPTCONN (connected)", iopt(a, SOL_SOCKET, SO_ACCEPTCONN), 0);
  EQ("SO_ACCEPTCONN (listener)", iopt(l, SOL_SOCKET, SO_ACCEPTCONN), 1);
  EQ("TCP_NODELAY", iopt(a, IPPROTO_TCP, TCP_NODELAY), 0);
  int one = 1;
  RC(0, setsockopt(a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one));
  EQ("TCP_NODELAY", iopt(a, IPPROTO_TCP, TCP_NODELAY), 1);
  RC(0, setsockopt(a, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one));
  EQ("SO_KEEPALIVE", iopt(a, SOL_SOCKET, SO_KEEPALIVE), 1);
  RC(0, setsockopt(a, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one));
  EQ("SO_REUSEADDR", iopt(a, SOL_SOCKET, SO_REUSEADDR), 1);
  int size = 65536;
  RC(0, setsockopt(a, SOL_SOCKET, SO_SNDBUF, &size, sizeof size));
  EQ("SO_SNDBUF (doubled)", iopt(a, SOL_SOCKET, SO_SNDBUF), 131072);
  RC(0, setsockopt(a, SOL_SOCKET, SO_RCVBUF, &size, sizeof size));
  EQ("SO_RCVBUF (doubled)", iopt(a, SOL_SOCKET, SO_RCVBUF), 131072);
  struct linger lg = {-1, -1};
  RC(0, getsockopt(a, SOL_SOCKET, SO_LINGER, &lg, &(socklen_t){sizeof lg}));
  say("SO_LINGER = {%d, %d}", lg.l_onoff, lg.l_linger);
  // SO_RCVLOWAT gates readability
  int five = 5;
  RC(0, setsockopt(b, SOL_SOCKET, SO_RCVLOWAT, &five, sizeof five));
  EQ("SO_RCVLOWAT", iopt(b, SOL_SOCKET, SO_RCVLOWAT), 5);
  RC(3, send(a, "abc", 3, 0));
  wait_avail(b, 3);
  struct pollfd p = {.fd = b, .events = POLLIN};
  RC(0, poll(&p, 1, 100));
  RC(2, send(a, "de", 2, 0));
  RC(1, poll(&p, 1, 2000));
  MASK("revents", p.revents, POLLIN);
  char buf[8];
  RC(5, recv(b, buf, sizeof buf, 0));
  // errors
  ERR(ENOPROTOOPT, getsockopt(a, SOL_SOCKET, 12345, &size, &(socklen_t){sizeof size}));
  ERR(EINVAL, setsockopt(a, SOL_SOCKET, SO_RCVLOWAT, &five, 2));
  int pp[2];
  REQUIRE(pipe(pp) == 0);
  ERR(ENOTSOCK, getsockopt(pp[0], SOL_SOCKET, SO_TYPE, &size, &(socklen_t){sizeof size}));
  ERR(ENOTSOCK, setsockopt(pp[0], SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one));
  // a half-closed connection
  RC(0, shutdown(a, SHUT_WR));
  REQUIRE(wait_ready(b, POLLRDHUP, 2000) & POLLRDHUP);
  EQ("tcpi_state (peer shut: TCP_CLOSE_WAIT)", tcp_state(b), TCP_CLOSE_WAIT);
  int fds[] = {a, b, l, pp[0], pp[1]};
  for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
    RC(0, close(fds[i]));
}

static void socket_names(void) {
  struct sockaddr_in la, x, y;
  int l = tcp_listener(&la);
  EQ("listener family", la.sin_family, AF_INET);
  CHECK(la.sin_addr.s_addr == sem_addr() && la.sin_port != 0);
  int a = OK(socket(AF_INET, SOCK_STREAM, 0));
  socklen_t len = sizeof x;
  RC(0, getsockname(a, (struct sockaddr*)&x, &len));
  CHECK(x.sin_family == AF_INET && x.sin_port == 0 && x.sin_addr.s_addr == 0);
  RC(0, connect(a, (struct sockaddr*)&la, sizeof la));
  int b = OK(accept(l, NULL, NULL));
  len = sizeof x;
  RC(0, getpeername(a, (struct sockaddr*)&x, &len));
  EQ("len", len, sizeof x);
  CHECK(x.sin_port == la.sin_port && x.sin_addr.s_addr == la.sin_addr.s_addr);
  RC(0, getsockname(b, (struct sockaddr*)&x, &(socklen_t){sizeof x}));
  CHECK(x.sin_port == la.sin_port);
  RC(0, getsockname(a, (struct sockaddr*)&x, &(socklen_t){sizeof x}));
  RC(0, getpeername(b, (struct sockaddr*)&y, &(socklen_t){sizeof y}));
  CHECK(x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr && x.sin_port != 0);
  // a short buffer: truncated, and len tells the full size
  char small[4];
  len = sizeof small;
  RC(0, getsockname(a, (struct sockaddr*)small, &len));
  EQ("len (short buffer)", len, sizeof(struct sockaddr_in));
  ERR(ENOTCONN, getpeername(l, (struct sockaddr*)&x, &(socklen_t){sizeof x}));
  int p[2];
  REQUIRE(pipe(p) == 0);
  ERR(ENOTSOCK, getsockname(p[0], (struct sockaddr*)&x, &(socklen_t){sizeof x}));
  ERR(ENOTSOCK, getpeername(p[0], (struct sockaddr*)&x, &(socklen_t){sizeof x}));
  int fds[] = {a, b, l, p[0], p[1]};
  for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
    RC(0, close(fds[i]));
  ERR(EBADF, getsockname(a, (struct sockaddr*)&x, &(socklen_t){sizeof x}));
}

static void unix_sockets(void) {
  int s[2];
  RC(0, socketpair(AF_UNIX, SOCK_STREAM, 0, s));
  CHECK(roundtrip(s[0], s[1]));
  RC(0, shutdown(s[0], SHUT_WR));
  char buf[64];
  RC(0, recv(s[1], buf, sizeof buf, 0));
  RC(2, send(s[1], "ok", 2, 0));
  RC(2, recv(s[0], buf, sizeof buf, 0));
  EQ("SO_TYPE", iopt(s[0], SOL_SOCKET, SO_TYPE), SOCK_STREAM);
  EQ("SO_DOMAIN", iopt(s[0], SOL_SOCKET, SO_DOMAIN), AF_UNIX);
  int d[2];
  RC(0, socketpair(AF_UNIX, SOCK_DGRAM, 0, d));
  RC(3, send(d[0], "one", 3, 0));
  RC(5, send(d[0], "three", 5, 0));
  RC(3, send(d[0], "two", 3, 0));
  EQ("FIONREAD (next datagram)", ioctl_int(d[1], FIONREAD), 3);
  RC(3, recv(d[1], buf, sizeof buf, 0));
  RC(5, recv(d[1], buf, 2, MSG_TRUNC)); // the real length; the rest is dropped
  RC(2, recv(d[1], buf, 2, 0));
  ERR(EAGAIN, recv(d[1], buf, sizeof buf, MSG_DONTWAIT));
  int q[2];
  RC(0, socketpair(AF_UNIX, SOCK_SEQPACKET, 0, q));
  RC(4, send(q[0], "rec1", 4, 0));
  RC(2, send(q[0], "r2", 2, 0));
  RC(4, recv(q[1], buf, sizeof buf, 0));
  RC(2, recv(q[1], buf, sizeof buf, 0));
  RC(0, close(q[0]));
  RC(0, recv(q[1], buf, sizeof buf, 0));
  int bad[2];
  ERR(EOPNOTSUPP, socketpair(AF_INET, SOCK_STREAM, 0, bad));
  // a listening unix socket (abstract name)
  struct sockaddr_un ua = {.sun_family = AF_UNIX};
  snprintf(ua.sun_path + 1, sizeof ua.sun_path - 1, "xpress-sem-%d", (int)getpid());
  socklen_t ulen =
      (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(ua.sun_path + 1));
  int l = OK(socket(AF_UNIX, SOCK_STREAM, 0));
  RC(0, bind(l, (struct sockaddr*)&ua, ulen));
  RC(0, listen(l, 4));
  int c = OK(socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0));
  RC(0, connect(c, (struct sockaddr*)&ua, ulen));
  int e = OK(accept4(l, NULL, NULL, SOCK_CLOEXEC));
  REQUIRE(fcntl(c, F_SETFL, 0) == 0);
  CHECK(roundtrip(c, e));
  struct ucred cred;
  RC(0, getsockopt(e, SOL_SOCKET, SO_PEERCRED, &cred, &(socklen_t){sizeof cred}));
  CHECK(cred.pid == getpid());
  int fds[] = {s[0], s[1], d[0], d[1], q[1], l, c, e};
  for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
    RC(0, close(fds[i]));
}

static int udp_bound(struct sockaddr_in* a) {
  int u = socket(AF_INET, SOCK_DGRAM, 0);
  REQUIRE(u >= 0);
  *a = (struct sockaddr_in){.sin_family = AF_INET};
  a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(u, (struct sockaddr*)a, sizeof *a) == 0);
  REQUIRE(getsockname(u, (struct sockaddr*)a, &(socklen_t){sizeof *a}) == 0);
  return u;
}

static void udp_sockets(void) {
  struct sockaddr_in a1, a2, from;
  int u1 = udp_bound(&a1), u2 = udp_bound(&a2);
  EQ("SO_TYPE", iopt(u1, SOL_SOCKET, SO_TYPE), SOCK_DGRAM);
  EQ("SO_PROTOCOL", iopt(u1, SOL_SOCKET, SO_PROTOCOL), IPPROTO_UDP);
  RC(3, sendto(u1, "one", 3, 0, (struct sockaddr*)&a2, sizeof a2));
  RC(5, sendto(u1, "three", 5, 0, (struct sockaddr*)&a2, sizeof a2));
  REQUIRE(wait_ready(u2, POLLIN, 2000) & POLLIN);
  EQ("FIONREAD (next datagram)", ioctl_int(u2, FIONREAD), 3);
  char buf[64];
  socklen_t len = sizeof from;
  RC(3, recvfrom(u2, buf, sizeof buf, 0, (struct sockaddr*)&from, &len));
  EQ("from len", len, sizeof from);
  CHECK(from.sin_port == a1.sin_port && from.sin_addr.s_addr == a1.sin_addr.s_addr);
  REQUIRE(wait_ready(u2, POLLIN, 2000) & POLLIN);
  RC(5, recv(u2, buf, 2, MSG_TRUNC));
  ERR(EAGAIN, recv(u2, buf, sizeof buf, MSG_DONTWAIT));
  // connected UDP
  RC(0, connect(u1, (struct sockaddr*)&a2, sizeof a2));
  RC(0, connect(u2, (struct sockaddr*)&a1, sizeof a1));
  RC(4, send(u1, "conn", 4, 0));
  REQUIRE(wait_ready(u2, POLLIN, 2000) & POLLIN);
  RC(4, recv(u2, buf, sizeof buf, 0));
  RC(4, send(u2, "back", 4, 0));
  REQUIRE(wait_ready(u1, POLLIN, 2000) & POLLIN);
  RC(4, read(u1, buf, sizeof buf));
  // sendmmsg / recvmmsg keep datagram boundaries
  struct iovec out[3] = {{"a", 1}, {"bb", 2}, {"ccc", 3}};
  struct mmsghdr mo[3];
  memset(mo, 0, sizeof mo);
  for (int i = 0; i < 3; i++)
    mo[i].msg_hdr = (struct msghdr){.msg_iov = &out[i], .msg_iovlen = 1};
  RC(3, sendmmsg(u1, mo, 3, 0));
  char in[3][8];
  struct iovec iv[3];
  struct mmsghdr mi[3];
  unsigned lens[3] = {0, 0, 0};
  int got = 0;
  long end = now_ms() + 2000;
  while (got < 3 && now_ms() < end) {
    memset(mi, 0, sizeof mi);
    for (int i = 0; i < 3; i++) {
      iv[i] = (struct iovec){in[i], sizeof in[i]};
      mi[i].msg_hdr = (struct msghdr){.msg_iov = &iv[i], .msg_iovlen = 1};
    }
    int r = recvmmsg(u2, mi, (unsigned)(3 - got), MSG_WAITFORONE, NULL);
    REQUIRE(r > 0);
    for (int i = 0; i < r; i++)
      lens[got + i] = mi[i].msg_len;
    got += r;
  }
  say("datagrams = %d, lengths = %u %u %u", got, lens[0], lens[1], lens[2]);
  CHECK(got == 3 && lens[0] == 1 && lens[1] == 2 && lens[2] == 3);
  // a closed port answers with ICMP: ECONNREFUSED on the connected socket
  struct sockaddr_in gone;
  int g = udp_bound(&gone);
  RC(0, close(g));
  int u3 = OK(socket(AF_INET, SOCK_DGRAM, 0));
  RC(0, connect(u3, (struct sockaddr*)&gone, sizeof gone));
  RC(1, send(u3, "x", 1, 0));
  MASK("revents", wait_ready(u3, 0, 2000), POLLERR);
  ERR(ECONNREFUSED, recv(u3, buf, sizeof buf, MSG_DONTWAIT));
  ERR(EAGAIN, recv(u3, buf, sizeof buf, MSG_DONTWAIT));
  RC(0, close(u3));
  RC(0, close(u1));
  RC(0, close(u2));
}

static void so_rcvtimeo(void) {
  int a, b;
  tcp_pair(&a, &b);
  struct timeval tv = {0, 100000};
  RC(0, setsockopt(b, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv));
  memset(&tv, 0, sizeof tv);
  RC(0, getsockopt(b, SOL_SOCKET, SO_RCVTIMEO, &tv, &(socklen_t){sizeof tv}));
  say("SO_RCVTIMEO = %ld.%06ld", (long)tv.tv_sec, (long)tv.tv_usec);
  CHECK(tv.tv_sec == 0 && tv.tv_usec == 100000);
  char buf[16];
  long t0 = now_ms();
  ERR(EAGAIN, recv(b, buf, sizeof buf, 0));
  long dt = now_ms() - t0;
  CHECK(dt >= 90 && dt < 3000);
  t0 = now_ms();
  ERR(EAGAIN, read(b, buf, sizeof buf));
  CHECK(now_ms() - t0 >= 90);
  // MSG_WAITALL with a timeout: what arrived in time
  RC(3, send(a, "abc", 3, 0));
  wait_avail(b, 3);
  t0 = now_ms();
  RC(3, recv(b, buf, 10, MSG_WAITALL));
  CHECK(now_ms() - t0 >= 90);
  // accept on a listener with a receive timeout
  int l = tcp_listener(NULL);
  tv = (struct timeval){0, 100000};
  RC(0, setsockopt(l, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv));
  t0 = now_ms();
  ERR(EAGAIN, accept(l, NULL, NULL));
  CHECK(now_ms() - t0 >= 90);
  // SO_SNDTIMEO: a blocking send into a full connection gives up
  RC(0, setsockopt(a, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv));
  char* chunk = calloc(1, 65536);
  REQUIRE(chunk);
  int err = 0;
  for (int i = 0; i < 10000; i++) {
    if (send(a, chunk, 65536, 0) < 0) {
      err = errno;
      break;
    }
  }
  say("blocking send with SO_SNDTIMEO ended with %s", ename(err));
  CHECK(err == EAGAIN);
  free(chunk);
  tv = (struct timeval){0, 0};
  RC(0, setsockopt(b, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv));
  tv.tv_usec = -1;
  RC(0, getsockopt(b, SOL_SOCKET, SO_RCVTIMEO, &tv, &(socklen_t){sizeof tv}));
  CHECK(tv.tv_sec == 0 && tv.tv_usec == 0);
  RC(0, close(l));
  RC(0, close(a));
  RC(0, close(b));
}

// ---- close() racing recv()/send() on another thread

struct racer {
  int fd, do_send;
  long result;
  int err;
};

static void* racer_main(void* arg) {
  struct racer* r = arg;
  char buf[100] = {0};
  if (r->do_send) {
    for (int i = 0; i < 50; i++) {
      r->result = send(r->fd, buf, sizeof buf, MSG_NOSIGNAL);
      r->err = errno;
      if (r->result < 0) break;
    }
  } else {
    r->result = recv(r->fd, buf, sizeof buf, 0);
    r->err = errno;
  }
  return NULL;
}

static void close_race(void) {
  enum { ITER = 400 };
  int done = 0, unexpected = 0;
  for (int i = 0; i < ITER; i++) {
    int a, b, p[2];
    tcp_pair(&a, &b);
    struct racer r = {.fd = a, .do_send = i % 2};
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, racer_main, &r) == 0);
    if (i % 4 >= 2) sched_yield();
    if (i % 8 == 1) send(b, "d", 1, 0);
    REQUIRE(close(a) == 0);
    REQUIRE(pipe(p) == 0);  // likely reuses a's number
    REQUIRE(close(b) == 0); // wakes a recv still blocked on the old socket
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 5;
    if (pthread_timedjoin_np(t, NULL, &deadline) != 0)
      sem_fatal(__FILE__, __LINE__, "iteration %d: the racing thread hangs", i);
    done++;
    int ok = r.result >= 0 || r.err == EBADF || r.err == ENOTSOCK ||
             (r.do_send && (r.err == EPIPE || r.err == ECONNRESET));
    if (!ok) {
      if (unexpected++ < 5)
        say("iteration %d: unexpected result %ld %s", i, r.result, ename(r.err));
    }
    close(p[0]);
    close(p[1]);
  }
  EQ("iterations completed", done, ITER);
  EQ("unexpected results", unexpected, 0);
}

// syscall() is interposed (io_uring_setup, README "Kernel features"): every
// call reaches the kernel with its arguments, six included; and the
// options of kernel features (here TCP_ULP "tls", SO_ZEROCOPY) answer as
// the kernel's, the connection carrying bytes as before.
static void syscall_and_feature_options(void) {
  CHECK(syscall(SYS_getpid) == getpid());
  void* m =
      (void*)syscall(SYS_mmap, 0, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(m != MAP_FAILED);
  memset(m, 7, 8192);
  RC(0, syscall(SYS_munmap, m, 8192));
  int p[2];
  RC(0, pipe(p));
  RC(3, syscall(SYS_write, p[1], "abc", 3));
  char three[3];
  RC(3, read(p[0], three, 3));
  close(p[0]);
  close(p[1]);
  ERR(ENOSYS, syscall(100000, 1, 2, 3, 4, 5, 6));
  int a, b;
  tcp_pair(&a, &b);
  int one = 1;
  RC(0, setsockopt(a, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one));
  ANY(setsockopt(b, IPPROTO_TCP, TCP_ULP, "tls", sizeof "tls"));
  char data[3000], got[3000];
  fill_pattern(data, sizeof data, 3);
  send_all(a, data, sizeof data);
  RC(3000, recv(b, got, sizeof got, MSG_WAITALL));
  CHECK(memcmp(data, got, sizeof got) == 0);
  close(a);
  close(b);
}

// MSG_ZEROCOPY (with SO_ZEROCOPY): the kernel reports each send's
// completion on the socket's error queue; a stream on RDMA would never get
// one and the program would hold its buffers for ever.  SO_ZEROCOPY alone
// (gRPC sets it on every listener) changes nothing; the first MSG_ZEROCOPY
// send moves the stream to the kernel (README "Kernel features").  The
// connection first carries bytes both ways for a while, so that under
// xpress with RDMA it has switched before the zero-copy send.
static void msg_zerocopy_completions(void) {
  int a, b;
  tcp_pair(&a, &b);
  int one = 1;
  RC(0, setsockopt(a, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one));
  char data[65536], got[65536];
  for (int i = 0; i < 20; ++i) {
    fill_pattern(data, 4096, (unsigned)i);
    send_all(a, data, 4096);
    RC(4096, recv(b, got, 4096, MSG_WAITALL));
    send_all(b, got, 4096);
    RC(4096, recv(a, got, 4096, MSG_WAITALL));
    CHECK(memcmp(data, got, 4096) == 0);
    usleep(20000);
  }
  // The error queue is the kernel's: empty here, and reading it takes no
  // stream byte.
  send_all(a, "error queue", 11);
  wait_avail(b, 11);
  ERR(EAGAIN, recv(b, got, sizeof got, MSG_ERRQUEUE));
  struct msghdr none = {0};
  struct iovec v = {got, sizeof got};
  none.msg_iov = &v;
  none.msg_iovlen = 1;
  ERR(EAGAIN, recvmsg(b, &none, MSG_ERRQUEUE | MSG_DONTWAIT));
  RC(11, recv(b, got, 11, 0));
  CHECK(memcmp(got, "error queue", 11) == 0);
  fill_pattern(data, sizeof data, 99);
  size_t sent = 0;
  while (sent < sizeof data) {
    ssize_t n = send(a, data + sent, sizeof data - sent, MSG_ZEROCOPY);
    if (n < 0 && errno == ENOBUFS) n = send(a, data + sent, sizeof data - sent, 0);
    REQUIRE(n > 0);
    sent += (size_t)n;
  }
  RC((ssize_t)sizeof got, recv(b, got, sizeof got, MSG_WAITALL));
  CHECK(memcmp(data, got, sizeof got) == 0);
  // The completion: POLLERR, then one SO_EE_ORIGIN_ZEROCOPY on the error queue.
  CHECK(wait_ready(a, 0, 5000) & POLLERR);
  char ctl[128];
  struct msghdr m = {.msg_control = ctl, .msg_controllen = sizeof ctl};
  RC(0, recvmsg(a, &m, MSG_ERRQUEUE));
  struct cmsghdr* c = CMSG_FIRSTHDR(&m);
  REQUIRE(c != NULL);
  struct sock_extended_err e;
  memcpy(&e, CMSG_DATA(c), sizeof e);
  CHECK(e.ee_origin == SO_EE_ORIGIN_ZEROCOPY);
  CHECK(e.ee_errno == 0);
  close(a);
  close(b);
}

const struct sem_case sem_misc_cases[] = {
    {"ioctl_queues", ioctl_queues},
    {"msg_zerocopy_completions", msg_zerocopy_completions},
    {"sockopt_info", sockopt_info},
    {"socket_names", socket_names},
    {"unix_sockets", unix_sockets},
    {"udp_sockets", udp_sockets},
    {"so_rcvtimeo", so_rcvtimeo},
    {"close_race", close_race},
    {"syscall_and_feature_options", syscall_and_feature_options},
    {NULL, NULL},
};
