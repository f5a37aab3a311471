// Stale-data test for zero-copy sends (tests/rdma-programs/cases/zerocopy.sh):
// the sender sends from a buffer, lets the memory change owner (munmap,
// free, madvise(MADV_DONTNEED), mmap(MAP_FIXED) over it), gets the same
// address back with new contents and sends again; the receiver checks that
// every message carries the contents of its own round, never an older one.
//
//   zc-stale recv --port P [--bind A] --size N --rounds R
//   zc-stale send --host A --port P --size N --rounds R
//
// Every message is N bytes: a 16-byte header (round, kind, magic) and a
// pattern of (round, kind).  The sender prints how often the address came
// back ("reused K of M"); the receiver prints "ok M messages" or the first
// mismatch, exit 1.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { KINDS = 4 };
static const char* const kind_name[KINDS] = {"munmap", "free", "madv_dontneed", "map_fixed"};

static uint8_t pat(uint32_t round, uint32_t kind, size_t i) {
  return (uint8_t)(i * 31 + round * 7 + kind * 101 + (i >> 12));
}

static void fill(uint8_t* p, size_t n, uint32_t round, uint32_t kind) {
  uint32_t h[4] = {round, kind, 0x5a43u, 0};
  memcpy(p, h, sizeof h);
  for (size_t i = sizeof h; i < n; ++i)
    p[i] = pat(round, kind, i);
}

static int send_all(int fd, const void* p, size_t n) {
  const uint8_t* b = p;
  while (n > 0) {
    ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
    if (w <= 0) return -1;
    b += w;
    n -= (size_t)w;
  }
  return 0;
}

static int recv_all(int fd, void* p, size_t n) {
  uint8_t* b = p;
  while (n > 0) {
    ssize_t r = recv(fd, b, n, 0);
    if (r <= 0) return -1;
    b += r;
    n -= (size_t)r;
  }
  return 0;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

// Let the connection's upgrade finish before the measured part: one-byte
// ping-pongs for `secs` seconds (the first bytes always travel on TCP).
static int warm_up(int fd, int initiator, double secs) {
  char c = 'w';
  double end = now() + secs;
  for (;;) {
    char go = now() < end ? 'w' : 'g';
    if (initiator) {
      if (send_all(fd, &go, 1) || recv_all(fd, &c, 1)) return -1;
    } else {
      if (recv_all(fd, &go, 1) || send_all(fd, &go, 1)) return -1;
    }
    if (go == 'g') return 0;
  }
}

static int run_send(const char* host, int port, size_t n, uint32_t rounds) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  inet_pton(AF_INET, host, &a.sin_addr);
  if (connect(fd, (struct sockaddr*)&a, sizeof a) != 0) {
    perror("connect");
    return 1;
  }
  if (warm_up(fd, 1, 3.0)) return 1;
  void* last[KINDS] = {0};
  unsigned reused[KINDS] = {0};
  uint8_t* fixed = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  uint8_t* keep = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (fixed == MAP_FAILED || keep == MAP_FAILED) return 1;
  for (uint32_t r = 0; r < rounds; ++r) {
    for (uint32_t k = 0; k < KINDS; ++k) {
      uint8_t* p;
      switch (k) {
      case 0: // a fresh mapping, unmapped after the send
        p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return 1;
        break;
      case 1: // malloc (the hooked allocator's arenas above XPRESS_ALLOC_MIN_KB)
        p = malloc(n);
        if (p == NULL) return 1;
        break;
      case 2: // the same mapping, its pages discarded after each send
        p = keep;
        break;
      default: // a new mapping put over the old one at the same address
        p = mmap(fixed, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        if (p != fixed) return 1;
        break;
      }
      reused[k] += p == last[k];
      last[k] = p;
      fill(p, n, r, k);
      if (send_all(fd, p, n)) {
        perror("send");
        return 1;
      }
      // send() returned: the buffer is ours again, and it changes owner.
      if (k == 0) munmap(p, n);
      if (k == 1) free(p);
      if (k == 2) madvise(p, n, MADV_DONTNEED);
    }
  }
  char done;
  if (recv_all(fd, &done, 1)) return 1;
  printf("sent %u messages of %zu bytes;", rounds * KINDS, n);
  for (int k = 0; k < KINDS; ++k)
    printf(" %s reused %u of %u;", kind_name[k], reused[k], rounds);
  printf("\n");
  close(fd);
  return 0;
}

static int run_recv(const char* bind_addr, int port, size_t n, uint32_t rounds) {
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  inet_pton(AF_INET, bind_addr, &a.sin_addr);
  if (bind(ls, (struct sockaddr*)&a, sizeof a) != 0 || listen(ls, 1) != 0) {
    perror("bind/listen");
    return 1;
  }
  printf("listening\n");
  fflush(stdout);
  int fd = accept(ls, NULL, NULL);
  if (fd < 0 || warm_up(fd, 0, 0)) return 1;
  uint8_t* buf = malloc(n);
  for (uint32_t r = 0; r < rounds; ++r) {
    for (uint32_t k = 0; k < KINDS; ++k) {
      if (recv_all(fd, buf, n)) {
        printf("short stream at round %u kind %s\n", r, kind_name[k]);
        return 1;
      }
      uint32_t h[4];
      memcpy(h, buf, sizeof h);
      size_t bad = n;
      for (size_t i = sizeof h; i < n && bad == n; ++i)
        if (buf[i] != pat(r, k, i)) bad = i;
      if (h[0] != r || h[1] != k || h[2] != 0x5a43u || bad != n) {
        printf("STALE or corrupt: round %u kind %s: header says round %u kind %u, first bad "
               "byte at %zu\n",
               r, kind_name[k], h[0], h[1], bad);
        return 1;
      }
    }
  }
  char done = 'd';
  send_all(fd, &done, 1);
  printf("ok %u messages of %zu bytes\n", rounds * KINDS, n);
  close(fd);
  return 0;
}

int main(int argc, char** argv) {
  const char *host = "127.0.0.1", *bind_addr = "0.0.0.0";
  int port = 19500;
  size_t size = 1 << 20;
  uint32_t rounds = 20;
  if (argc < 2) goto usage;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--host"))
      host = argv[i + 1];
    else if (!strcmp(argv[i], "--bind"))
      bind_addr = argv[i + 1];
    else if (!strcmp(argv[i], "--port"))
      port = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--size"))
      size = strtoul(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--rounds"))
      rounds = (uint32_t)strtoul(argv[i + 1], NULL, 10);
    else
      goto usage;
  }
  if (size < 64) goto usage;
  if (!strcmp(argv[1], "send")) return run_send(host, port, size, rounds);
  if (!strcmp(argv[1], "recv")) return run_recv(bind_addr, port, size, rounds);
usage:
  fprintf(stderr, "usage: zc-stale send|recv [--host A] [--bind A] [--port P] [--size N] "
                  "[--rounds R]\n");
  return 2;
}
