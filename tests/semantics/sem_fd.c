// File descriptors: dup/dup2/dup3, fcntl (F_DUPFD*, F_GETFL/F_SETFL, F_GETFD),
// FIONBIO, SOCK_NONBLOCK|SOCK_CLOEXEC and accept4, fds above 65536,
// close_range and closefrom.
#include "sem.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

static void show_flags(const char* what, int fd) {
  say("%s: F_GETFL = %s, F_GETFD = %d", what, fdflags(fcntl(fd, F_GETFL)), fcntl(fd, F_GETFD));
}

static int peer_sees_eof(int fd) {
  char c;
  if (!(wait_ready(fd, POLLIN, 2000) & POLLIN)) return 0;
  return recv(fd, &c, 1, MSG_DONTWAIT) == 0;
}

static void dup_family(void) {
  int a, b;
  tcp_pair(&a, &b);
  int d = OK(dup(a));
  RC(0, close(a)); // close the original: the copy works
  CHECK(roundtrip(d, b));
  RC(50, dup2(d, 50));
  int d2 = OK(dup(d));
  RC(0, close(d2)); // close a copy: the others work
  CHECK(roundtrip(d, b));
  RC(0, close(d));
  CHECK(roundtrip(50, b));
  RC(60, dup3(50, 60, O_CLOEXEC));
  EQ("F_GETFD(60)", fcntl(60, F_GETFD), FD_CLOEXEC);
  EQ("F_GETFD(50)", fcntl(50, F_GETFD), 0);
  RC(0, close(50));
  CHECK(roundtrip(60, b));
  ERR(EINVAL, dup3(60, 60, 0));
  RC(60, dup2(60, 60));
  ERR(EINVAL, dup3(60, 61, 0x1234));
  ERR(EBADF, dup(12345));
  ERR(EBADF, dup2(12345, 61));
  ERR(EBADF, dup3(12345, 61, 0));
  // dup2 over a live socket closes that socket: its peer sees EOF
  int c, e;
  tcp_pair(&c, &e);
  CHECK(dup2(60, c) == c); // (c is kernel-chosen: not printed)
  CHECK(peer_sees_eof(e));
  CHECK(roundtrip(c, b));
  RC(0, close(c));
  CHECK(roundtrip(60, b));
  RC(0, close(60)); // last copy: b sees EOF
  CHECK(peer_sees_eof(b));
  RC(0, close(b));
  RC(0, close(e));
}

struct late_send {
  int fd, ms;
};

static void* late_send_main(void* arg) {
  struct late_send* l = arg;
  msleep(l->ms);
  send(l->fd, "L", 1, 0);
  return NULL;
}

// recv() that must block until a byte sent 50 ms later arrives.
static void blocking_recv(int from, int to) {
  struct late_send l = {to, 50};
  pthread_t t;
  REQUIRE(pthread_create(&t, NULL, late_send_main, &l) == 0);
  char c = 0;
  RC(1, recv(from, &c, 1, 0));
  REQUIRE(pthread_join(t, NULL) == 0);
}

static void fcntl_flags(void) {
  int a, b;
  tcp_pair(&a, &b);
  show_flags("b", b);
  int d = OK(fcntl(b, F_DUPFD, 100));
  CHECK(d >= 100);
  int d2 = OK(fcntl(b, F_DUPFD_CLOEXEC, 100));
  CHECK(d2 >= 100 && d2 != d);
  show_flags("F_DUPFD copy", d);
  show_flags("F_DUPFD_CLOEXEC copy", d2);
  CHECK(roundtrip(a, d2));
  // O_NONBLOCK belongs to the open file description, FD_CLOEXEC to the fd
  RC(0, fcntl(b, F_SETFL, O_NONBLOCK));
  show_flags("b", b);
  show_flags("F_DUPFD copy", d);
  char buf[8];
  ERR(EAGAIN, recv(d, buf, sizeof buf, 0));
  ERR(EAGAIN, read(d2, buf, sizeof buf));
  RC(0, fcntl(d, F_SETFD, FD_CLOEXEC));
  show_flags("b", b);
  show_flags("F_DUPFD copy", d);
  int on = 0;
  RC(0, ioctl(d2, FIONBIO, &on));
  show_flags("b", b);
  blocking_recv(b, a);
  on = 1;
  RC(0, ioctl(b, FIONBIO, &on));
  show_flags("F_DUPFD_CLOEXEC copy", d2);
  ERR(EAGAIN, recv(b, buf, sizeof buf, 0));
  RC(0, fcntl(b, F_SETFL, O_NONBLOCK | O_APPEND));
  show_flags("b", b);
  RC(0, fcntl(b, F_SETFL, 0));
  show_flags("b", b);
  blocking_recv(d, a);
  // fcntl64 is what glibc's fcntl is redirected to; call both names
  RC(0, fcntl64(b, F_SETFL, O_NONBLOCK));
  EQ("fcntl64(F_GETFL) & O_NONBLOCK", fcntl64(b, F_GETFL) & O_NONBLOCK, O_NONBLOCK);
  int gone = OK(dup(a));
  RC(0, close(gone));
  ERR(EBADF, fcntl(gone, F_GETFL));
  ERR(EBADF, fcntl(gone, F_SETFL, O_NONBLOCK));
  ERR(EBADF, ioctl(gone, FIONBIO, &on));
  ERR(EINVAL, fcntl(b, F_DUPFD, -1));
  RC(0, close(d));
  RC(0, close(d2));
  RC(0, close(a));
  RC(0, close(b));
}

// Which of the n connected sockets c[] is the other end of accepted x.
static int peer_of(int x, const int* c, int n) {
  struct sockaddr_in want, got;
  socklen_t len = sizeof want;
  REQUIRE(getpeername(x, (struct sockaddr*)&want, &len) == 0);
  for (int i = 0; i < n; i++) {
    len = sizeof got;
    REQUIRE(getsockname(c[i], (struct sockaddr*)&got, &len) == 0);
    if (got.sin_port == want.sin_port && got.sin_addr.s_addr == want.sin_addr.s_addr) return i;
  }
  REQUIRE(!"accepted socket's peer among the connected ones");
  return 0;
}

static void sock_flags_atomic(void) {
  int s = OK(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  show_flags("socket(SOCK_NONBLOCK|SOCK_CLOEXEC)", s);
  int s2 = OK(socket(AF_INET, SOCK_STREAM, 0));
  show_flags("socket()", s2);
  int s3 = OK(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, IPPROTO_TCP));
  show_flags("socket(SOCK_NONBLOCK)", s3);
  ERR(EINVAL, socket(AF_INET, SOCK_STREAM | 0x40000000, 0));
  struct sockaddr_in addr;
  int l = tcp_listener(&addr);
  int c[3];
  for (int i = 0; i < 3; i++) {
    c[i] = OK(socket(AF_INET, SOCK_STREAM, 0));
    RC(0, connect(c[i], (struct sockaddr*)&addr, sizeof addr));
  }
  int x = OK(accept4(l, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC));
  show_flags("accept4(SOCK_NONBLOCK|SOCK_CLOEXEC)", x);
  char buf[4];
  ERR(EAGAIN, recv(x, buf, sizeof buf, 0));
  int y = OK(accept4(l, NULL, NULL, 0));
  show_flags("accept4(0)", y);
  ERR(EINVAL, accept4(l, NULL, NULL, 0x1234));
  RC(0, fcntl(l, F_SETFL, O_NONBLOCK));
  int z = OK(accept(l, NULL, NULL));
  show_flags("accept() on a non-blocking listener", z); // not inherited
  ERR(EAGAIN, accept(l, NULL, NULL));
  CHECK(roundtrip(c[peer_of(x, c, 3)], x));
  int sv[2];
  RC(0, socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv));
  show_flags("socketpair(SOCK_NONBLOCK|SOCK_CLOEXEC)[0]", sv[0]);
  show_flags("socketpair(SOCK_NONBLOCK|SOCK_CLOEXEC)[1]", sv[1]);
  for (int i = 0; i < 3; i++)
    RC(0, close(c[i]));
  int fds[] = {s, s2, s3, l, x, y, z, sv[0], sv[1]};
  for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
    RC(0, close(fds[i]));
}

// Fds above 65536 (librspreload's table stops at 65535).  The numbers scale
// with the limit: 70000, 200000, 250000 and 299999 for RLIMIT_NOFILE 300000.
// Without CAP_SYS_RESOURCE the hard limit cannot be raised: the case then runs
// below the hard limit and reports itself skipped.
static void high_fds(void) {
  FILE* f = fopen("/proc/sys/fs/nr_open", "r");
  long nr_open = 0;
  REQUIRE(f && fscanf(f, "%ld", &nr_open) == 1);
  fclose(f);
  long lim = nr_open < 300000 ? nr_open : 300000;
  struct rlimit rl = {(rlim_t)lim, (rlim_t)lim};
  if (setrlimit(RLIMIT_NOFILE, &rl) == 0) {
    say("setrlimit(RLIMIT_NOFILE, %ld/%ld) = 0", lim, lim);
  } else {
    int e = errno;
    REQUIRE(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    if (e != EPERM || (long)rl.rlim_max >= lim)
      sem_fatal(__FILE__, __LINE__, "setrlimit(RLIMIT_NOFILE, %ld) = -1 %s", lim, ename(e));
    lim = (long)rl.rlim_max;
    sem_skip("setrlimit(RLIMIT_NOFILE, %ld) = -1 EPERM (no CAP_SYS_RESOURCE; hard limit %ld): "
             "fds above 65536 untested, running below %ld",
             nr_open < 300000 ? nr_open : 300000L, lim, lim);
    rl.rlim_cur = rl.rlim_max;
    REQUIRE(setrlimit(RLIMIT_NOFILE, &rl) == 0);
  }
  REQUIRE(getrlimit(RLIMIT_NOFILE, &rl) == 0);
  say("RLIMIT_NOFILE = %ld/%ld", (long)rl.rlim_cur, (long)rl.rlim_max);
  const int A = (int)(lim * 7 / 30), B = (int)(lim * 2 / 3), C = (int)(lim * 5 / 6);
  const int TOP = (int)lim - 1, BEYOND = (int)lim;
  say("fds used: %d %d %d %d, beyond the limit: %d", A, B, C, TOP, BEYOND);
  int a, b;
  tcp_pair(&a, &b);
  RC(A, dup2(a, A));
  RC(B, dup2(b, B));
  RC(0, close(a));
  RC(0, close(b));
  char buf[16];
  RC(5, send(A, "big70", 5, 0));
  struct pollfd p[2] = {{.fd = A, .events = POLLIN | POLLOUT},
                        {.fd = B, .events = POLLIN | POLLOUT}};
  wait_avail(B, 5);
  RC(2, poll(p, 2, 0));
  MASK("revents(A)", p[0].revents, POLLOUT);
  MASK("revents(B)", p[1].revents, POLLIN | POLLOUT);
  RC(5, recv(B, buf, sizeof buf, 0));
  CHECK(memcmp(buf, "big70", 5) == 0);
  RC(6, write(B, "big200", 6));
  wait_avail(A, 6);
  RC(6, read(A, buf, sizeof buf));
  CHECK(memcmp(buf, "big200", 6) == 0);
  int ep = OK(epoll_create1(0));
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)B};
  RC(0, epoll_ctl(ep, EPOLL_CTL_ADD, B, &ev));
  ev = (struct epoll_event){.events = EPOLLIN, .data.u64 = (uint64_t)A};
  RC(0, epoll_ctl(ep, EPOLL_CTL_ADD, A, &ev));
  RC(0, epoll_wait(ep, &ev, 1, 0));
  RC(1, send(A, "e", 1, 0));
  RC(1, epoll_wait(ep, &ev, 1, 2000));
  EQ("epoll data", ev.data.u64, B);
  RC(1, recv(B, buf, sizeof buf, 0));
  int hi = OK(fcntl(B, F_DUPFD, C));
  CHECK(hi >= C);
  CHECK(roundtrip(A, hi));
  RC(0, close(hi));
  RC(TOP, dup3(A, TOP, O_CLOEXEC));
  EQ("F_GETFD(TOP)", fcntl(TOP, F_GETFD), FD_CLOEXEC);
  ERR(EBADF, dup2(A, BEYOND));
  RC(0, close(A));
  CHECK(roundtrip(TOP, B));
  RC(0, close(TOP)); // last copy of the client: the server end sees EOF
  CHECK(peer_sees_eof(B));
  ERR(EBADF, send(A, "x", 1, MSG_NOSIGNAL));
  ERR(EBADF, recv(A, buf, sizeof buf, 0));
  ERR(EBADF, fcntl(A, F_GETFD));
  ERR(EBADF, close(A));
  struct pollfd q = {.fd = A, .events = POLLIN};
  RC(1, poll(&q, 1, 0));
  MASK("revents(closed A)", q.revents, POLLNVAL);
  RC(0, close(ep));
  RC(0, close(B));
  // a new connection on a reused high number
  tcp_pair(&a, &b);
  RC(A, dup2(b, A));
  CHECK(roundtrip(a, A));
  RC(0, close(A));
  RC(0, close(a));
  RC(0, close(b));
}

static void close_range_sockets(void) {
  int a1, b1, a2, b2, p[2];
  tcp_pair(&a1, &b1);
  tcp_pair(&a2, &b2);
  REQUIRE(pipe(p) == 0);
  RC(500, dup2(a1, 500));
  RC(501, dup2(a2, 501));
  RC(502, dup2(p[1], 502));
  RC(520, dup2(b1, 520)); // outside the range
  RC(0, close(a1));
  RC(0, close(a2));
  RC(0, close(p[1]));
  RC(0, close_range(500, 510, 0));
  for (int fd = 500; fd <= 502; fd++)
    ERR(EBADF, fcntl(fd, F_GETFD));
  char buf[8];
  ERR(EBADF, send(500, "x", 1, MSG_NOSIGNAL));
  ERR(EBADF, recv(501, buf, sizeof buf, 0));
  ERR(EBADF, write(502, "x", 1));
  ERR(EBADF, close(500));
  CHECK(peer_sees_eof(b1));
  CHECK(peer_sees_eof(b2));
  RC(0, read(p[0], buf, sizeof buf)); // the pipe's writer is gone
  EQ("F_GETFD(520)", fcntl(520, F_GETFD), 0);
  ERR(EINVAL, close_range(10, 5, 0));
  // the freed numbers get reused by other kinds of fds
  int q[2];
  REQUIRE(pipe(q) == 0);
  RC(500, dup2(q[1], 500));
  RC(3, write(500, "abc", 3));
  RC(3, read(q[0], buf, sizeof buf));
  ERR(ENOTSOCK, send(500, "x", 1, MSG_NOSIGNAL));
  int c, d;
  tcp_pair(&c, &d);
  RC(501, dup2(c, 501));
  CHECK(roundtrip(501, d));
  // CLOSE_RANGE_CLOEXEC marks instead of closing
  RC(0, close_range(501, 501, CLOSE_RANGE_CLOEXEC));
  EQ("F_GETFD(501)", fcntl(501, F_GETFD), FD_CLOEXEC);
  CHECK(roundtrip(501, d));
  // closefrom
  RC(700, dup2(d, 700));
  RC(701, dup2(d, 701));
  closefrom(700);
  ERR(EBADF, fcntl(700, F_GETFD));
  ERR(EBADF, fcntl(701, F_GETFD));
  CHECK(roundtrip(501, d));
  int fds[] = {500, 501, 520, b1, b2, p[0], q[0], q[1], c, d};
  for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
    RC(0, close(fds[i]));
}

const struct sem_case sem_fd_cases[] = {
    {"dup_family", dup_family},
    {"fcntl_flags", fcntl_flags},
    {"sock_flags_atomic", sock_flags_atomic},
    {"high_fds", high_fds},
    {"close_range_sockets", close_range_sockets},
    {NULL, NULL},
};
