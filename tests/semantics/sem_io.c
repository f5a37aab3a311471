// Data-path flags and signals: MSG_PEEK, MSG_WAITALL, MSG_DONTWAIT, half-close,
// EPIPE/SIGPIPE with and without MSG_NOSIGNAL, EINTR and SA_RESTART.
#include "sem.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static void msg_peek(void) {
  int a, b;
  tcp_pair(&a, &b);
  char buf[64];
  RC(11, send(a, "hello world", 11, 0));
  wait_avail(b, 11);
  RC(5, recv(b, buf, 5, MSG_PEEK));
  CHECK(memcmp(buf, "hello", 5) == 0);
  RC(11, recv(b, buf, sizeof buf, MSG_PEEK));
  RC(11, recv(b, buf, sizeof buf, 0));
  CHECK(memcmp(buf, "hello world", 11) == 0);
  // peek across two separately arrived segments
  RC(3, send(a, "abc", 3, 0));
  wait_avail(b, 3);
  RC(3, send(a, "def", 3, 0));
  wait_avail(b, 6);
  RC(6, recv(b, buf, sizeof buf, MSG_PEEK));
  CHECK(memcmp(buf, "abcdef", 6) == 0);
  RC(2, recv(b, buf, 2, 0));
  CHECK(memcmp(buf, "ab", 2) == 0);
  RC(4, recv(b, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT));
  CHECK(memcmp(buf, "cdef", 4) == 0);
  RC(4, read(b, buf, sizeof buf));
  CHECK(memcmp(buf, "cdef", 4) == 0);
  ERR(EAGAIN, recv(b, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT));
  // a large peek equals the data read afterwards
  enum { N = 60000 };
  char* out = malloc(N);
  char* in = malloc(N);
  REQUIRE(out && in);
  fill_pattern(out, N, 1);
  send_all(a, out, N);
  wait_avail(b, N);
  RC(N, recv(b, in, N, MSG_PEEK));
  uint32_t peeked = fnv1a(in, N);
  memset(in, 0, N);
  EQ("received", recv_all(b, in, N), N);
  CHECK(peeked == fnv1a(in, N) && peeked == fnv1a(out, N));
  // peek at EOF
  RC(0, shutdown(a, SHUT_WR));
  wait_ready(b, POLLIN, 2000);
  RC(0, recv(b, buf, sizeof buf, MSG_PEEK));
  RC(0, recv(b, buf, sizeof buf, 0));
  free(out);
  free(in);
  RC(0, close(a));
  RC(0, close(b));
}

struct piecewise {
  int fd;
};

static void* send_in_pieces(void* arg) {
  struct piecewise* p = arg;
  char buf[1300];
  fill_pattern(buf, sizeof buf, 2);
  for (int i = 0; i < 10; i++) {
    send_all(p->fd, buf + i * 100, 100);
    msleep(5);
  }
  msleep(20);
  send_all(p->fd, buf + 1000, 300);
  shutdown(p->fd, SHUT_WR);
  return NULL;
}

static void msg_waitall(void) {
  int a, b;
  tcp_pair(&a, &b);
  struct piecewise p = {a};
  pthread_t t;
  REQUIRE(pthread_create(&t, NULL, send_in_pieces, &p) == 0);
  char want[1300], buf[1300];
  fill_pattern(want, sizeof want, 2);
  RC(1000, recv(b, buf, 1000, MSG_WAITALL));
  CHECK(memcmp(buf, want, 1000) == 0);
  RC(300, recv(b, buf, 1000, MSG_WAITALL)); // short: EOF after 300
  CHECK(memcmp(buf, want + 1000, 300) == 0);
  RC(0, recv(b, buf, 1000, MSG_WAITALL));
  REQUIRE(pthread_join(t, NULL) == 0);
  // with MSG_DONTWAIT (or O_NONBLOCK) MSG_WAITALL returns what is there
  int c, d;
  tcp_pair(&c, &d);
  RC(5, send(c, "12345", 5, 0));
  wait_avail(d, 5);
  RC(5, recv(d, buf, 10, MSG_WAITALL | MSG_DONTWAIT));
  RC(3, send(c, "678", 3, 0));
  wait_avail(d, 3);
  REQUIRE(fcntl(d, F_SETFL, O_NONBLOCK) == 0);
  RC(3, recv(d, buf, 10, MSG_WAITALL));
  ERR(EAGAIN, recv(d, buf, 10, MSG_WAITALL));
  RC(0, close(a));
  RC(0, close(b));
  RC(0, close(c));
  RC(0, close(d));
}

// MSG_MORE is a hint: the bytes may wait for the next send, never longer
// than the kernel's cork timer (200 ms; xpress: ~2 ms), and every byte
// arrives in order, with a later send, a FIN, or alone.
static void msg_more(void) {
  int a, b;
  tcp_pair(&a, &b);
  char buf[64];
  RC(4, send(a, "head", 4, MSG_MORE));
  RC(4, send(a, "body", 4, 0));
  wait_avail(b, 8);
  RC(8, recv(b, buf, sizeof buf, 0));
  CHECK(memcmp(buf, "headbody", 8) == 0);
  // Nothing follows: the peer, which only peeks, still sees them.
  long t0 = now_ms();
  RC(4, send(a, "solo", 4, MSG_MORE));
  wait_avail(b, 4);
  CHECK(now_ms() - t0 < 2000);
  RC(4, recv(b, buf, sizeof buf, 0));
  CHECK(memcmp(buf, "solo", 4) == 0);
  // A bulk of MSG_MORE sends, then the end.
  enum { N = 200000, M = 1000 };
  char* out = malloc(N);
  REQUIRE(out);
  fill_pattern(out, N, 7);
  struct sink s;
  sink_start(&s, b, N + 1); // to the end of stream
  for (int i = 0; i < N; i += M)
    RC(M, send(a, out + i, M, MSG_MORE));
  RC(0, shutdown(a, SHUT_WR));
  sink_join(&s);
  EQ("received", s.got, N);
  CHECK(fnv1a(s.buf, N) == fnv1a(out, N));
  RC(0, recv(b, buf, sizeof buf, 0));
  free(out);
  free(s.buf);
  RC(0, close(a));
  RC(0, close(b));
}

// Right after a non-blocking send's EAGAIN, poll(POLLOUT, 0) on a: the
// kernel's socket stays full until the peer reads.  Under xpress the
// direction may finish its switch to RDMA in between (docs/protocol.md §3,
// the upgrade runs beside the program), and the stream has room: then
// POLLOUT must be true to its word (a send takes bytes at once), and once
// the stream is full too it stays full (a direction switches once).
// send(MSG_DONTWAIT) until it fails (at most 100000 calls): the bytes
// taken, and in *err the failure's errno (0: it never failed).
static long fill_nonblocking(int a, const char* chunk, size_t len, int* err) {
  long sent = 0;
  *err = 0;
  for (int i = 0; i < 100000; i++) {
    ssize_t r = send(a, chunk, len, MSG_DONTWAIT);
    if (r < 0) {
      *err = errno;
      break;
    }
    sent += r;
  }
  return sent;
}

static int still_full_or_takes(int a, const char* chunk, size_t len, long* sent) {
  struct pollfd p = {.fd = a, .events = POLLOUT};
  int r = poll(&p, 1, 0);
  if (r == 0) return 1;
  if (r != 1 || p.revents != POLLOUT) return 0;
  int err;
  long n = fill_nonblocking(a, chunk, len, &err);
  *sent += n;
  return n > 0 && err == EAGAIN && poll(&p, 1, 0) == 0;
}

static void msg_dontwait(void) {
  int a, b;
  tcp_pair(&a, &b);
  char buf[64];
  ERR(EAGAIN, recv(b, buf, sizeof buf, MSG_DONTWAIT));
  say("F_GETFL = %s", fdflags(fcntl(b, F_GETFL))); // still blocking
  RC(3, send(a, "abc", 3, 0));
  wait_avail(b, 3);
  RC(3, recv(b, buf, sizeof buf, MSG_DONTWAIT));
  // fill the send path with MSG_DONTWAIT until EAGAIN
  int small = 4096;
  RC(0, setsockopt(a, SOL_SOCKET, SO_SNDBUF, &small, sizeof small));
  enum { CHUNK = 16384 };
  char* chunk = calloc(1, CHUNK);
  REQUIRE(chunk);
  int last_errno;
  long sent = fill_nonblocking(a, chunk, CHUNK, &last_errno);
  say("send(MSG_DONTWAIT) stopped with %s", ename(last_errno));
  CHECK(last_errno == EAGAIN && sent > 0);
  say("F_GETFL = %s", fdflags(fcntl(a, F_GETFL)));
  struct pollfd p = {.fd = a, .events = POLLOUT};
  CHECK(still_full_or_takes(a, chunk, CHUNK, &sent));
  long got = 0;
  while (got < sent) {
    ssize_t r = recv(b, chunk, CHUNK, 0);
    REQUIRE(r > 0);
    got += r;
  }
  CHECK(got == sent);
  RC(1, poll(&p, 1, 2000));
  MASK("revents after drain", p.revents, POLLOUT);
  ERR(EAGAIN, recv(b, buf, sizeof buf, MSG_DONTWAIT));
  free(chunk);
  RC(0, close(a));
  RC(0, close(b));
}

static void half_close(void) {
  int a, b;
  tcp_pair(&a, &b);
  char buf[16];
  RC(7, send(a, "request", 7, 0));
  RC(0, shutdown(a, SHUT_WR));
  wait_avail(b, 7);
  RC(7, recv(b, buf, sizeof buf, 0));
  CHECK(memcmp(buf, "request", 7) == 0);
  RC(0, recv(b, buf, sizeof buf, 0));
  RC(0, read(b, buf, sizeof buf)); // EOF is sticky
  RC(5, send(b, "reply", 5, 0));   // the peer can still send
  wait_avail(a, 5);
  RC(5, recv(a, buf, sizeof buf, 0));
  CHECK(memcmp(buf, "reply", 5) == 0);
  ERR(EPIPE, send(a, "x", 1, MSG_NOSIGNAL));
  int err = -1;
  RC(0, getsockopt(a, SOL_SOCKET, SO_ERROR, &err, &(socklen_t){sizeof err}));
  EQ("SO_ERROR", err, 0);
  RC(0, shutdown(a, SHUT_WR)); // again: no error
  RC(0, shutdown(b, SHUT_WR));
  wait_ready(a, POLLIN, 2000);
  RC(0, recv(a, buf, sizeof buf, 0));
  // SHUT_RD: reads return EOF at once
  int c, d;
  tcp_pair(&c, &d);
  RC(0, shutdown(d, SHUT_RD));
  RC(0, recv(d, buf, sizeof buf, 0));
  RC(2, send(d, "ok", 2, 0));
  wait_avail(c, 2);
  RC(2, recv(c, buf, sizeof buf, 0));
  ERR(EINVAL, shutdown(c, 7));
  int nul = OK(open("/dev/null", O_RDONLY));
  ERR(ENOTSOCK, shutdown(nul, SHUT_WR));
  RC(0, close(nul));
  RC(0, close(a));
  RC(0, close(b));
  RC(0, close(c));
  RC(0, close(d));
}

// ---- EPIPE / SIGPIPE

static volatile sig_atomic_t sigpipes;
static void on_sigpipe(int sig) {
  (void)sig;
  sigpipes++;
}

// A connected socket whose peer has closed and answered with RST.
static int broken_socket(void) {
  int a, b;
  tcp_pair(&a, &b);
  REQUIRE(close(b) == 0);
  REQUIRE(wait_ready(a, POLLRDHUP, 2000) & POLLRDHUP);
  REQUIRE(send(a, "x", 1, MSG_NOSIGNAL) == 1); // accepted locally; the peer answers RST
  int rev = wait_ready(a, 0, 2000);
  MASK("broken socket revents", rev, POLLERR | POLLHUP);
  return a;
}

static void epipe_sigpipe(void) {
  struct sigaction sa = {.sa_handler = on_sigpipe};
  REQUIRE(sigaction(SIGPIPE, &sa, NULL) == 0);
  int a = broken_socket();
  EQ("SIGPIPE count", sigpipes, 0);
  ERR(EPIPE, send(a, "x", 1, MSG_NOSIGNAL));
  EQ("SIGPIPE count", sigpipes, 0);
  ERR(EPIPE, send(a, "x", 1, 0));
  EQ("SIGPIPE count", sigpipes, 1);
  ERR(EPIPE, write(a, "x", 1));
  EQ("SIGPIPE count", sigpipes, 2);
  struct iovec iov = {.iov_base = "xy", .iov_len = 2};
  ERR(EPIPE, writev(a, &iov, 1));
  EQ("SIGPIPE count", sigpipes, 3);
  ERR(EPIPE, sendto(a, "x", 1, MSG_NOSIGNAL, NULL, 0));
  EQ("SIGPIPE count", sigpipes, 3);
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
  ERR(EPIPE, sendmsg(a, &m, 0));
  EQ("SIGPIPE count", sigpipes, 4);
  ERR(EPIPE, sendmsg(a, &m, MSG_NOSIGNAL));
  EQ("SIGPIPE count", sigpipes, 4);
  char buf[4];
  RC(0, recv(a, buf, sizeof buf, 0));
  int err = -1;
  RC(0, getsockopt(a, SOL_SOCKET, SO_ERROR, &err, &(socklen_t){sizeof err}));
  EQ("SO_ERROR", err, 0);
  RC(0, close(a));
}

static void sigpipe_dispositions(void) {
  // default disposition: write() kills, send(MSG_NOSIGNAL) does not
  for (int nosig = 0; nosig < 2; nosig++) {
    int a = broken_socket();
    fflush(stdout);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      signal(SIGPIPE, SIG_DFL);
      ssize_t r = nosig ? send(a, "x", 1, MSG_NOSIGNAL) : write(a, "x", 1);
      _exit(r == -1 && errno == EPIPE ? 42 : 1);
    }
    int st;
    REQUIRE(waitpid(pid, &st, 0) == pid);
    if (WIFSIGNALED(st))
      say("child %s: killed by %s", nosig ? "send(MSG_NOSIGNAL)" : "write", signame(WTERMSIG(st)));
    else
      say("child %s: exit %d", nosig ? "send(MSG_NOSIGNAL)" : "write", WEXITSTATUS(st));
    if (nosig)
      CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 42);
    else
      CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGPIPE);
    RC(0, close(a));
  }
  // ignored: EPIPE only
  signal(SIGPIPE, SIG_IGN);
  int a = broken_socket();
  ERR(EPIPE, write(a, "x", 1));
  ERR(EPIPE, send(a, "x", 1, 0));
  // blocked: EPIPE, and the signal stays pending
  signal(SIGPIPE, SIG_DFL);
  sigset_t set, pending;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  REQUIRE(sigprocmask(SIG_BLOCK, &set, NULL) == 0);
  ERR(EPIPE, write(a, "x", 1));
  REQUIRE(sigpending(&pending) == 0);
  EQ("SIGPIPE pending", sigismember(&pending, SIGPIPE), 1);
  signal(SIGPIPE, SIG_IGN); // discard it
  RC(0, close(a));
}

// ---- EINTR and SA_RESTART

static volatile sig_atomic_t usr1s;
static void on_usr1(int sig) {
  (void)sig;
  usr1s++;
}

struct kicker {
  pthread_t target;
  int delay_ms;
  int fd; // when >= 0: send "late" on it data_ms after the signal
  int data_ms;
  pthread_t thread;
};

static void* kick(void* arg) {
  struct kicker* k = arg;
  msleep(k->delay_ms);
  pthread_kill(k->target, SIGUSR1);
  if (k->fd >= 0) {
    msleep(k->data_ms);
    send(k->fd, "late", 4, 0);
  }
  return NULL;
}

static void kick_start(struct kicker* k, int delay_ms, int fd, int data_ms) {
  *k =
      (struct kicker){.target = pthread_self(), .delay_ms = delay_ms, .fd = fd, .data_ms = data_ms};
  REQUIRE(pthread_create(&k->thread, NULL, kick, k) == 0);
}

static void kick_join(struct kicker* k) {
  REQUIRE(pthread_join(k->thread, NULL) == 0);
}

static void set_usr1(int flags) {
  struct sigaction sa = {.sa_handler = on_usr1, .sa_flags = flags};
  REQUIRE(sigaction(SIGUSR1, &sa, NULL) == 0);
}

static void eintr_restart(void) {
  int a, b;
  tcp_pair(&a, &b);
  char buf[16];
  struct kicker k;
  set_usr1(0);
  kick_start(&k, 50, -1, 0);
  ERR(EINTR, recv(b, buf, sizeof buf, 0));
  kick_join(&k);
  EQ("SIGUSR1 count", usr1s, 1);
  int l = tcp_listener(NULL);
  kick_start(&k, 50, -1, 0);
  ERR(EINTR, accept(l, NULL, NULL));
  kick_join(&k);
  // MSG_WAITALL interrupted after some data: the partial count
  RC(4, send(a, "part", 4, 0));
  wait_avail(b, 4);
  kick_start(&k, 50, -1, 0);
  RC(4, recv(b, buf, 10, MSG_WAITALL));
  kick_join(&k);
  set_usr1(SA_RESTART);
  kick_start(&k, 50, a, 50);
  RC(4, recv(b, buf, sizeof buf, 0)); // restarted, then gets the late data
  kick_join(&k);
  CHECK(memcmp(buf, "late", 4) == 0);
  EQ("SIGUSR1 count", usr1s, 4);
  // readiness calls are never restarted
  struct pollfd p = {.fd = b, .events = POLLIN};
  kick_start(&k, 50, -1, 0);
  ERR(EINTR, poll(&p, 1, 3000));
  kick_join(&k);
  int ep = OK(epoll_create1(0));
  struct epoll_event ev = {.events = EPOLLIN};
  RC(0, epoll_ctl(ep, EPOLL_CTL_ADD, b, &ev));
  kick_start(&k, 50, -1, 0);
  ERR(EINTR, epoll_wait(ep, &ev, 1, 3000));
  kick_join(&k);
  fd_set r;
  FD_ZERO(&r);
  FD_SET(b, &r);
  kick_start(&k, 50, -1, 0);
  ERR(EINTR, select(b + 1, &r, NULL, NULL, &(struct timeval){3, 0}));
  kick_join(&k);
  // a receive timeout disables restarting
  struct timeval tv = {3, 0};
  RC(0, setsockopt(b, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv));
  kick_start(&k, 50, -1, 0);
  ERR(EINTR, recv(b, buf, sizeof buf, 0));
  kick_join(&k);
  EQ("SIGUSR1 count", usr1s, 8);
  RC(0, close(ep));
  RC(0, close(l));
  RC(0, close(a));
  RC(0, close(b));
}

const struct sem_case sem_io_cases[] = {
    {"msg_peek", msg_peek},
    {"msg_waitall", msg_waitall},
    {"msg_dontwait", msg_dontwait},
    {"half_close", half_close},
    {"msg_more", msg_more},
    {"epipe_sigpipe", epipe_sigpipe},
    {"sigpipe_dispositions", sigpipe_dispositions},
    {"eintr_restart", eintr_restart},
    {NULL, NULL},
};
