// Data transfer calls: sendfile/sendfile64 (file -> socket), splice (socket <->
// pipe), readv/writev, sendmsg/recvmsg, sendmmsg/recvmmsg on TCP, and SCM_RIGHTS
// passing a TCP socket over a unix socketpair.
#include "sem.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

static int temp_file(const void* data, size_t n) {
  char path[] = "/tmp/xpress-sem-XXXXXX";
  int f = mkstemp(path);
  REQUIRE(f >= 0);
  REQUIRE(unlink(path) == 0);
  REQUIRE(write(f, data, n) == (ssize_t)n);
  REQUIRE(lseek(f, 0, SEEK_SET) == 0);
  return f;
}

static volatile sig_atomic_t sigpipes;
static void on_sigpipe(int sig) {
  (void)sig;
  sigpipes++;
}

static void sendfile_to_socket(void) {
  enum { N = 200000 };
  char* data = malloc(N);
  REQUIRE(data);
  fill_pattern(data, N, 3);
  int f = temp_file(data, N);
  int a, b;
  tcp_pair(&a, &b);
  struct sink s;
  sink_start(&s, b, N + 100000 + 50000 + 1);
  // sendfile with an offset: the file position does not move
  off_t off = 0;
  size_t total = 0;
  while (total < N) {
    ssize_t r = sendfile(a, f, &off, N - total);
    REQUIRE(r > 0);
    total += (size_t)r;
  }
  EQ("sendfile total", total, N);
  EQ("offset after", off, N);
  EQ("file position", lseek(f, 0, SEEK_CUR), 0);
  // sendfile64 without an offset: from and advancing the file position
  total = 0;
  while (total < 100000) {
    ssize_t r = sendfile64(a, f, NULL, 100000 - total);
    REQUIRE(r > 0);
    total += (size_t)r;
  }
  EQ("sendfile64 total", total, 100000);
  EQ("file position", lseek(f, 0, SEEK_CUR), 100000);
  // asking for more than the file has: stops at EOF
  off64_t off64 = N - 50000;
  total = 0;
  for (;;) {
    ssize_t r = sendfile64(a, f, &off64, 100000);
    REQUIRE(r >= 0);
    if (r == 0) break;
    total += (size_t)r;
  }
  EQ("sendfile64 up to EOF", total, 50000);
  RC(0, shutdown(a, SHUT_WR));
  sink_join(&s);
  EQ("received", s.got, N + 100000 + 50000);
  uint32_t h = fnv1a(s.buf, N);
  say("checksum part 1 = %08x", h);
  CHECK(h == fnv1a(data, N));
  CHECK(memcmp(s.buf + N, data, 100000) == 0);
  CHECK(memcmp(s.buf + N + 100000, data + N - 50000, 50000) == 0);
  // errors
  ERR(EINVAL, sendfile(a, b, NULL, 10)); // a socket is no sendfile source
  int wo = OK(open("/dev/null", O_WRONLY));
  ERR(EBADF, sendfile(a, wo, NULL, 10));
  // a broken connection: EPIPE, and SIGPIPE even without asking for it
  struct sigaction sa = {.sa_handler = on_sigpipe};
  REQUIRE(sigaction(SIGPIPE, &sa, NULL) == 0);
  int c, d;
  tcp_pair(&c, &d);
  RC(0, close(d));
  REQUIRE(wait_ready(c, POLLRDHUP, 2000) & POLLRDHUP);
  REQUIRE(send(c, "x", 1, MSG_NOSIGNAL) == 1);
  REQUIRE(wait_ready(c, 0, 2000) & POLLERR);
  off = 0;
  ERR(EPIPE, sendfile(c, f, &off, 100));
  ERR(EPIPE, sendfile(c, f, &off, 100));
  EQ("SIGPIPE count", sigpipes, 2);
  free(s.buf);
  free(data);
  int fds[] = {wo, c, f, a, b};
  for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
    RC(0, close(fds[i]));
}

struct source {
  int fd;
  size_t n;
  unsigned seed;
  pthread_t thread;
};

static void* source_main(void* arg) {
  struct source* s = arg;
  char* buf = malloc(s->n);
  fill_pattern(buf, s->n, s->seed);
  send_all(s->fd, buf, s->n);
  shutdown(s->fd, SHUT_WR);
  free(buf);
  return NULL;
}

static void splice_socket_pipe(void) {
  enum { N = 100000 };
  int a, b, p[2];
  tcp_pair(&a, &b);
  REQUIRE(pipe(p) == 0);
  struct source src = {.fd = a, .n = N, .seed = 4};
  REQUIRE(pthread_create(&src.thread, NULL, source_main, &src) == 0);
  char* got = malloc(N + 1);
  REQUIRE(got);
  size_t total = 0;
  int calls_ok = 1;
  for (;;) {
    ssize_t r = splice(b, NULL, p[1], NULL, 16384, SPLICE_F_MOVE);
    if (r < 0) {
      calls_ok = 0;
      say("splice failed: %s", ename(errno));
      break;
    }
    if (r == 0) break;
    REQUIRE(total + (size_t)r <= N);
    for (ssize_t done = 0; done < r;) {
      ssize_t n = read(p[0], got + total + done, (size_t)(r - done));
      REQUIRE(n > 0);
      done += n;
    }
    total += (size_t)r;
  }
  REQUIRE(pthread_join(src.thread, NULL) == 0);
  CHECK(calls_ok);
  EQ("spliced socket -> pipe", total, N);
  char* want = malloc(N);
  REQUIRE(want);
  fill_pattern(want, N, 4);
  say("checksum = %08x", fnv1a(got, total));
  CHECK(fnv1a(got, total) == fnv1a(want, N));
  // pipe -> socket
  fill_pattern(want, 5000, 5);
  RC(5000, write(p[1], want, 5000));
  total = 0;
  while (total < 5000) {
    ssize_t r = splice(p[0], NULL, b, NULL, 5000 - total, 0);
    REQUIRE(r > 0);
    total += (size_t)r;
  }
  EQ("spliced pipe -> socket", total, 5000);
  EQ("received", recv_all(a, got, 5000), 5000);
  CHECK(memcmp(got, want, 5000) == 0);
  loff_t off = 0;
  // an offset on the socket side: ESPIPE on older kernels, EINVAL on newer ones
  long r = ANY(splice(b, &off, p[1], NULL, 10, 0));
  CHECK(r == -1 && (errno == ESPIPE || errno == EINVAL));
  ERR(EINVAL, splice(a, NULL, b, NULL, 10, 0)); // neither end is a pipe
  free(got);
  free(want);
  int fds[] = {p[0], p[1], a, b};
  for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
    RC(0, close(fds[i]));
}

static void readv_writev(void) {
  int a, b;
  tcp_pair(&a, &b);
  struct iovec out[4] = {{"hello", 5}, {"-", 1}, {"world!", 6}, {"", 0}};
  RC(12, writev(a, out, 4));
  wait_avail(b, 12);
  char x[4], y[4], z[10];
  struct iovec in[3] = {{x, sizeof x}, {y, sizeof y}, {z, sizeof z}};
  RC(12, readv(b, in, 3));
  CHECK(memcmp(x, "hell", 4) == 0 && memcmp(y, "o-wo", 4) == 0 && memcmp(z, "rld!", 4) == 0);
  RC(0, writev(a, out, 0));
  struct iovec* many = calloc(IOV_MAX + 1, sizeof *many);
  REQUIRE(many);
  ERR(EINVAL, readv(b, many, IOV_MAX + 1));
  ERR(EINVAL, writev(a, many, IOV_MAX + 1));
  free(many);
  RC(0, shutdown(a, SHUT_WR));
  RC(0, readv(b, in, 3));
  RC(0, close(a));
  RC(0, close(b));
}

static void sendmsg_recvmsg(void) {
  int a, b;
  tcp_pair(&a, &b);
  struct iovec out[2] = {{"abcd", 4}, {"efghi", 5}};
  struct msghdr m = {.msg_iov = out, .msg_iovlen = 2};
  RC(9, sendmsg(a, &m, 0));
  wait_avail(b, 9);
  char buf[64];
  struct sockaddr_in from;
  struct iovec in = {buf, sizeof buf};
  struct msghdr r = {
      .msg_name = &from, .msg_namelen = sizeof from, .msg_iov = &in, .msg_iovlen = 1};
  RC(9, recvmsg(b, &r, MSG_PEEK));
  RC(9, recvmsg(b, &r, 0));
  CHECK(memcmp(buf, "abcdefghi", 9) == 0);
  EQ("msg_flags", r.msg_flags, 0);
  EQ("msg_namelen (TCP fills no address)", r.msg_namelen, 0);
  // a short buffer: the rest stays queued, no MSG_TRUNC on a stream
  RC(9, sendmsg(a, &m, MSG_NOSIGNAL));
  wait_avail(b, 9);
  in.iov_len = 4;
  r = (struct msghdr){.msg_iov = &in, .msg_iovlen = 1};
  RC(4, recvmsg(b, &r, 0));
  EQ("msg_flags", r.msg_flags, 0);
  in.iov_len = sizeof buf;
  RC(5, recvmsg(b, &r, MSG_DONTWAIT));
  CHECK(memcmp(buf, "efghi", 5) == 0);
  ERR(EAGAIN, recvmsg(b, &r, MSG_DONTWAIT));
  // sendto with an address on a connected stream socket: the address is ignored
  struct sockaddr_in self;
  REQUIRE(getsockname(b, (struct sockaddr*)&self, &(socklen_t){sizeof self}) == 0);
  RC(3, sendto(a, "xyz", 3, 0, (struct sockaddr*)&self, sizeof self));
  wait_avail(b, 3);
  socklen_t flen = sizeof from;
  RC(3, recvfrom(b, buf, sizeof buf, 0, (struct sockaddr*)&from, &flen));
  RC(0, close(a));
  RC(0, close(b));
}

static void sendmmsg_recvmmsg(void) {
  int a, b;
  tcp_pair(&a, &b);
  char data[60];
  fill_pattern(data, sizeof data, 6);
  struct iovec out[3] = {{data, 10}, {data + 10, 20}, {data + 30, 30}};
  struct mmsghdr mo[3];
  memset(mo, 0, sizeof mo);
  for (int i = 0; i < 3; i++) {
    mo[i].msg_hdr.msg_iov = &out[i];
    mo[i].msg_hdr.msg_iovlen = 1;
  }
  RC(3, sendmmsg(a, mo, 3, 0));
  say("msg_len = %u %u %u", mo[0].msg_len, mo[1].msg_len, mo[2].msg_len);
  CHECK(mo[0].msg_len == 10 && mo[1].msg_len == 20 && mo[2].msg_len == 30);
  wait_avail(b, 60);
  char in[3][25];
  struct iovec iv[3];
  struct mmsghdr mi[3];
  memset(mi, 0, sizeof mi);
  for (int i = 0; i < 3; i++) {
    iv[i] = (struct iovec){in[i], sizeof in[i]};
    mi[i].msg_hdr.msg_iov = &iv[i];
    mi[i].msg_hdr.msg_iovlen = 1;
  }
  RC(3, recvmmsg(b, mi, 3, MSG_DONTWAIT, NULL));
  say("msg_len = %u %u %u", mi[0].msg_len, mi[1].msg_len, mi[2].msg_len);
  CHECK(mi[0].msg_len == 25 && mi[1].msg_len == 25 && mi[2].msg_len == 10);
  CHECK(memcmp(in[0], data, 25) == 0 && memcmp(in[1], data + 25, 25) == 0 &&
        memcmp(in[2], data + 50, 10) == 0);
  ERR(EAGAIN, recvmmsg(b, mi, 3, MSG_DONTWAIT, NULL));
  // MSG_WAITFORONE: block for the first, then take what is there
  RC(1, sendmmsg(a, mo, 1, 0));
  RC(1, recvmmsg(b, mi, 3, MSG_WAITFORONE, NULL));
  EQ("msg_len", mi[0].msg_len, 10);
  RC(0, close(a));
  RC(0, close(b));
}

static int send_fds(int u, const int* fds, int n) {
  char ctl[CMSG_SPACE(4 * sizeof(int))];
  memset(ctl, 0, sizeof ctl);
  struct iovec iov = {"F", 1};
  struct msghdr m = {.msg_iov = &iov,
                     .msg_iovlen = 1,
                     .msg_control = ctl,
                     .msg_controllen = CMSG_SPACE(n * sizeof(int))};
  struct cmsghdr* c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(n * sizeof(int));
  memcpy(CMSG_DATA(c), fds, n * sizeof(int));
  return (int)sendmsg(u, &m, 0);
}

// Receives up to 4 fds; returns their count (-1 on error), *flags = msg_flags.
static int recv_fds(int u, int* fds, int ctl_space, int flags, int* msg_flags) {
  char ctl[CMSG_SPACE(4 * sizeof(int))];
  char c;
  struct iovec iov = {&c, 1};
  struct msghdr m = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = (size_t)ctl_space};
  if (recvmsg(u, &m, flags) != 1) return -1;
  *msg_flags = m.msg_flags;
  int n = 0;
  for (struct cmsghdr* h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h)) {
    if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
    int k = (int)((h->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    memcpy(fds + n, CMSG_DATA(h), k * sizeof(int));
    n += k;
  }
  return n;
}

static void scm_rights_tcp(void) {
  int a, b, u[2];
  tcp_pair(&a, &b);
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, u) == 0);
  struct sockaddr_in bname, peer;
  REQUIRE(getsockname(b, (struct sockaddr*)&bname, &(socklen_t){sizeof bname}) == 0);
  RC(1, send_fds(u[0], &a, 1));
  RC(0, close(a)); // the in-flight reference keeps the connection open
  int got[4], fl = -1;
  RC(1, recv_fds(u[1], got, sizeof(char[CMSG_SPACE(4 * sizeof(int))]), MSG_CMSG_CLOEXEC, &fl));
  EQ("msg_flags (MSG_CMSG_CLOEXEC is echoed)", fl, MSG_CMSG_CLOEXEC);
  int n = got[0];
  EQ("F_GETFD(received)", fcntl(n, F_GETFD), FD_CLOEXEC);
  int type = 0;
  RC(0, getsockopt(n, SOL_SOCKET, SO_TYPE, &type, &(socklen_t){sizeof type}));
  EQ("SO_TYPE", type, SOCK_STREAM);
  RC(0, getpeername(n, (struct sockaddr*)&peer, &(socklen_t){sizeof peer}));
  CHECK(peer.sin_port == bname.sin_port && peer.sin_addr.s_addr == bname.sin_addr.s_addr);
  CHECK(roundtrip(n, b));
  // two fds at once: a socket and a pipe end
  int p[2];
  REQUIRE(pipe(p) == 0);
  int two[2] = {n, p[1]};
  RC(1, send_fds(u[1], two, 2));
  RC(2, recv_fds(u[0], got, sizeof(char[CMSG_SPACE(4 * sizeof(int))]), 0, &fl));
  EQ("F_GETFD(received socket)", fcntl(got[0], F_GETFD), 0);
  CHECK(roundtrip(got[0], b));
  RC(2, write(got[1], "pp", 2));
  char buf[4];
  RC(2, read(p[0], buf, sizeof buf));
  RC(0, close(got[0]));
  RC(0, close(got[1]));
  // no room for the control data: MSG_CTRUNC, no fd installed
  RC(1, send_fds(u[0], &n, 1));
  RC(0, recv_fds(u[1], got, 0, 0, &fl));
  EQ("msg_flags & MSG_CTRUNC", fl & MSG_CTRUNC, MSG_CTRUNC);
  CHECK(roundtrip(n, b));
  RC(0, close(n)); // the last reference: b sees EOF
  REQUIRE(wait_ready(b, POLLIN, 2000) & POLLIN);
  RC(0, recv(b, buf, sizeof buf, 0));
  int fds[] = {p[0], p[1], u[0], u[1], b};
  for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
    RC(0, close(fds[i]));
}

const struct sem_case sem_data_cases[] = {
    {"sendfile_to_socket", sendfile_to_socket},
    {"splice_socket_pipe", splice_socket_pipe},
    {"readv_writev", readv_writev},
    {"sendmsg_recvmsg", sendmsg_recvmsg},
    {"sendmmsg_recvmmsg", sendmmsg_recvmmsg},
    {"scm_rights_tcp", scm_rights_tcp},
    {NULL, NULL},
};
