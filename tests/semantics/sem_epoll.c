// epoll: level- and edge-triggered, EPOLLONESHOT (+ re-arm), EPOLLRDHUP, an epoll
// fd shared by two threads, EPOLLEXCLUSIVE, nested epoll, ctl errors, and
// registrations that belong to the open file description.
#include "sem.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

static int ep_mod(int ep, int fd, unsigned events, uint64_t data) {
  struct epoll_event ev = {.events = events, .data.u64 = data};
  return epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
}

// epoll_wait for one event; prints count, mask and token.
static int ep_wait1(int ep, int ms, int want, unsigned want_events, uint64_t want_data) {
  struct epoll_event ev;
  memset(&ev, 0, sizeof ev);
  int r = RC(want, epoll_wait(ep, &ev, 1, ms));
  if (r == 1 && want == 1) {
    MASK("  events", ev.events, want_events);
    EQ("  data", ev.data.u64, want_data);
  }
  return r;
}

static void drain(int fd) {
  char buf[4096];
  while (recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0) {
  }
}

static void epoll_level_triggered(void) {
  int a, b;
  tcp_pair(&a, &b);
  int ep = OK(epoll_create1(0));
  RC(0, ep_add(ep, b, EPOLLIN, 11));
  ep_wait1(ep, 0, 0, 0, 0);
  RC(10, send(a, "0123456789", 10, 0));
  ep_wait1(ep, 2000, 1, EPOLLIN, 11);
  ep_wait1(ep, 0, 1, EPOLLIN, 11); // still readable: reported again
  char buf[16];
  RC(5, recv(b, buf, 5, 0));
  ep_wait1(ep, 0, 1, EPOLLIN, 11);
  RC(5, recv(b, buf, 5, 0));
  ep_wait1(ep, 0, 0, 0, 0);
  // EPOLLIN|EPOLLOUT on the writer
  RC(0, ep_add(ep, a, EPOLLIN | EPOLLOUT, 22));
  ep_wait1(ep, 0, 1, EPOLLOUT, 22);
  RC(0, close(ep));
  RC(0, close(a));
  RC(0, close(b));
}

static void epoll_edge_triggered(void) {
  int a, b;
  tcp_pair(&a, &b);
  REQUIRE(fcntl(b, F_SETFL, O_NONBLOCK) == 0);
  int ep = OK(epoll_create1(0));
  RC(0, ep_add(ep, b, EPOLLIN | EPOLLET, 1));
  ep_wait1(ep, 0, 0, 0, 0);
  RC(10, send(a, "0123456789", 10, 0));
  ep_wait1(ep, 2000, 1, EPOLLIN, 1);
  ep_wait1(ep, 0, 0, 0, 0); // no new edge although data is still queued
  RC(10, send(a, "abcdefghij", 10, 0));
  ep_wait1(ep, 2000, 1, EPOLLIN, 1); // new data: new edge
  ep_wait1(ep, 0, 0, 0, 0);
  wait_avail(b, 20);
  char buf[64];
  RC(20, recv(b, buf, sizeof buf, 0));
  ERR(EAGAIN, recv(b, buf, sizeof buf, 0));
  ep_wait1(ep, 0, 0, 0, 0);
  RC(3, send(a, "xyz", 3, 0));
  ep_wait1(ep, 2000, 1, EPOLLIN, 1);
  ep_wait1(ep, 0, 0, 0, 0);
  // EPOLLOUT edge: writable once at registration, then quiet
  RC(0, ep_add(ep, a, EPOLLOUT | EPOLLET, 2));
  ep_wait1(ep, 0, 1, EPOLLOUT, 2);
  ep_wait1(ep, 0, 0, 0, 0);
  RC(0, close(ep));
  RC(0, close(a));
  RC(0, close(b));
}

static void epoll_oneshot_rearm(void) {
  int a, b;
  tcp_pair(&a, &b);
  int ep = OK(epoll_create1(0));
  RC(0, ep_add(ep, b, EPOLLIN | EPOLLONESHOT, 3));
  RC(4, send(a, "abcd", 4, 0));
  ep_wait1(ep, 2000, 1, EPOLLIN, 3);
  ep_wait1(ep, 0, 0, 0, 0); // disarmed
  RC(4, send(a, "efgh", 4, 0));
  ep_wait1(ep, 100, 0, 0, 0); // still disarmed despite new data
  RC(0, ep_mod(ep, b, EPOLLIN | EPOLLONESHOT, 4));
  ep_wait1(ep, 0, 1, EPOLLIN, 4); // re-armed: pending data reported with the new token
  ep_wait1(ep, 0, 0, 0, 0);
  ERR(EEXIST, ep_add(ep, b, EPOLLIN, 5)); // a disarmed fd is still registered
  RC(0, epoll_ctl(ep, EPOLL_CTL_DEL, b, NULL));
  ERR(ENOENT, epoll_ctl(ep, EPOLL_CTL_DEL, b, NULL));
  RC(0, close(ep));
  RC(0, close(a));
  RC(0, close(b));
}

static void epoll_rdhup(void) {
  int a, b;
  tcp_pair(&a, &b);
  int ep = OK(epoll_create1(0));
  RC(0, ep_add(ep, b, EPOLLIN | EPOLLRDHUP, 9));
  ep_wait1(ep, 0, 0, 0, 0);
  RC(0, shutdown(a, SHUT_WR));
  ep_wait1(ep, 2000, 1, EPOLLIN | EPOLLRDHUP, 9);
  char buf[8];
  RC(0, recv(b, buf, sizeof buf, 0));
  ep_wait1(ep, 0, 1, EPOLLIN | EPOLLRDHUP, 9); // level-triggered: EOF stays readable
  RC(2, send(b, "ok", 2, 0));                  // the other direction still works
  wait_avail(a, 2);
  RC(2, recv(a, buf, sizeof buf, 0));
  CHECK(memcmp(buf, "ok", 2) == 0);
  // after both directions are shut: EPOLLHUP too
  RC(0, ep_add(ep, a, EPOLLIN | EPOLLRDHUP, 10));
  RC(0, epoll_ctl(ep, EPOLL_CTL_DEL, b, NULL));
  RC(0, shutdown(b, SHUT_WR));
  ep_wait1(ep, 2000, 1, EPOLLIN | EPOLLRDHUP | EPOLLHUP, 10);
  RC(0, close(ep));
  RC(0, close(a));
  RC(0, close(b));
}

// ---- two threads

enum { TOKEN_SOCK = 100, TOKEN_STOP = 200 };

struct waiter {
  pthread_t thread;
  int ep;
  int drain_fd;
  volatile pid_t tid;
  int result;
  uint64_t data;
};

static volatile int waiters_done;

static void* waiter_main(void* arg) {
  struct waiter* w = arg;
  w->tid = gettid();
  struct epoll_event ev;
  w->result = epoll_wait(w->ep, &ev, 1, 5000);
  if (w->result == 1) {
    w->data = ev.data.u64;
    if (w->data == TOKEN_SOCK) drain(w->drain_fd);
  }
  __atomic_add_fetch(&waiters_done, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

// Until thread tid sleeps (3 s at most).
static void wait_sleeping(volatile pid_t* tid) {
  long end = now_ms() + 3000;
  while (!(*tid && thread_sleeping(*tid))) {
    REQUIRE(now_ms() < end);
    msleep(1);
  }
}

// Starts two waiters, waits until both block, sends one byte a->b, waits for the
// first waiter to finish (and a little longer, for a wrong second delivery),
// then wakes the others through the stop pipe.  Prints per-token counts.
static void run_waiters(struct waiter* w, int a, int stop_w) {
  waiters_done = 0;
  for (int i = 0; i < 2; i++)
    REQUIRE(pthread_create(&w[i].thread, NULL, waiter_main, &w[i]) == 0);
  long end = now_ms() + 3000;
  while (!(w[0].tid && w[1].tid && thread_sleeping(w[0].tid) && thread_sleeping(w[1].tid))) {
    REQUIRE(now_ms() < end);
    msleep(1);
  }
  msleep(50);
  RC(1, send(a, "!", 1, 0));
  end = now_ms() + 3000;
  while (__atomic_load_n(&waiters_done, __ATOMIC_SEQ_CST) < 1 && now_ms() < end)
    msleep(1);
  msleep(100);
  EQ("waiters woken by the socket event", waiters_done, 1);
  RC(1, write(stop_w, "s", 1));
  for (int i = 0; i < 2; i++)
    REQUIRE(pthread_join(w[i].thread, NULL) == 0);
  int sock = 0, stop = 0, other = 0;
  for (int i = 0; i < 2; i++) {
    if (w[i].result == 1 && w[i].data == TOKEN_SOCK)
      sock++;
    else if (w[i].result == 1 && w[i].data == TOKEN_STOP)
      stop++;
    else
      other++;
  }
  EQ("waiters that got the socket event", sock, 1);
  EQ("waiters that got the stop event", stop, 1);
  EQ("waiters with another result", other, 0);
}

static void epoll_shared_oneshot_threads(void) {
  int a, b, stop[2];
  tcp_pair(&a, &b);
  REQUIRE(pipe(stop) == 0);
  int ep = OK(epoll_create1(0));
  RC(0, ep_add(ep, b, EPOLLIN | EPOLLONESHOT, TOKEN_SOCK));
  RC(0, ep_add(ep, stop[0], EPOLLIN, TOKEN_STOP));
  struct waiter w[2] = {{.ep = ep, .drain_fd = b}, {.ep = ep, .drain_fd = b}};
  run_waiters(w, a, stop[1]);
  RC(0, close(ep));
  RC(0, close(stop[0]));
  RC(0, close(stop[1]));
  RC(0, close(a));
  RC(0, close(b));
}

static void epoll_exclusive_threads(void) {
  int a, b, stop[2];
  tcp_pair(&a, &b);
  REQUIRE(pipe(stop) == 0);
  struct waiter w[2];
  memset(w, 0, sizeof w);
  for (int i = 0; i < 2; i++) {
    w[i].ep = OK(epoll_create1(0));
    w[i].drain_fd = b;
    RC(0, ep_add(w[i].ep, b, EPOLLIN | EPOLLEXCLUSIVE, TOKEN_SOCK));
    RC(0, ep_add(w[i].ep, stop[0], EPOLLIN, TOKEN_STOP));
  }
  run_waiters(w, a, stop[1]);
  // EPOLLEXCLUSIVE registrations cannot be modified
  ERR(EINVAL, ep_mod(w[0].ep, b, EPOLLIN, TOKEN_SOCK));
  for (int i = 0; i < 2; i++)
    RC(0, close(w[i].ep));
  RC(0, close(stop[0]));
  RC(0, close(stop[1]));
  RC(0, close(a));
  RC(0, close(b));
}

// A waiter already asleep on a set is told of a member added after it fell
// asleep (xpress keys such a sleeper by the members it saw: the new one
// must wake it to look again).
static void epoll_member_added_while_waiting(void) {
  int a1, b1, a2, b2;
  tcp_pair(&a1, &b1);
  tcp_pair(&a2, &b2); // before the waiter sleeps: only the ADD tells it
  int ep = OK(epoll_create1(0));
  RC(0, ep_add(ep, b1, EPOLLIN, 1));
  struct waiter w = {.ep = ep, .drain_fd = b1};
  waiters_done = 0;
  REQUIRE(pthread_create(&w.thread, NULL, waiter_main, &w) == 0);
  wait_sleeping(&w.tid);
  msleep(50);
  RC(0, ep_add(ep, b2, EPOLLIN, 2));
  msleep(100); // asleep again, if the ADD woke it
  long t0 = now_ms();
  RC(1, send(a2, "!", 1, 0));
  REQUIRE(pthread_join(w.thread, NULL) == 0);
  EQ("waiter result", w.result, 1);
  EQ("waiter data", w.data, 2);
  EQ("woken within 2 s", now_ms() - t0 < 2000, 1);
  RC(0, close(ep));
  RC(0, close(a1));
  RC(0, close(b1));
  RC(0, close(a2));
  RC(0, close(b2));
}

static void epoll_nested(void) {
  int a, b;
  tcp_pair(&a, &b);
  int inner = OK(epoll_create1(0));
  int outer = OK(epoll_create1(0));
  RC(0, ep_add(inner, b, EPOLLIN, 1));
  RC(0, ep_add(outer, inner, EPOLLIN, 2));
  ep_wait1(outer, 0, 0, 0, 0);
  struct pollfd p = {.fd = inner, .events = POLLIN};
  RC(0, poll(&p, 1, 0));
  RC(6, send(a, "nested", 6, 0));
  ep_wait1(outer, 2000, 1, EPOLLIN, 2);
  RC(1, poll(&p, 1, 0));
  MASK("poll(inner) revents", p.revents, POLLIN);
  ep_wait1(inner, 0, 1, EPOLLIN, 1);
  char buf[8];
  RC(6, recv(b, buf, sizeof buf, 0));
  ep_wait1(inner, 0, 0, 0, 0);
  ep_wait1(outer, 0, 0, 0, 0);
  // a loop of epoll fds is refused
  ERR(ELOOP, ep_add(inner, outer, EPOLLIN, 3));
  RC(0, close(outer));
  RC(0, close(inner));
  RC(0, close(a));
  RC(0, close(b));
}

static void epoll_ctl_errors(void) {
  int a, b;
  tcp_pair(&a, &b);
  int ep = OK(epoll_create1(0));
  ERR(ENOENT, ep_mod(ep, b, EPOLLIN, 1));
  ERR(ENOENT, epoll_ctl(ep, EPOLL_CTL_DEL, b, NULL));
  RC(0, ep_add(ep, b, EPOLLIN, 1));
  ERR(EEXIST, ep_add(ep, b, EPOLLOUT, 1));
  RC(0, ep_mod(ep, b, EPOLLOUT, 2));
  ep_wait1(ep, 0, 1, EPOLLOUT, 2);
  ERR(EINVAL, ep_add(ep, ep, EPOLLIN, 3));
  ERR(EINVAL, ep_add(ep, a, EPOLLIN | EPOLLEXCLUSIVE | EPOLLONESHOT, 3));
  ERR(EINVAL, epoll_ctl(ep, 99, a, &(struct epoll_event){.events = EPOLLIN}));
  ERR(EINVAL, epoll_ctl(b, EPOLL_CTL_ADD, a, &(struct epoll_event){.events = EPOLLIN}));
  ERR(EBADF, epoll_ctl(ep, EPOLL_CTL_ADD, -1, &(struct epoll_event){.events = EPOLLIN}));
  ERR(EBADF, epoll_ctl(-1, EPOLL_CTL_ADD, a, &(struct epoll_event){.events = EPOLLIN}));
  char path[] = "/tmp/xpress-sem-XXXXXX";
  int f = OK(mkstemp(path));
  unlink(path);
  ERR(EPERM, ep_add(ep, f, EPOLLIN, 4)); // regular files are not pollable by epoll
  struct epoll_event ev[2];
  ERR(EINVAL, epoll_wait(ep, ev, 0, 0));
  ERR(EINVAL, epoll_wait(b, ev, 2, 0));
  ERR(EBADF, epoll_wait(-1, ev, 2, 0));
  ERR(EINVAL, epoll_create(0));
  ERR(EINVAL, epoll_create1(0x1234));
  int old = OK(epoll_create(1));
  int ce = OK(epoll_create1(EPOLL_CLOEXEC));
  EQ("F_GETFD(epoll_create1(EPOLL_CLOEXEC))", fcntl(ce, F_GETFD), FD_CLOEXEC);
  EQ("F_GETFD(epoll_create(1))", fcntl(old, F_GETFD), 0);
  RC(0, close(ce));
  RC(0, close(old));
  RC(0, close(f));
  RC(0, close(ep));
  RC(0, close(a));
  RC(0, close(b));
}

static void epoll_registration_follows_file(void) {
  int a, b;
  tcp_pair(&a, &b);
  int ep = OK(epoll_create1(0));
  int b2 = OK(dup(b));
  RC(0, ep_add(ep, b, EPOLLIN, 5));
  RC(0, close(b)); // the open file description lives on in b2
  RC(3, send(a, "abc", 3, 0));
  ep_wait1(ep, 2000, 1, EPOLLIN, 5);
  ERR(EBADF, epoll_ctl(ep, EPOLL_CTL_DEL, b, NULL));
  ERR(ENOENT, epoll_ctl(ep, EPOLL_CTL_DEL, b2, NULL)); // registered under the old number
  RC(0, ep_add(ep, b2, EPOLLIN, 6));
  struct epoll_event ev[4];
  RC(2, epoll_wait(ep, ev, 4, 0));
  char buf[8];
  RC(3, recv(b2, buf, sizeof buf, 0));
  RC(0, epoll_wait(ep, ev, 4, 0));
  RC(0, close(b2)); // last reference: both registrations disappear
  RC(3, send(a, "def", 3, 0));
  RC(0, epoll_wait(ep, ev, 4, 100));
  // the number of a closed, registered fd can be registered afresh
  int c, d;
  tcp_pair(&c, &d);
  REQUIRE(dup2(d, 900) == 900);
  RC(0, ep_add(ep, 900, EPOLLIN, 7));
  RC(1, send(c, "g", 1, 0));
  ep_wait1(ep, 2000, 1, EPOLLIN, 7);
  RC(0, close(900));
  RC(0, close(ep));
  RC(0, close(a));
  RC(0, close(c));
  RC(0, close(d));
}

static void epoll_pwait_variants(void) {
  int a, b;
  tcp_pair(&a, &b);
  int ep = OK(epoll_create1(0));
  RC(0, ep_add(ep, b, EPOLLIN, 8));
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGUSR1);
  struct epoll_event ev;
  RC(0, epoll_pwait(ep, &ev, 1, 0, &mask));
  long t0 = now_ms();
  struct timespec ts = {0, 30 * 1000000L};
  RC(0, epoll_pwait2(ep, &ev, 1, &ts, NULL));
  CHECK(now_ms() - t0 >= 25);
  t0 = now_ms();
  RC(0, epoll_wait(ep, &ev, 1, 30));
  CHECK(now_ms() - t0 >= 25);
  RC(1, send(a, "x", 1, 0));
  RC(1, epoll_pwait(ep, &ev, 1, 2000, &mask));
  EQ("epoll_pwait data", ev.data.u64, 8);
  ts.tv_nsec = 0;
  RC(1, epoll_pwait2(ep, &ev, 1, &ts, &mask));
  MASK("epoll_pwait2 events", ev.events, EPOLLIN);
  RC(1, epoll_pwait2(ep, &ev, 1, NULL, NULL)); // NULL timeout: block (data is ready)
  RC(0, close(ep));
  RC(0, close(a));
  RC(0, close(b));
}

// What libuv (Node.js) does with a keep-alive HTTP connection whose response
// is larger than the socket takes at once: a level-triggered epoll, the
// request read, the response written with non-blocking writev (header and
// body; partial writes), EPOLL_CTL_MOD to EPOLLIN|EPOLLOUT while the rest
// waits, a zero-length write(), EPOLL_CTL_MOD back to EPOLLIN; then the
// next request on the same connection must be reported readable.
enum { kUvBody = 4 << 20, kUvRounds = 3 };
static void epoll_libuv_keepalive_bulk(void) {
  int c, s;
  tcp_pair(&c, &s);
  REQUIRE(fcntl(s, F_SETFL, O_NONBLOCK) == 0);
  char* body = malloc(kUvBody);
  REQUIRE(body != NULL);
  fill_pattern(body, kUvBody, 30);
  char hdr[] = "HTTP/1.1 200 OK\r\nContent-Length: 4194304\r\n\r\n";
  size_t hlen = sizeof hdr - 1, total = hlen + kUvBody;
  int ep = OK(epoll_create1(EPOLL_CLOEXEC));
  RC(0, ep_add(ep, s, EPOLLIN, 5));
  for (int round = 0; round < kUvRounds; ++round) {
    say("round %d", round);
    RC(16, send(c, "GET / HTTP/1.1\r\n", 16, 0));
    ep_wait1(ep, 5000, 1, EPOLLIN, 5);
    char req[256];
    RC(16, read(s, req, sizeof req));
    struct sink sk;
    sink_start(&sk, c, total);
    size_t sent = 0;
    int stalls = 0, bad = 0;
    while (sent < total && !bad) {
      struct iovec v[3];
      int n = 0;
      if (sent < hlen) v[n++] = (struct iovec){hdr + sent, hlen - sent};
      size_t off = sent < hlen ? 0 : sent - hlen;
      v[n++] = (struct iovec){body + off, kUvBody - off};
      v[n++] = (struct iovec){body, 0};
      ssize_t w = writev(s, v, n);
      if (w > 0) sent += (size_t)w;
      if (w < 0 && errno != EAGAIN) bad = 1;
      if (sent == total || bad) break;
      // The rest waits for writability; the read side stays registered.
      struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.u64 = 5};
      if (stalls++ == 0) bad |= epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev) != 0;
      if (epoll_wait(ep, &ev, 1, 5000) != 1 || !(ev.events & EPOLLOUT)) bad = 1;
    }
    CHECK(!bad);
    EQ("response bytes written", sent, total);
    RC(0, write(s, "", 0));
    RC(0, ep_mod(ep, s, EPOLLIN, 5));
    sink_join(&sk);
    EQ("response bytes read", sk.got, total);
    CHECK(sk.got == total && memcmp(sk.buf, hdr, hlen) == 0 &&
          memcmp(sk.buf + hlen, body, kUvBody) == 0);
    free(sk.buf);
  }
  // Zero-length sends: blocking, and after shutdown(SHUT_WR) (EPIPE).
  RC(0, send(c, "", 0, 0));
  RC(0, shutdown(s, SHUT_WR));
  ERR(EPIPE, send(s, "", 0, MSG_NOSIGNAL));
  RC(0, close(ep));
  RC(0, close(c));
  RC(0, close(s));
  free(body);
}

// ---- sleepers that wait on their connections' channels (an RDMA run:
// stream/channel_sleep.h; the kernel's behaviour is the reference)

// Bytes both ways, so that an accelerated pair has switched to RDMA by the
// time the case sleeps on it (a pair that only connected still talks TCP).
static void warm(int a, int b) {
  char buf[4096];
  memset(buf, 'w', sizeof buf);
  for (int i = 0; i < 4; i++) {
    send_all(a, buf, sizeof buf);
    REQUIRE(recv_all(b, buf, sizeof buf) == sizeof buf);
    send_all(b, buf, sizeof buf);
    REQUIRE(recv_all(a, buf, sizeof buf) == sizeof buf);
  }
}

// FIONREAD on a connection whose bytes came over RDMA: 0, the count in
// the argument (the kernel's return, not the count).
static void fionread_switched(void) {
  int a, b;
  tcp_pair(&a, &b);
  warm(a, b);
  char data[1234];
  fill_pattern(data, sizeof data, 9);
  send_all(a, data, sizeof data);
  wait_avail(b, sizeof data);
  int n = -1;
  RC(0, ioctl(b, FIONREAD, &n));
  EQ("FIONREAD", n, 1234);
  RC(0, close(a));
  RC(0, close(b));
}

struct poller {
  pthread_t thread;
  int fd;
  volatile pid_t tid;
  volatile int result;
  volatile short revents;
  volatile int done;
};

static void* poller_main(void* arg) {
  struct poller* p = arg;
  p->tid = gettid();
  struct pollfd pfd = {.fd = p->fd, .events = POLLIN};
  p->result = poll(&pfd, 1, 5000);
  p->revents = pfd.revents;
  char c;
  if (p->result == 1) REQUIRE(recv(p->fd, &c, 1, 0) == 1);
  __atomic_store_n(&p->done, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

// One thread asleep in poll on one connection, another in epoll_wait on a
// second one to the same server (one channel when accelerated): a byte for
// either wakes that sleeper, and only it.  Whichever sleeper takes the
// channel's completion event must pass the other's news on.
static void wait_poll_and_epoll_one_channel(void) {
  int a1, b1, a2, b2;
  tcp_pair(&a1, &b1);
  tcp_pair(&a2, &b2);
  warm(a1, b1);
  warm(a2, b2);
  int ep = OK(epoll_create1(0));
  RC(0, ep_add(ep, b2, EPOLLIN, TOKEN_SOCK));
  int wrong = 0, late = 0;
  for (int round = 0; round < 10; round++) {
    struct poller p = {.fd = b1};
    struct waiter w = {.ep = ep, .drain_fd = b2};
    waiters_done = 0;
    REQUIRE(pthread_create(&p.thread, NULL, poller_main, &p) == 0);
    REQUIRE(pthread_create(&w.thread, NULL, waiter_main, &w) == 0);
    wait_sleeping(&p.tid);
    wait_sleeping(&w.tid);
    msleep(20);
    // Odd rounds wake the epoll sleeper first, even ones the poller.
    int first = round & 1 ? a2 : a1;
    int second = round & 1 ? a1 : a2;
    REQUIRE(send(first, "!", 1, 0) == 1);
    long t0 = now_ms();
    while (!(round & 1 ? __atomic_load_n(&waiters_done, __ATOMIC_SEQ_CST)
                       : __atomic_load_n(&p.done, __ATOMIC_SEQ_CST)) &&
           now_ms() - t0 < 3000)
      msleep(1);
    if (now_ms() - t0 >= 2000) late++;
    msleep(30);
    if (round & 1 ? __atomic_load_n(&p.done, __ATOMIC_SEQ_CST)
                  : __atomic_load_n(&waiters_done, __ATOMIC_SEQ_CST))
      wrong++; // the other sleeper came back without its byte
    REQUIRE(send(second, "!", 1, 0) == 1);
    REQUIRE(pthread_join(p.thread, NULL) == 0);
    REQUIRE(pthread_join(w.thread, NULL) == 0);
    if (p.result != 1 || !(p.revents & POLLIN) || w.result != 1 || w.data != TOKEN_SOCK) wrong++;
  }
  EQ("rounds with a wrong wake-up or result", wrong, 0);
  EQ("rounds where the sleeper woke after 2 s", late, 0);
  RC(0, close(ep));
  RC(0, close(a1));
  RC(0, close(b1));
  RC(0, close(a2));
  RC(0, close(b2));
}

// A member taken out of the set (EPOLL_CTL_DEL) or closed while a thread
// sleeps on the set: its bytes wake nobody; the remaining member's do.
static void wait_member_removed_or_closed(void) {
  for (int closing = 0; closing < 2; closing++) {
    int a1, b1, a2, b2;
    tcp_pair(&a1, &b1);
    tcp_pair(&a2, &b2);
    warm(a1, b1);
    warm(a2, b2);
    int ep = OK(epoll_create1(0));
    RC(0, ep_add(ep, b1, EPOLLIN, 1));
    RC(0, ep_add(ep, b2, EPOLLIN, TOKEN_SOCK));
    struct waiter w = {.ep = ep, .drain_fd = b2};
    waiters_done = 0;
    REQUIRE(pthread_create(&w.thread, NULL, waiter_main, &w) == 0);
    wait_sleeping(&w.tid);
    msleep(20);
    if (closing)
      RC(0, close(b1));
    else
      RC(0, epoll_ctl(ep, EPOLL_CTL_DEL, b1, NULL));
    if (!closing) RC(1, send(a1, "!", 1, 0));
    msleep(200);
    EQ("woken by the removed member", __atomic_load_n(&waiters_done, __ATOMIC_SEQ_CST), 0);
    RC(1, send(a2, "!", 1, 0));
    REQUIRE(pthread_join(w.thread, NULL) == 0);
    EQ("waiter result", w.result, 1);
    EQ("waiter data", w.data, TOKEN_SOCK);
    RC(0, close(ep));
    RC(0, close(a1));
    if (!closing) RC(0, close(b1));
    RC(0, close(a2));
    RC(0, close(b2));
  }
}

// A signal while asleep in poll and in epoll_wait on accelerated
// connections: EINTR (readiness calls are never restarted), the handler ran.
static volatile sig_atomic_t wait_usr1s;
static void on_wait_usr1(int sig) {
  (void)sig;
  wait_usr1s++;
}
// SIGUSR1 to the waiter every 100 ms until its call returned: one that
// lands before the waiter is asleep (a loaded machine may delay the call
// that long) is as if it came before the call, and the next one finds it
// asleep.
static volatile int signal_stop;
static void* signal_later(void* arg) {
  for (int i = 0; i < 40 && !__atomic_load_n(&signal_stop, __ATOMIC_SEQ_CST); ++i) {
    msleep(100);
    if (!__atomic_load_n(&signal_stop, __ATOMIC_SEQ_CST)) pthread_kill(*(pthread_t*)arg, SIGUSR1);
  }
  return NULL;
}
static void wait_signal_while_asleep(void) {
  int a, b;
  tcp_pair(&a, &b);
  warm(a, b);
  struct sigaction sa = {.sa_handler = on_wait_usr1, .sa_flags = SA_RESTART};
  REQUIRE(sigaction(SIGUSR1, &sa, NULL) == 0);
  int ep = OK(epoll_create1(0));
  RC(0, ep_add(ep, b, EPOLLIN, 1));
  pthread_t self = pthread_self(), k;
  signal_stop = 0;
  REQUIRE(pthread_create(&k, NULL, signal_later, &self) == 0);
  struct pollfd p = {.fd = b, .events = POLLIN};
  ERR(EINTR, poll(&p, 1, 5000));
  __atomic_store_n(&signal_stop, 1, __ATOMIC_SEQ_CST);
  REQUIRE(pthread_join(k, NULL) == 0);
  signal_stop = 0;
  REQUIRE(pthread_create(&k, NULL, signal_later, &self) == 0);
  struct epoll_event ev;
  ERR(EINTR, epoll_wait(ep, &ev, 1, 5000));
  __atomic_store_n(&signal_stop, 1, __ATOMIC_SEQ_CST);
  REQUIRE(pthread_join(k, NULL) == 0);
  EQ("handler ran for each wait", wait_usr1s >= 2, 1);
  // Still woken by bytes afterwards.
  RC(1, send(a, "!", 1, 0));
  ep_wait1(ep, 5000, 1, EPOLLIN, 1);
  RC(0, close(ep));
  RC(0, close(a));
  RC(0, close(b));
}

// A thread that waits for room to send (poll POLLOUT, epoll EPOLLOUT|EPOLLET,
// a blocking send) beside one asleep reading another connection of the
// same channel: room comes back with the peer's credits and
// acknowledgements, which wake nobody a reader waits for (docs/protocol.md
// §4, "Solicited records"); the room waiter must be woken all the same.
struct room_waiter {
  pthread_t thread;
  int fd, ep, mode;
  volatile pid_t tid;
  volatile long result;
};
static char room_block[65536];
static void* room_main(void* arg) {
  struct room_waiter* r = arg;
  r->tid = gettid();
  if (r->mode == 0) {
    struct pollfd pfd = {.fd = r->fd, .events = POLLOUT};
    r->result = poll(&pfd, 1, 5000) == 1 && (pfd.revents & POLLOUT);
  } else if (r->mode == 1) {
    struct epoll_event ev;
    r->result = epoll_wait(r->ep, &ev, 1, 5000) == 1 && (ev.events & EPOLLOUT);
  } else {
    r->result = send(r->fd, room_block, sizeof room_block, 0) == (long)sizeof room_block;
  }
  return NULL;
}
static void wait_room_beside_reader(void) {
  for (int mode = 0; mode < 3; mode++) {
    int a1, b1, a2, b2;
    tcp_pair(&a1, &b1);
    tcp_pair(&a2, &b2);
    warm(a1, b1);
    warm(a2, b2);
    struct poller p = {.fd = a2};
    REQUIRE(pthread_create(&p.thread, NULL, poller_main, &p) == 0);
    wait_sleeping(&p.tid);
    struct room_waiter r = {.fd = a1, .ep = -1, .mode = mode};
    if (mode == 1) {
      r.ep = OK(epoll_create1(0));
      RC(0, ep_add(r.ep, a1, EPOLLOUT | EPOLLET, 1));
      ep_wait1(r.ep, 1000, 1, EPOLLOUT, 1); // the first edge: writable
    }
    // Fill a1 until it stays unwritable (room that comes back meanwhile,
    // e.g. ring credit once the peer's side took the records in, is used).
    char buf[16384];
    memset(buf, 'r', sizeof buf);
    long sent = 0;
    for (;;) {
      long n = send(a1, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        sent += n;
        continue;
      }
      REQUIRE(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
      struct pollfd q = {.fd = a1, .events = POLLOUT};
      if (poll(&q, 1, 300) == 0) break;
    }
    REQUIRE(pthread_create(&r.thread, NULL, room_main, &r) == 0);
    msleep(100); // asleep by now (that it is, is not required)
    long want = sent + (mode == 2 ? (long)sizeof room_block : 0);
    long t0 = now_ms();
    static char sink[65536];
    for (long got = 0; got < want;) {
      long n = want - got < (long)sizeof sink ? want - got : (long)sizeof sink;
      REQUIRE(recv_all(b1, sink, (size_t)n) == (size_t)n);
      got += n;
    }
    REQUIRE(pthread_join(r.thread, NULL) == 0);
    EQ("room waiter woken with room", r.result, 1);
    EQ("room waiter woken within 2 s", now_ms() - t0 < 2000, 1);
    RC(1, send(b2, "!", 1, 0));
    REQUIRE(pthread_join(p.thread, NULL) == 0);
    EQ("reader woken by its byte", p.result, 1);
    if (r.ep >= 0) RC(0, close(r.ep));
    RC(0, close(a1));
    RC(0, close(b1));
    RC(0, close(a2));
    RC(0, close(b2));
  }
}

const struct sem_case sem_epoll_cases[] = {
    {"epoll_level_triggered", epoll_level_triggered},
    {"epoll_edge_triggered", epoll_edge_triggered},
    {"epoll_oneshot_rearm", epoll_oneshot_rearm},
    {"epoll_rdhup", epoll_rdhup},
    {"epoll_shared_oneshot_threads", epoll_shared_oneshot_threads},
    {"epoll_exclusive_threads", epoll_exclusive_threads},
    {"epoll_member_added_while_waiting", epoll_member_added_while_waiting},
    {"epoll_nested", epoll_nested},
    {"epoll_ctl_errors", epoll_ctl_errors},
    {"epoll_registration_follows_file", epoll_registration_follows_file},
    {"epoll_pwait_variants", epoll_pwait_variants},
    {"epoll_libuv_keepalive_bulk", epoll_libuv_keepalive_bulk},
    {"wait_poll_and_epoll_one_channel", wait_poll_and_epoll_one_channel},
    {"wait_member_removed_or_closed", wait_member_removed_or_closed},
    {"wait_signal_while_asleep", wait_signal_while_asleep},
    {"fionread_switched", fionread_switched},
    {"wait_room_beside_reader", wait_room_beside_reader},
    {NULL, NULL},
};
