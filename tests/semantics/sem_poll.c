// poll, ppoll, select, pselect: readiness for read, write, hang-up and reset,
// listening sockets, out-of-band data, timeouts 0 and small, errors, high fds.
#include "sem.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

// poll() one fd: prints the count and revents; checks both.
static void poll1(int fd, short events, int ms, int want, short want_revents) {
  struct pollfd p = {.fd = fd, .events = events};
  RC(want, poll(&p, 1, ms));
  MASK("  revents", p.revents, want_revents);
}

static void poll_readiness(void) {
  int a, b;
  tcp_pair(&a, &b);
  poll1(b, POLLIN | POLLOUT, 0, 1, POLLOUT);
  poll1(b, POLLIN, 0, 0, 0);
  RC(5, send(a, "hello", 5, 0));
  poll1(b, POLLIN, 2000, 1, POLLIN);
  poll1(b, POLLIN | POLLOUT | POLLRDHUP | POLLRDNORM, 0, 1, POLLIN | POLLOUT | POLLRDNORM);
  char buf[8];
  RC(5, recv(b, buf, sizeof buf, 0));
  poll1(b, POLLIN, 0, 0, 0);
  // half-close by the peer: readable (EOF) and RDHUP, still writable
  RC(0, shutdown(a, SHUT_WR));
  poll1(b, POLLIN | POLLRDHUP, 2000, 1, POLLIN | POLLRDHUP);
  poll1(b, POLLOUT, 0, 1, POLLOUT);
  // both directions shut: hang-up on both ends
  RC(0, shutdown(b, SHUT_WR));
  poll1(a, POLLRDHUP, 2000, 1, POLLRDHUP | POLLHUP);
  poll1(a, POLLIN | POLLOUT | POLLRDHUP, 0, 1, POLLIN | POLLOUT | POLLRDHUP | POLLHUP);
  poll1(b, POLLIN | POLLOUT | POLLRDHUP, 0, 1, POLLIN | POLLOUT | POLLRDHUP | POLLHUP);
  poll1(b, 0, 0, 1, POLLHUP); // POLLHUP is reported even when not requested
  RC(0, close(a));
  RC(0, close(b));
}

static void poll_reset(void) {
  int a, b;
  tcp_pair(&a, &b);
  struct linger lg = {.l_onoff = 1, .l_linger = 0};
  RC(0, setsockopt(a, SOL_SOCKET, SO_LINGER, &lg, sizeof lg));
  RC(0, close(a)); // abortive close: RST
  poll1(b, POLLIN, 2000, 1, POLLIN | POLLERR | POLLHUP);
  poll1(b, POLLIN | POLLOUT, 0, 1, POLLIN | POLLOUT | POLLERR | POLLHUP);
  char buf[4];
  ERR(ECONNRESET, recv(b, buf, sizeof buf, 0));
  RC(0, recv(b, buf, sizeof buf, 0));
  poll1(b, POLLIN | POLLOUT, 0, 1, POLLIN | POLLOUT | POLLHUP);
  RC(0, close(b));
}

static void poll_many_and_nval(void) {
  int a, b;
  tcp_pair(&a, &b);
  int gone = OK(dup(a));
  RC(0, close(gone));
  struct pollfd p[4] = {
      {.fd = a, .events = POLLOUT},
      {.fd = b, .events = POLLIN},
      {.fd = gone, .events = POLLIN},
      {.fd = -1, .events = POLLIN}, // ignored
  };
  RC(2, poll(p, 4, 0));
  MASK("p[0] writer", p[0].revents, POLLOUT);
  MASK("p[1] reader", p[1].revents, 0);
  MASK("p[2] closed fd", p[2].revents, POLLNVAL);
  MASK("p[3] fd -1", p[3].revents, 0);
  RC(1, send(a, "z", 1, 0));
  p[0].events = 0;
  RC(2, poll(p, 4, 2000));
  MASK("p[0] no events", p[0].revents, 0);
  MASK("p[1] reader", p[1].revents, POLLIN);
  MASK("p[2] closed fd", p[2].revents, POLLNVAL);
  // timeouts
  RC(0, poll(NULL, 0, 0));
  long t0 = now_ms();
  RC(0, poll(NULL, 0, 30));
  CHECK(now_ms() - t0 >= 25);
  t0 = now_ms();
  struct pollfd q = {.fd = a, .events = POLLIN};
  RC(0, poll(&q, 1, 30));
  CHECK(now_ms() - t0 >= 25);
  RC(0, close(a));
  RC(0, close(b));
}

static void ppoll_readiness(void) {
  int a, b;
  tcp_pair(&a, &b);
  struct pollfd p = {.fd = b, .events = POLLIN};
  struct timespec zero = {0, 0}, small = {0, 30 * 1000000L}, big = {2, 0};
  RC(0, ppoll(&p, 1, &zero, NULL));
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGUSR2);
  long t0 = now_ms();
  RC(0, ppoll(&p, 1, &small, &mask));
  CHECK(now_ms() - t0 >= 25);
  CHECK(small.tv_sec == 0 && small.tv_nsec == 30 * 1000000L); // not modified
  RC(3, send(a, "abc", 3, 0));
  RC(1, ppoll(&p, 1, &big, &mask));
  MASK("revents", p.revents, POLLIN);
  p.events = POLLIN | POLLOUT;
  RC(1, ppoll(&p, 1, NULL, NULL));
  MASK("revents", p.revents, POLLIN | POLLOUT);
  RC(0, shutdown(a, SHUT_WR));
  char buf[8];
  RC(3, recv(b, buf, sizeof buf, 0));
  p.events = POLLRDHUP;
  RC(1, ppoll(&p, 1, &big, NULL));
  MASK("revents", p.revents, POLLRDHUP);
  RC(0, close(a));
  RC(0, close(b));
}

static void select_readiness(void) {
  int a, b;
  tcp_pair(&a, &b);
  fd_set r, w;
  FD_ZERO(&r);
  FD_ZERO(&w);
  FD_SET(b, &r);
  FD_SET(b, &w);
  struct timeval tv = {0, 0};
  RC(1, select(b + 1, &r, &w, NULL, &tv));
  CHECK(!FD_ISSET(b, &r) && FD_ISSET(b, &w));
  FD_ZERO(&r);
  FD_SET(b, &r);
  tv = (struct timeval){0, 30000};
  long t0 = now_ms();
  RC(0, select(b + 1, &r, NULL, NULL, &tv));
  CHECK(now_ms() - t0 >= 25);
  CHECK(!FD_ISSET(b, &r));
  CHECK(tv.tv_sec == 0 && tv.tv_usec == 0); // Linux writes back the time left
  RC(4, send(a, "data", 4, 0));
  FD_SET(b, &r);
  tv = (struct timeval){2, 0};
  RC(1, select(b + 1, &r, NULL, NULL, &tv));
  CHECK(FD_ISSET(b, &r));
  long left = tv.tv_sec * 1000000L + tv.tv_usec;
  CHECK(left > 1000000 && left < 2000000);
  char buf[8];
  RC(4, recv(b, buf, sizeof buf, 0));
  // EOF makes the socket readable
  RC(0, shutdown(a, SHUT_WR));
  FD_ZERO(&r);
  FD_SET(b, &r);
  RC(1, select(b + 1, &r, NULL, NULL, &(struct timeval){2, 0}));
  CHECK(FD_ISSET(b, &r));
  RC(0, recv(b, buf, sizeof buf, 0));
  // two fds in one call
  FD_ZERO(&r);
  FD_ZERO(&w);
  FD_SET(a, &r);
  FD_SET(b, &r);
  FD_SET(a, &w);
  int n = a > b ? a : b;
  RC(2, select(n + 1, &r, &w, NULL, &(struct timeval){0, 0}));
  CHECK(!FD_ISSET(a, &r) && FD_ISSET(b, &r) && FD_ISSET(a, &w));
  // errors and plain sleeping
  int gone = OK(dup(a));
  RC(0, close(gone));
  FD_ZERO(&r);
  FD_SET(gone, &r);
  ERR(EBADF, select(gone + 1, &r, NULL, NULL, &(struct timeval){0, 0}));
  ERR(EINVAL, select(-1, NULL, NULL, NULL, &(struct timeval){0, 0}));
  ERR(EINVAL, select(0, NULL, NULL, NULL, &(struct timeval){-1, 0}));
  t0 = now_ms();
  RC(0, select(0, NULL, NULL, NULL, &(struct timeval){0, 30000}));
  CHECK(now_ms() - t0 >= 25);
  RC(0, close(a));
  RC(0, close(b));
}

static void pselect_readiness(void) {
  int a, b;
  tcp_pair(&a, &b);
  fd_set r, w;
  FD_ZERO(&r);
  FD_ZERO(&w);
  FD_SET(b, &r);
  FD_SET(b, &w);
  struct timespec ts = {0, 0};
  RC(1, pselect(b + 1, &r, &w, NULL, &ts, NULL));
  CHECK(!FD_ISSET(b, &r) && FD_ISSET(b, &w));
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGUSR2);
  FD_ZERO(&r);
  FD_SET(b, &r);
  ts = (struct timespec){0, 30 * 1000000L};
  long t0 = now_ms();
  RC(0, pselect(b + 1, &r, NULL, NULL, &ts, &mask));
  CHECK(now_ms() - t0 >= 25);
  CHECK(ts.tv_sec == 0 && ts.tv_nsec == 30 * 1000000L); // pselect leaves it alone
  RC(2, send(a, "hi", 2, 0));
  FD_SET(b, &r);
  ts = (struct timespec){2, 0};
  RC(1, pselect(b + 1, &r, NULL, NULL, &ts, &mask));
  CHECK(FD_ISSET(b, &r));
  FD_ZERO(&r);
  FD_ZERO(&w);
  FD_SET(b, &r);
  FD_SET(b, &w);
  RC(2, pselect(b + 1, &r, &w, NULL, NULL, NULL));
  CHECK(FD_ISSET(b, &r) && FD_ISSET(b, &w));
  RC(0, close(a));
  RC(0, close(b));
}

static void listen_readiness(void) {
  struct sockaddr_in addr;
  int l = tcp_listener(&addr);
  poll1(l, POLLIN | POLLOUT, 0, 0, 0);
  int c = OK(socket(AF_INET, SOCK_STREAM, 0));
  RC(0, connect(c, (struct sockaddr*)&addr, sizeof addr));
  poll1(l, POLLIN | POLLOUT, 2000, 1, POLLIN);
  fd_set r;
  FD_ZERO(&r);
  FD_SET(l, &r);
  RC(1, select(l + 1, &r, NULL, NULL, &(struct timeval){0, 0}));
  int ep = OK(epoll_create1(0));
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 1};
  RC(0, epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev));
  RC(1, epoll_wait(ep, &ev, 1, 0));
  int s = OK(accept(l, NULL, NULL));
  poll1(l, POLLIN, 0, 0, 0);
  RC(0, epoll_wait(ep, &ev, 1, 0));
  RC(0, close(ep));
  RC(0, close(s));
  RC(0, close(c));
  RC(0, close(l));
}

static void oob_urgent(void) {
  int a, b;
  tcp_pair(&a, &b);
  RC(3, send(a, "abc", 3, 0));
  RC(1, send(a, "!", 1, MSG_OOB));
  poll1(b, POLLPRI, 2000, 1, POLLPRI);
  fd_set e;
  FD_ZERO(&e);
  FD_SET(b, &e);
  RC(1, select(b + 1, NULL, NULL, &e, &(struct timeval){0, 0}));
  CHECK(FD_ISSET(b, &e));
  char c = 0;
  RC(1, recv(b, &c, 1, MSG_OOB));
  CHECK(c == '!');
  char buf[8];
  RC(3, recv(b, buf, sizeof buf, 0));
  RC(0, close(a));
  RC(0, close(b));
}

static void poll_high_fd(void) {
  struct rlimit rl;
  REQUIRE(getrlimit(RLIMIT_NOFILE, &rl) == 0);
  rl.rlim_cur = rl.rlim_max < 20000 ? rl.rlim_max : 20000;
  REQUIRE(setrlimit(RLIMIT_NOFILE, &rl) == 0);
  if (rl.rlim_cur < 16384) {
    // Only root may raise the hard limit; the case needs fd 16000.
    sem_skip("RLIMIT_NOFILE hard limit %ld < 16384: poll on fd 16000 untested", (long)rl.rlim_max);
    return;
  }
  int a, b;
  tcp_pair(&a, &b);
  RC(16000, dup2(b, 16000));
  RC(0, close(b));
  struct pollfd p[2] = {{.fd = a, .events = POLLOUT}, {.fd = 16000, .events = POLLIN}};
  RC(1, poll(p, 2, 0));
  RC(4, send(a, "high", 4, 0));
  RC(2, poll(p, 2, 2000));
  MASK("p[1] revents", p[1].revents, POLLIN);
  int ep = OK(epoll_create1(0));
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 16000};
  RC(0, epoll_ctl(ep, EPOLL_CTL_ADD, 16000, &ev));
  RC(1, epoll_wait(ep, &ev, 1, 0));
  EQ("epoll data", ev.data.u64, 16000);
  char buf[8];
  RC(4, recv(16000, buf, sizeof buf, 0));
  poll1(16000, POLLIN, 0, 0, 0);
  RC(0, close(16000));
  poll1(16000, POLLIN, 0, 1, POLLNVAL);
  // more pollfds than RLIMIT_NOFILE allows
  size_t n = rl.rlim_cur + 10;
  struct pollfd* many = calloc(n, sizeof *many);
  REQUIRE(many);
  for (size_t i = 0; i < n; i++)
    many[i].fd = -1;
  ERR(EINVAL, poll(many, n, 0));
  free(many);
  RC(0, close(ep));
  RC(0, close(a));
}

// Two threads share one socket: each poll()s it with a long timeout, then
// takes what is there without blocking.  One of them often finds the bytes
// it was woken for already taken by the other; like the kernel's, its poll
// never returns 0 before its timeout for that (a program with a socket
// timeout, such as Python's, reads a 0 as "timed out").
struct poll_taker {
  int fd;
  int early;
};

static void* poll_take_loop(void* arg) {
  struct poll_taker* t = arg;
  char b[64];
  for (;;) {
    struct pollfd p = {.fd = t->fd, .events = POLLIN};
    long t0 = now_ms();
    int r = poll(&p, 1, 4000);
    if (r == 0 && now_ms() - t0 < 3500) t->early++;
    if (r <= 0) break;
    if (recv(t->fd, b, sizeof b, MSG_DONTWAIT) == 0) break;
  }
  return NULL;
}

static void poll_shared_socket(void) {
  int a, b;
  tcp_pair(&a, &b);
  struct poll_taker t[2] = {{b, 0}, {b, 0}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++)
    REQUIRE(pthread_create(&th[i], NULL, poll_take_loop, &t[i]) == 0);
  for (int i = 0; i < 4000; i++) {
    send_all(a, "x", 1);
    if (i % 4 == 0) usleep(20);
  }
  RC(0, shutdown(a, SHUT_WR)); // end of stream: both takers see it
  for (int i = 0; i < 2; i++)
    pthread_join(th[i], NULL);
  say("polls that returned 0 early: %d", t[0].early + t[1].early);
  CHECK(t[0].early + t[1].early == 0);
  RC(0, close(a));
  RC(0, close(b));
}

// Bytes that arrive over TCP wake a poll() or epoll_wait() sleeper at once.
// In the user-mode run the layer that relays the kernel's events does so
// 150 ms late (XPRESS_TEST_RELAY_DELAY_MS), as xpress's engine does while it
// creates a channel: a sleeper must watch the socket itself while the
// connection still reads TCP (an upgrade before its switch).  Elsewhere
// the time is not judged (the line reads the same).
static void* send_later(void* arg) {
  msleep(100);
  int fd = *(int*)arg;
  return (void*)(long)(send(fd, "x", 1, 0) == 1);
}

static void poll_wakes_on_tcp_bytes(void) {
  const int judged = getenv("XPRESS_TEST_RELAY_DELAY_MS") != NULL;
  int a, b;
  tcp_pair(&a, &b);
  int ep = OK(epoll_create1(0));
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 7};
  RC(0, epoll_ctl(ep, EPOLL_CTL_ADD, b, &ev));
  for (int round = 0; round < 2; round++) {
    msleep(300); // the relay idle again: nothing of the set-up left to deliver
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, send_later, &a) == 0);
    long t0 = now_ms();
    if (round == 0) {
      struct pollfd p = {.fd = b, .events = POLLIN};
      RC(1, poll(&p, 1, 3000));
    } else {
      struct epoll_event out;
      RC(1, epoll_wait(ep, &out, 1, 3000));
    }
    long waited = now_ms() - t0;
    EQ(round == 0 ? "poll woken within 90 ms of the bytes"
                  : "epoll woken within 90 ms of the bytes",
       !judged || waited < 190, 1);
    void* sent = NULL;
    REQUIRE(pthread_join(t, &sent) == 0 && sent == (void*)1L);
    char c;
    RC(1, recv(b, &c, 1, 0));
  }
  RC(0, close(ep));
  RC(0, close(a));
  RC(0, close(b));
}

const struct sem_case sem_poll_cases[] = {
    {"poll_wakes_on_tcp_bytes", poll_wakes_on_tcp_bytes},
    {"poll_readiness", poll_readiness},
    {"poll_reset", poll_reset},
    {"poll_many_and_nval", poll_many_and_nval},
    {"ppoll_readiness", ppoll_readiness},
    {"select_readiness", select_readiness},
    {"pselect_readiness", pselect_readiness},
    {"listen_readiness", listen_readiness},
    {"oob_urgent", oob_urgent},
    {"poll_high_fd", poll_high_fd},
    {"poll_shared_socket", poll_shared_socket},
    {NULL, NULL},
};
