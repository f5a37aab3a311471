// 64 B ping-pong whose client waits the way event-driven programs do:
// a blocking recv, or poll/epoll_wait/select before a non-blocking recv.
// Reports mean, p50, p90, p99 and max round trip (us).  Used by
// bench/readiness-pingpong.sh inside the Soft-RoCE VM to compare kernel TCP
// and xpress builds in one boot.
//   readiness-pingpong server ADDR PORT
//   readiness-pingpong block|poll|epoll|select ADDR PORT [ROUND_TRIPS]
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lib/latency.h"

static int serve(struct sockaddr_in* a) {
  int one = 1;
  int l = socket(AF_INET, SOCK_STREAM, 0);
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(l, (struct sockaddr*)a, sizeof *a) != 0 || listen(l, 4) != 0) {
    perror("listen");
    return 1;
  }
  for (;;) {
    int c = accept(l, NULL, NULL);
    if (c < 0) continue;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char buf[64];
    for (;;) {
      ssize_t r = recv(c, buf, sizeof buf, MSG_WAITALL);
      if (r <= 0 || send(c, buf, (size_t)r, 0) != r) break;
    }
    close(c);
  }
}

// Waits until s may be readable, the way `mode` says.
static void wait_readable(const char* mode, int s, int ep) {
  if (!strcmp(mode, "poll")) {
    struct pollfd p = {s, POLLIN, 0};
    poll(&p, 1, 1000);
  } else if (!strcmp(mode, "epoll")) {
    struct epoll_event e;
    epoll_wait(ep, &e, 1, 1000);
  } else if (!strcmp(mode, "select")) {
    fd_set f;
    FD_ZERO(&f);
    FD_SET(s, &f);
    struct timeval tv = {1, 0};
    select(s + 1, &f, NULL, NULL, &tv);
  }
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s server|block|poll|epoll|select ADDR PORT [ROUND_TRIPS]\n", argv[0]);
    return 2;
  }
  const char* mode = argv[1];
  int n = argc > 4 ? atoi(argv[4]) : 2000;
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_port = htons((unsigned short)atoi(argv[3]));
  if (inet_pton(AF_INET, argv[2], &a.sin_addr) != 1 || n <= 0) return 2;
  if (!strcmp(mode, "server")) return serve(&a);
  int one = 1, s = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(s, (struct sockaddr*)&a, sizeof a) != 0) {
    perror("connect");
    return 1;
  }
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = s};
  epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
  usleep(200000); // the upgrade, under xpress
  double* lat = malloc((size_t)n * sizeof(double));
  int blocking = !strcmp(mode, "block");
  char buf[64] = {0};
  double t0 = 0;
  for (int i = -200; i < n; i++) { // 200 unmeasured round trips first
    if (i == 0) t0 = now_us();
    double t = now_us();
    if (send(s, buf, sizeof buf, 0) != (ssize_t)sizeof buf) return 1;
    size_t got = 0;
    while (got < sizeof buf) {
      if (!blocking) wait_readable(mode, s, ep);
      ssize_t r = recv(s, buf + got, sizeof buf - got, blocking ? 0 : MSG_DONTWAIT);
      if (r > 0)
        got += (size_t)r;
      else if (r == 0)
        return 1;
    }
    if (i >= 0) lat[i] = now_us() - t;
  }
  double total = now_us() - t0;
  qsort(lat, (size_t)n, sizeof(double), cmp_double);
  printf("%-6s n=%d mean=%.0f p50=%.0f p90=%.0f p99=%.0f max=%.0f us\n", mode, n, total / n,
         lat[n / 2], lat[n * 9 / 10], lat[n * 99 / 100], lat[n - 1]);
  return 0;
}
