// A sender that ends without closing its socket, as many small programs do:
// it writes BYTES in CHUNK-byte writes, then calls exit(), _exit() or
// _Exit() (or close() and exit(), the reference).  The kernel closes the
// socket at exit and TCP still delivers every byte, then a clean end of
// stream: the receiver must see the same under xpress.
//   exit-unclosed recv --bind ADDR --port P
//       prints "received N sum S end eof|error(errno)" after the end
//   exit-unclosed send --host ADDR --port P --bytes N --chunk C --how exit|_exit|_Exit|close
//                      [--go-file PATH]
//       prints "sent N sum S" before it ends; after the first 16 KiB it waits
//       until PATH exists (at most 20 s; without it: 300 ms after the first chunk)
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char* arg(int argc, char** argv, const char* name, const char* def) {
  for (int i = 2; i + 1 < argc; ++i)
    if (strcmp(argv[i], name) == 0) return argv[i + 1];
  return def;
}

static uint64_t mix(uint64_t sum, const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    sum = sum * 1099511628211ull + p[i];
  return sum;
}

static int recv_side(const char* bind_addr, int port) {
  int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (inet_pton(AF_INET, bind_addr, &a.sin_addr) != 1 || bind(l, (void*)&a, sizeof a) != 0 ||
      listen(l, 4) != 0) {
    perror("recv: bind/listen");
    return 1;
  }
  int c = accept(l, NULL, NULL);
  if (c < 0) {
    perror("recv: accept");
    return 1;
  }
  static unsigned char buf[65536];
  uint64_t n = 0, sum = 1469598103934665603ull;
  ssize_t r;
  while ((r = read(c, buf, sizeof buf)) > 0) {
    sum = mix(sum, buf, (size_t)r);
    n += (uint64_t)r;
  }
  if (r == 0)
    printf("received %llu sum %016llx end eof\n", (unsigned long long)n, (unsigned long long)sum);
  else
    printf("received %llu sum %016llx end error(%s)\n", (unsigned long long)n,
           (unsigned long long)sum, strerror(errno));
  return 0;
}

// A one-way connection binds once 16 KiB crossed on TCP (docs/protocol.md
// §2, kOneWayBytes): with a go file the sender pauses after those.
#define GO_AFTER 16384

// After the first bytes: until go_file exists (the test creates it once the
// connection switched to RDMA), at most 20 s; without one, a fixed pause.
static void wait_go(const char* go_file) {
  if (go_file == NULL) {
    usleep(300000);
    return;
  }
  for (int i = 0; i < 2000 && access(go_file, F_OK) != 0; ++i)
    usleep(10000);
}

static int send_side(const char* host, int port, long total, long chunk, const char* how,
                     const char* go_file) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (inet_pton(AF_INET, host, &a.sin_addr) != 1 || connect(s, (void*)&a, sizeof a) != 0) {
    perror("send: connect");
    return 1;
  }
  unsigned char* buf = malloc((size_t)chunk);
  if (buf == NULL) return 1;
  uint64_t sum = 1469598103934665603ull, k = 0;
  long sent = 0, pause_at = go_file != NULL ? GO_AFTER : chunk;
  while (sent < total) {
    long n = total - sent < chunk ? total - sent : chunk;
    for (long i = 0; i < n; ++i, ++k)
      buf[i] = (unsigned char)(k * 7 + k / 4093);
    sum = mix(sum, buf, (size_t)n);
    for (long off = 0; off < n;) {
      ssize_t w = write(s, buf + off, (size_t)(n - off));
      if (w <= 0) {
        perror("send: write");
        return 1;
      }
      off += w;
    }
    // The first bytes on TCP, then a wait: the upgrade finishes and the
    // rest (and the end) goes over RDMA.
    if (sent < pause_at && sent + n >= pause_at) wait_go(go_file);
    sent += n;
  }
  printf("sent %ld sum %016llx\n", sent, (unsigned long long)sum);
  fflush(stdout);
  if (strcmp(how, "_exit") == 0) _exit(0);
  if (strcmp(how, "_Exit") == 0) _Exit(0);
  if (strcmp(how, "close") == 0) close(s);
  exit(0); // "exit" and "close": the socket is still open here for "exit"
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: exit-unclosed recv|send [options]\n");
    return 2;
  }
  int port = atoi(arg(argc, argv, "--port", "0"));
  if (strcmp(argv[1], "recv") == 0) return recv_side(arg(argc, argv, "--bind", "0.0.0.0"), port);
  return send_side(arg(argc, argv, "--host", "127.0.0.1"), port,
                   atol(arg(argc, argv, "--bytes", "1048576")),
                   atol(arg(argc, argv, "--chunk", "4096")), arg(argc, argv, "--how", "exit"),
                   arg(argc, argv, "--go-file", NULL));
}
