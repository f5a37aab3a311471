// Threads with the smallest stack glibc allows, run under the preload: glibc's
// pthread_create fails with EINVAL when the requested stack cannot hold the
// static TLS of every loaded library (xpress's included), and a thread whose
// stack is small must still be able to use the wrapped calls.  Each thread
// allocates, and talks to itself over a socketpair and a loopback TCP
// connection.  Prints "small_stack: N threads of S bytes" and exits 0, or
// says what failed and exits 1.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { kThreads = 8 };

static int fail(const char* what) {
  fprintf(stderr, "small_stack: %s: %s\n", what, strerror(errno));
  return 1;
}

static int roundtrip(int a, int b) {
  char out[64], in[64];
  memset(out, 'x', sizeof out);
  if (write(a, out, sizeof out) != (ssize_t)sizeof out) return fail("write");
  size_t got = 0;
  while (got < sizeof in) {
    ssize_t n = read(b, in + got, sizeof in - got);
    if (n <= 0) return fail("read");
    got += (size_t)n;
  }
  return memcmp(in, out, sizeof in) != 0;
}

static void* body(void* arg) {
  (void)arg;
  intptr_t bad = 0;
  void* small = malloc(64);
  void* big = malloc(256 * 1024);
  if (!small || !big) bad |= fail("malloc");
  free(small);
  free(big);
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) != 0) return (void*)(intptr_t)fail("socketpair");
  bad |= roundtrip(sp[0], sp[1]);
  close(sp[0]);
  close(sp[1]);
  int l = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  if (l < 0 || bind(l, (struct sockaddr*)&a, sizeof a) != 0 || listen(l, 1) != 0 ||
      getsockname(l, (struct sockaddr*)&a, &al) != 0)
    return (void*)(intptr_t)fail("listen");
  int c = socket(AF_INET, SOCK_STREAM, 0);
  if (c < 0 || connect(c, (struct sockaddr*)&a, sizeof a) != 0)
    return (void*)(intptr_t)fail("connect");
  int s = accept(l, NULL, NULL);
  if (s < 0) return (void*)(intptr_t)fail("accept");
  bad |= roundtrip(c, s);
  bad |= roundtrip(s, c);
  close(c);
  close(s);
  close(l);
  return (void*)bad;
}

int main(void) {
  long min = sysconf(_SC_THREAD_STACK_MIN);
  if (min < PTHREAD_STACK_MIN) min = PTHREAD_STACK_MIN;
  size_t size = (size_t)min;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  int e = pthread_attr_setstacksize(&attr, size);
  if (e != 0) {
    fprintf(stderr, "small_stack: pthread_attr_setstacksize(%zu): %s\n", size, strerror(e));
    return 1;
  }
  pthread_t t[kThreads];
  for (int i = 0; i < kThreads; ++i) {
    e = pthread_create(&t[i], &attr, body, NULL);
    if (e != 0) {
      fprintf(stderr, "small_stack: pthread_create with a %zu-byte stack: %s\n", size, strerror(e));
      return 1;
    }
  }
  int bad = 0;
  for (int i = 0; i < kThreads; ++i) {
    void* r;
    pthread_join(t[i], &r);
    bad |= r != NULL;
  }
  if (bad) return 1;
  printf("small_stack: %d threads of %zu bytes\n", kThreads, size);
  return 0;
}
