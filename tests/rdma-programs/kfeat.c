// Kernel features under xpress (tests/rdma-programs/cases/kfeat.sh).
//
//   kfeat ktls-recv --port P [--bind A]     ktls-send --host A --port P --bytes N
//     The sender warms the connection up (ping-pongs for 3 s: it goes over
//     RDMA), then turns kernel TLS on (TCP_ULP "tls", SOL_TLS TLS_TX with a
//     fixed AES-GCM-128 key) and writes N bytes of a pattern.  The receiver
//     reads every byte after the warm-up as it arrived (no TLS_RX), then
//     checks it is the kernel's ciphertext: it writes it into a loopback TCP
//     connection whose reading end has kernel TLS RX with the same key,
//     which authenticates every record (AES-GCM, record sequence numbers)
//     and must give back exactly the N bytes of the pattern.  Prints
//     "ciphertext C bytes, plaintext N bytes ok" (exit 0) or what failed.
//   kfeat ktls-recv-rx --port P [--bind A] --bytes N
//     Both ends with kernel TLS: TLS RX right after the warm-up; prints
//     "plaintext N bytes ok".
//   kfeat uring-recv --port P [--bind A] --bytes N    send --host A --port P --bytes N
//     The receiver creates an io_uring first (as servers do at start-up),
//     reads the first 1 KiB with recv() and the rest with io_uring recv;
//     checks the pattern and the count.  Prints "received N ok".
//   kfeat recv --port P [--bind A] --bytes N: the same with recv() only.
//   kfeat send-zerocopy ...: send, with SO_ZEROCOPY set before connect.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/tls.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#ifdef HAVE_LIBURING
#include <liburing.h>
#endif

#ifndef SOL_TLS
#define SOL_TLS 282
#endif

static uint8_t pat(uint64_t i) {
  return (uint8_t)(i * 131 + (i >> 10) * 7 + (i >> 20));
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int send_all(int fd, const void* p, size_t n) {
  const uint8_t* b = p;
  while (n > 0) {
    ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    b += w;
    n -= (size_t)w;
  }
  return 0;
}

// The first n bytes of the test pattern (pat) to fd; nonzero on error.
static int send_pattern(int fd, size_t n) {
  static uint8_t buf[65536];
  for (size_t off = 0; off < n;) {
    size_t k = n - off < sizeof buf ? n - off : sizeof buf;
    for (size_t i = 0; i < k; ++i)
      buf[i] = pat(off + i);
    if (send_all(fd, buf, k)) {
      perror("send");
      return 1;
    }
    off += k;
  }
  return 0;
}

static int recv_all(int fd, void* p, size_t n) {
  uint8_t* b = p;
  while (n > 0) {
    ssize_t r = recv(fd, b, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    b += r;
    n -= (size_t)r;
  }
  return 0;
}

static int dial(const char* host, int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  inet_pton(AF_INET, host, &a.sin_addr);
  if (connect(fd, (struct sockaddr*)&a, sizeof a) != 0) {
    perror("connect");
    exit(1);
  }
  return fd;
}

static int listen_on(const char* bind_addr, int port) {
  int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  inet_pton(AF_INET, bind_addr, &a.sin_addr);
  if (bind(l, (struct sockaddr*)&a, sizeof a) != 0 || listen(l, 8) != 0) {
    perror("bind/listen");
    exit(1);
  }
  return l;
}

static int accept_one(int l) {
  int fd = accept(l, NULL, NULL);
  if (fd < 0) {
    perror("accept");
    exit(1);
  }
  close(l);
  return fd;
}

// The connection goes over RDMA meanwhile: 8-byte ping-pongs for `secs`,
// then an all-ones word ends them (answered too).
static void warm_up_send(int fd, double secs) {
  double end = now() + secs;
  uint64_t v = 1, back;
  for (;; ++v) {
    if (now() >= end) v = UINT64_MAX;
    if (send_all(fd, &v, sizeof v) || recv_all(fd, &back, sizeof back) || back != v) {
      fprintf(stderr, "warm-up failed at %llu\n", (unsigned long long)v);
      exit(1);
    }
    if (v == UINT64_MAX) return;
  }
}

static void warm_up_recv(int fd) {
  uint64_t v;
  do {
    if (recv_all(fd, &v, sizeof v) || send_all(fd, &v, sizeof v)) {
      fprintf(stderr, "warm-up failed\n");
      exit(1);
    }
  } while (v != UINT64_MAX);
}

static void crypto_info(struct tls12_crypto_info_aes_gcm_128* ci) {
  memset(ci, 0, sizeof *ci);
  ci->info.version = TLS_1_2_VERSION;
  ci->info.cipher_type = TLS_CIPHER_AES_GCM_128;
  for (int i = 0; i < TLS_CIPHER_AES_GCM_128_KEY_SIZE; ++i)
    ci->key[i] = (unsigned char)(0x10 + i);
  for (int i = 0; i < TLS_CIPHER_AES_GCM_128_IV_SIZE; ++i)
    ci->iv[i] = (unsigned char)(0x40 + i);
  for (int i = 0; i < TLS_CIPHER_AES_GCM_128_SALT_SIZE; ++i)
    ci->salt[i] = (unsigned char)(0x70 + i);
}

static int ktls_on(int fd, int dir) {
  struct tls12_crypto_info_aes_gcm_128 ci;
  crypto_info(&ci);
  if (setsockopt(fd, SOL_TCP, TCP_ULP, "tls", sizeof "tls") != 0) {
    perror("setsockopt(TCP_ULP, tls)");
    return -1;
  }
  if (setsockopt(fd, SOL_TLS, dir, &ci, sizeof ci) != 0) {
    perror(dir == TLS_TX ? "setsockopt(TLS_TX)" : "setsockopt(TLS_RX)");
    return -1;
  }
  return 0;
}

static int run_ktls_send(const char* host, int port, size_t n) {
  int fd = dial(host, port);
  warm_up_send(fd, 3.0);
  if (ktls_on(fd, TLS_TX) != 0) return 1;
  if (send_pattern(fd, n)) return 1;
  close(fd);
  printf("sent %zu with kernel TLS\n", n);
  return 0;
}

struct Feed {
  int fd;
  const uint8_t* p;
  size_t n;
};

static void* feed(void* arg) {
  struct Feed* f = arg;
  send_all(f->fd, f->p, f->n);
  close(f->fd);
  return NULL;
}

static int run_ktls_recv(const char* bind_addr, int port) {
  int fd = accept_one(listen_on(bind_addr, port));
  warm_up_recv(fd);
  size_t cap = 64 << 20, got = 0;
  uint8_t* ct = malloc(cap);
  for (;;) {
    ssize_t r = recv(fd, ct + got, cap - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      perror("recv");
      return 1;
    }
    if (r == 0 || (got += (size_t)r) == cap) break;
  }
  close(fd);
  // The kernel decrypts it: a loopback connection with TLS RX.
  int l = listen_on("127.0.0.1", 0);
  struct sockaddr_in a;
  socklen_t al = sizeof a;
  getsockname(l, (struct sockaddr*)&a, &al);
  int w = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(w, (struct sockaddr*)&a, sizeof a) != 0) {
    perror("loopback connect");
    return 1;
  }
  int rd = accept_one(l);
  if (ktls_on(rd, TLS_RX) != 0) return 1;
  struct Feed f = {w, ct, got};
  pthread_t t;
  pthread_create(&t, NULL, feed, &f);
  static uint8_t buf[65536];
  size_t plain = 0;
  int bad = 0;
  for (;;) {
    ssize_t r = recv(rd, buf, sizeof buf, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      printf("ciphertext %zu bytes: decryption failed after %zu plaintext bytes (%s)\n", got, plain,
             strerror(errno));
      return 1;
    }
    if (r == 0) break;
    for (ssize_t i = 0; i < r && !bad; ++i)
      if (buf[i] != pat(plain + (size_t)i)) {
        printf("ciphertext %zu bytes: plaintext differs at %zu\n", got, plain + (size_t)i);
        bad = 1;
      }
    plain += (size_t)r;
  }
  pthread_join(t, NULL);
  if (bad) return 1;
  printf("ciphertext %zu bytes, plaintext %zu bytes ok\n", got, plain);
  return 0;
}

// Both ends with kernel TLS: the receiver turns TLS RX on right after the
// warm-up (while the sender turns TX on) and reads the plaintext.
static int run_ktls_recv_rx(const char* bind_addr, int port, size_t n) {
  int fd = accept_one(listen_on(bind_addr, port));
  warm_up_recv(fd);
  if (ktls_on(fd, TLS_RX) != 0) return 1;
  static uint8_t buf[65536];
  size_t plain = 0;
  for (;;) {
    ssize_t r = recv(fd, buf, sizeof buf, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      printf("TLS RX failed after %zu plaintext bytes (%s)\n", plain, strerror(errno));
      return 1;
    }
    if (r == 0) break;
    for (ssize_t i = 0; i < r; ++i)
      if (buf[i] != pat(plain + (size_t)i)) {
        printf("plaintext differs at %zu\n", plain + (size_t)i);
        return 1;
      }
    plain += (size_t)r;
  }
  printf("plaintext %zu bytes %s\n", plain, plain == n ? "ok" : "short");
  return plain == n ? 0 : 1;
}

static int run_send(const char* host, int port, size_t n, int zerocopy) {
  int fd;
  if (zerocopy) {
    // SO_ZEROCOPY before connect: the connection must never upgrade.
    fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one) != 0) {
      perror("setsockopt(SO_ZEROCOPY)");
      return 1;
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, host, &a.sin_addr);
    if (connect(fd, (struct sockaddr*)&a, sizeof a) != 0) {
      perror("connect");
      return 1;
    }
  } else {
    fd = dial(host, port);
  }
  if (send_pattern(fd, n)) return 1;
  close(fd);
  printf("sent %zu\n", n);
  return 0;
}

static int check(const uint8_t* p, size_t n, size_t off) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != pat(off + i)) {
      printf("byte %zu differs\n", off + i);
      return -1;
    }
  return 0;
}

static int run_recv(const char* bind_addr, int port, size_t n, int uring) {
#ifdef HAVE_LIBURING
  struct io_uring ring;
  if (uring && io_uring_queue_init(8, &ring, 0) != 0) {
    perror("io_uring_queue_init");
    return 1;
  }
#else
  if (uring) {
    fprintf(stderr, "built without liburing\n");
    return 1;
  }
#endif
  int fd = accept_one(listen_on(bind_addr, port));
  static uint8_t buf[65536];
  size_t got = 0;
  if (recv_all(fd, buf, 1024) || check(buf, 1024, 0)) return 1;
  got = 1024;
  while (got < n) {
    ssize_t r;
#ifdef HAVE_LIBURING
    if (uring) {
      struct io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      io_uring_prep_recv(sqe, fd, buf, sizeof buf, 0);
      io_uring_submit(&ring);
      struct io_uring_cqe* cqe;
      if (io_uring_wait_cqe(&ring, &cqe) != 0) {
        perror("io_uring_wait_cqe");
        return 1;
      }
      r = cqe->res;
      io_uring_cqe_seen(&ring, cqe);
      if (r < 0) errno = (int)-r, r = -1;
    } else
#endif
      r = recv(fd, buf, sizeof buf, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    if (check(buf, (size_t)r, got)) return 1;
    got += (size_t)r;
  }
  printf("received %zu %s\n", got, got == n ? "ok" : "short");
  return got == n ? 0 : 1;
}

int main(int argc, char** argv) {
  const char *mode = argc > 1 ? argv[1] : "", *host = "127.0.0.1", *bind_addr = "0.0.0.0";
  int port = 0;
  size_t bytes = 0;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--host"))
      host = argv[i + 1];
    else if (!strcmp(argv[i], "--bind"))
      bind_addr = argv[i + 1];
    else if (!strcmp(argv[i], "--port"))
      port = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--bytes"))
      bytes = strtoull(argv[i + 1], NULL, 0);
  }
  if (!strcmp(mode, "ktls-send")) return run_ktls_send(host, port, bytes);
  if (!strcmp(mode, "ktls-recv")) return run_ktls_recv(bind_addr, port);
  if (!strcmp(mode, "ktls-recv-rx")) return run_ktls_recv_rx(bind_addr, port, bytes);
  if (!strcmp(mode, "send")) return run_send(host, port, bytes, 0);
  if (!strcmp(mode, "send-zerocopy")) return run_send(host, port, bytes, 1);
  if (!strcmp(mode, "recv")) return run_recv(bind_addr, port, bytes, 0);
  if (!strcmp(mode, "uring-recv")) return run_recv(bind_addr, port, bytes, 1);
  fprintf(stderr, "usage: see kfeat.c\n");
  return 2;
}
