// Many threads, each with its own connection, doing 64 B request/response
// the way memcached and its clients do: the server's worker threads each
// wait in epoll_wait on their own epoll set (connections handed out round
// robin by the accepting thread), the client's threads wait in poll or in
// epoll_wait on an epoll set of their own (or in a blocking recv) before a
// non-blocking recv.  All streams between the two
// processes share xpress's channels, so this measures what one thread's
// traffic costs the others.  Each thread first makes WARM round trips that
// are not counted: a new connection starts on TCP and moves to RDMA within
// its first round trips (the upgrade), and a steady-state latency must not
// mix in that start (it once made the p99 and max of 400 round trips).
// Reports mean, p50, p90, p99 and max round trip (us) over all threads
// after the warm-up, the longest warm-up (ms: connect to the last warm-up
// answer, as a new connection's start costs), the client's CPU time per
// round trip (us, user + system, all its threads, warm-up included: what
// spinning and wake-ups cost) and the wall time.
//   mt-pingpong server ADDR PORT WORKERS
//   mt-pingpong poll|epoll|block ADDR PORT THREADS ROUND_TRIPS [WARM (100)]
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lib/latency.h"

enum { kMsg = 64, kMaxThreads = 64 };

// ---- server: epoll workers, a request is answered as soon as it is whole
struct worker {
  int ep;
};
struct conn_state {
  int fd;
  int have;
  char buf[kMsg];
};

static void* work(void* arg) {
  struct worker* w = arg;
  struct epoll_event evs[32];
  for (;;) {
    int n = epoll_wait(w->ep, evs, 32, -1);
    for (int i = 0; i < n; ++i) {
      struct conn_state* c = evs[i].data.ptr;
      for (;;) {
        ssize_t r = recv(c->fd, c->buf + c->have, (size_t)(kMsg - c->have), 0);
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (r <= 0) {
          epoll_ctl(w->ep, EPOLL_CTL_DEL, c->fd, NULL);
          close(c->fd);
          free(c);
          break;
        }
        c->have += (int)r;
        if (c->have == kMsg) {
          c->have = 0;
          if (send(c->fd, c->buf, kMsg, 0) != kMsg) {
            perror("server send");
            exit(1);
          }
        }
      }
    }
  }
  return NULL;
}

static int serve(struct sockaddr_in* a, int workers) {
  int one = 1;
  int l = socket(AF_INET, SOCK_STREAM, 0);
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(l, (struct sockaddr*)a, sizeof *a) != 0 || listen(l, 64) != 0) {
    perror("listen");
    return 1;
  }
  struct worker ws[kMaxThreads];
  for (int i = 0; i < workers; ++i) {
    pthread_t t;
    ws[i].ep = epoll_create1(0);
    pthread_create(&t, NULL, work, &ws[i]);
  }
  for (int next = 0;; next = (next + 1) % workers) {
    int c = accept(l, NULL, NULL);
    if (c < 0) continue;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK);
    struct conn_state* s = calloc(1, sizeof *s);
    s->fd = c;
    struct epoll_event e = {.events = EPOLLIN, .data.ptr = s};
    epoll_ctl(ws[next].ep, EPOLL_CTL_ADD, c, &e);
  }
}

// ---- client: one connection per thread
// How a client thread waits for its answer.
enum wait_mode { kBlock, kPoll, kEpoll };

struct client {
  struct sockaddr_in* a;
  enum wait_mode mode;
  int n, warm;
  double* rtt;
  double warm_us;
};

// One request out, its whole answer in; exits on an error.
// ep: the thread's epoll set (kEpoll only).
static void round_trip(int s, int ep, char* buf, enum wait_mode mode) {
  if (send(s, buf, kMsg, 0) != kMsg) {
    perror("send");
    exit(1);
  }
  int have = 0;
  while (have < kMsg) {
    if (mode == kPoll) {
      struct pollfd p = {s, POLLIN, 0};
      if (poll(&p, 1, 5000) == 0) {
        fprintf(stderr, "poll: no answer within 5 s\n");
        exit(1);
      }
    } else if (mode == kEpoll) {
      struct epoll_event e;
      if (epoll_wait(ep, &e, 1, 5000) == 0) {
        fprintf(stderr, "epoll_wait: no answer within 5 s\n");
        exit(1);
      }
    }
    ssize_t r = recv(s, buf + have, (size_t)(kMsg - have), 0);
    if (r < 0 && mode != kBlock && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (r <= 0) {
      perror("recv");
      exit(1);
    }
    have += (int)r;
  }
}

static void* run_client(void* arg) {
  struct client* c = arg;
  int one = 1;
  double t0 = now_us();
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(s, (struct sockaddr*)c->a, sizeof *c->a) != 0) {
    perror("connect");
    exit(1);
  }
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (c->mode != kBlock) fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
  int ep = -1;
  if (c->mode == kEpoll) {
    struct epoll_event e = {.events = EPOLLIN, .data.fd = s};
    ep = epoll_create1(0);
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, s, &e) != 0) {
      perror("epoll");
      exit(1);
    }
  }
  char buf[kMsg];
  memset(buf, 'x', sizeof buf);
  for (int i = 0; i < c->warm; ++i)
    round_trip(s, ep, buf, c->mode);
  c->warm_us = now_us() - t0;
  for (int i = 0; i < c->n; ++i) {
    t0 = now_us();
    round_trip(s, ep, buf, c->mode);
    c->rtt[i] = now_us() - t0;
  }
  close(s);
  if (ep >= 0) close(ep);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr,
            "usage: %s server ADDR PORT WORKERS | poll|epoll|block ADDR PORT THREADS N [WARM]\n",
            argv[0]);
    return 2;
  }
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[3]))};
  inet_pton(AF_INET, argv[2], &a.sin_addr);
  if (!strcmp(argv[1], "server")) return serve(&a, atoi(argv[4]) < 1 ? 1 : atoi(argv[4]));
  int threads = atoi(argv[4]), n = argc > 5 ? atoi(argv[5]) : 1000;
  int warm = argc > 6 ? atoi(argv[6]) : 100;
  enum wait_mode mode = !strcmp(argv[1], "poll")    ? kPoll
                        : !strcmp(argv[1], "epoll") ? kEpoll
                                                    : kBlock;
  if (threads < 1 || threads > kMaxThreads || n < 1 || warm < 0) return 2;
  double* all = calloc((size_t)threads * (size_t)n, sizeof *all);
  struct client cs[kMaxThreads];
  pthread_t ts[kMaxThreads];
  double t0 = now_us();
  for (int i = 0; i < threads; ++i) {
    cs[i] = (struct client){&a, mode, n, warm, all + (size_t)i * (size_t)n, 0};
    pthread_create(&ts[i], NULL, run_client, &cs[i]);
  }
  for (int i = 0; i < threads; ++i)
    pthread_join(ts[i], NULL);
  double wall = now_us() - t0;
  size_t m = (size_t)threads * (size_t)n;
  double sum = 0, warm_max = 0;
  for (size_t i = 0; i < m; ++i)
    sum += all[i];
  for (int i = 0; i < threads; ++i)
    if (cs[i].warm_us > warm_max) warm_max = cs[i].warm_us;
  qsort(all, m, sizeof *all, cmp_double);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double cpu = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
               (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  const double rts = (double)(m + (size_t)threads * (size_t)warm);
  printf("threads %d mean %.1f p50 %.1f p90 %.1f p99 %.1f max %.1f warm_ms %.1f cpu_us_rt %.1f "
         "csw_rt %.2f icsw_rt %.2f wall_s %.2f\n",
         threads, sum / (double)m, all[m / 2], all[m * 9 / 10], all[m * 99 / 100], all[m - 1],
         warm_max / 1e3, cpu / rts, (double)ru.ru_nvcsw / rts, (double)ru.ru_nivcsw / rts,
         wall / 1e6);
  return 0;
}
