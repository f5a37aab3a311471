// Socket semantics suite: case runner, transcript, checks and helpers.
//
//   semantics [CASE...]      run all cases (or the named ones); transcript on stdout,
//                            closing line "N passed, M failed", exit 1 on any failure
//   semantics --list         list the case names
//   semantics --fdcheck FD   exec helper: is FD open and a usable connected socket?
//                            (sends "ping", expects "pong"; exit 0 usable, 3 closed,
//                            4 not a stream socket, 5 I/O error)
#include "sem.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char** environ;

enum { CASE_TIMEOUT_S = 10 };

static volatile int sem_failed;
static volatile int sem_skipped;
enum { EXIT_SKIP = 77 };

// ------------------------------------------------------------ transcript

void say(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  putchar('\n');
}

static const char* base(const char* file) {
  const char* s = strrchr(file, '/');
  return s ? s + 1 : file;
}

void sem_fail(const char* file, int line, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL %s:%d: ", base(file), line);
  vprintf(fmt, ap);
  va_end(ap);
  putchar('\n');
  sem_failed = 1;
}

void sem_fatal(const char* file, int line, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL %s:%d: ", base(file), line);
  vprintf(fmt, ap);
  va_end(ap);
  printf(" (case aborted)\n");
  fflush(stdout);
  _exit(1);
}

void sem_skip(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("SKIP: ");
  vprintf(fmt, ap);
  va_end(ap);
  putchar('\n');
  sem_skipped = 1;
}

void sem_rc(const char* file, int line, const char* what, long r, int e, enum sem_mode mode,
            long want, int want_err) {
  char got[64];
  if (r == -1)
    snprintf(got, sizeof got, "-1 %s", ename(e));
  else if (mode == SEM_NONNEG && r >= 0)
    snprintf(got, sizeof got, "ok");
  else
    snprintf(got, sizeof got, "%ld", r);
  say("%s = %s", what, got);
  switch (mode) {
  case SEM_EXACT:
    if (r != want) sem_fail(file, line, "%s: got %s, want %ld", what, got, want);
    break;
  case SEM_ERRNO:
    if (r != -1 || e != want_err)
      sem_fail(file, line, "%s: got %s, want -1 %s", what, got, ename(want_err));
    break;
  case SEM_NONNEG:
    if (r < 0) sem_fail(file, line, "%s: got %s, want >= 0", what, got);
    break;
  case SEM_ANY:
    break;
  }
}

// ------------------------------------------------------------ names

const char* ename(int e) {
  static char buf[4][24];
  static int slot;
  if (e == 0) return "0";
  const char* n = strerrorname_np(e);
  if (n) return n;
  char* b = buf[slot++ % 4];
  snprintf(b, sizeof buf[0], "E#%d", e);
  return b;
}

const char* signame(int sig) {
  static char buf[24];
  const char* n = sigabbrev_np(sig);
  if (n) {
    snprintf(buf, sizeof buf, "SIG%s", n);
    return buf;
  }
  snprintf(buf, sizeof buf, "SIG#%d", sig);
  return buf;
}

const char* pmask(unsigned m) {
  static const struct {
    unsigned bit;
    const char* name;
  } bits[] = {
      {POLLIN, "POLLIN"},         {POLLPRI, "POLLPRI"},       {POLLOUT, "POLLOUT"},
      {POLLERR, "POLLERR"},       {POLLHUP, "POLLHUP"},       {POLLNVAL, "POLLNVAL"},
      {POLLRDNORM, "POLLRDNORM"}, {POLLRDBAND, "POLLRDBAND"}, {POLLWRNORM, "POLLWRNORM"},
      {POLLWRBAND, "POLLWRBAND"}, {POLLMSG, "POLLMSG"},       {POLLRDHUP, "POLLRDHUP"},
  };
  static char buf[4][160];
  static int slot;
  char* b = buf[slot++ % 4];
  b[0] = 0;
  if (m == 0) return "0";
  for (size_t i = 0; i < sizeof bits / sizeof bits[0]; i++) {
    if (m & bits[i].bit) {
      if (b[0]) strcat(b, "|");
      strcat(b, bits[i].name);
      m &= ~bits[i].bit;
    }
  }
  if (m) {
    char rest[24];
    snprintf(rest, sizeof rest, "%s0x%x", b[0] ? "|" : "", m);
    strcat(b, rest);
  }
  return b;
}

const char* fdflags(int fl) {
  static char buf[128];
  if (fl == -1) return "-1";
  int acc = fl & O_ACCMODE;
  snprintf(buf, sizeof buf, "%s",
           acc == O_RDONLY   ? "O_RDONLY"
           : acc == O_WRONLY ? "O_WRONLY"
                             : "O_RDWR");
  fl &= ~O_ACCMODE;
  if (fl & O_NONBLOCK) strcat(buf, "|O_NONBLOCK"), fl &= ~O_NONBLOCK;
  if (fl & O_APPEND) strcat(buf, "|O_APPEND"), fl &= ~O_APPEND;
  if (fl & O_ASYNC) strcat(buf, "|O_ASYNC"), fl &= ~O_ASYNC;
  if (fl) {
    char rest[24];
    snprintf(rest, sizeof rest, "|0x%x", fl);
    strcat(buf, rest);
  }
  return buf;
}

// ------------------------------------------------------------ helpers

long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000L + ts.tv_nsec / 1000000;
}

void msleep(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
  }
}

int fd_open(int fd) {
  return fcntl(fd, F_GETFD) != -1;
}

// Either end may be non-blocking: each recv first waits for the bytes,
// which over RDMA (even to a local address) arrive after send returns.
int roundtrip(int x, int y) {
  char buf[4];
  if (send(x, "ping", 4, MSG_NOSIGNAL) != 4) return 0;
  if (!(wait_ready(y, POLLIN, 10000) & POLLIN)) return 0;
  if (recv(y, buf, 4, MSG_WAITALL) != 4 || memcmp(buf, "ping", 4) != 0) return 0;
  if (send(y, "pong", 4, MSG_NOSIGNAL) != 4) return 0;
  if (!(wait_ready(x, POLLIN, 10000) & POLLIN)) return 0;
  if (recv(x, buf, 4, MSG_WAITALL) != 4 || memcmp(buf, "pong", 4) != 0) return 0;
  return 1;
}

uint32_t sem_addr(void) {
  static uint32_t addr;
  if (addr == 0) {
    const char* e = getenv("SEM_ADDR");
    struct in_addr in;
    addr = e && *e && inet_pton(AF_INET, e, &in) == 1 ? in.s_addr : htonl(INADDR_LOOPBACK);
  }
  return addr;
}

int tcp_listener(struct sockaddr_in* addr) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(l >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  a.sin_addr.s_addr = sem_addr();
  REQUIRE(bind(l, (struct sockaddr*)&a, sizeof a) == 0);
  REQUIRE(listen(l, 16) == 0);
  socklen_t len = sizeof a;
  REQUIRE(getsockname(l, (struct sockaddr*)&a, &len) == 0);
  if (addr) *addr = a;
  return l;
}

// $SEM_ADDR6 (an IPv6 address, e.g. one with an RDMA device): tcp_pair's
// connections are native IPv6 there, AF_INET6 at both ends.
static int tcp_listener6(struct sockaddr_in6* addr, const char* text) {
  int l = socket(AF_INET6, SOCK_STREAM, 0);
  REQUIRE(l >= 0);
  struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = 0};
  REQUIRE(inet_pton(AF_INET6, text, &a.sin6_addr) == 1);
  REQUIRE(bind(l, (struct sockaddr*)&a, sizeof a) == 0);
  REQUIRE(listen(l, 16) == 0);
  socklen_t len = sizeof a;
  REQUIRE(getsockname(l, (struct sockaddr*)&a, &len) == 0);
  *addr = a;
  return l;
}

void tcp_pair(int* client, int* server) {
  const char* a6 = getenv("SEM_ADDR6");
  struct sockaddr_storage ss;
  socklen_t alen;
  int l;
  if (a6 && *a6) {
    l = tcp_listener6((struct sockaddr_in6*)&ss, a6);
    alen = sizeof(struct sockaddr_in6);
  } else {
    l = tcp_listener((struct sockaddr_in*)&ss);
    alen = sizeof(struct sockaddr_in);
  }
  int c = socket(ss.ss_family, SOCK_STREAM, 0);
  REQUIRE(c >= 0);
  REQUIRE(connect(c, (struct sockaddr*)&ss, alen) == 0);
  int s = accept(l, NULL, NULL);
  REQUIRE(s >= 0);
  REQUIRE(close(l) == 0);
  *client = c;
  *server = s;
}

int closed_port(int* holder) {
  int h = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(h >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  a.sin_addr.s_addr = sem_addr();
  REQUIRE(bind(h, (struct sockaddr*)&a, sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(getsockname(h, (struct sockaddr*)&a, &len) == 0);
  *holder = h;
  return ntohs(a.sin_port);
}

int wait_ready(int fd, short events, int ms) {
  struct pollfd p = {.fd = fd, .events = events};
  long end = now_ms() + ms;
  for (;;) {
    int left = (int)(end - now_ms());
    int r = poll(&p, 1, left < 0 ? 0 : left);
    if (r == -1 && errno == EINTR) continue;
    REQUIRE(r >= 0);
    return r ? p.revents : 0;
  }
}

void wait_avail(int fd, size_t n) {
  char* buf = malloc(n + 1);
  REQUIRE(buf);
  long end = now_ms() + 5000;
  for (;;) {
    ssize_t r = recv(fd, buf, n + 1, MSG_PEEK | MSG_DONTWAIT);
    if (r >= (ssize_t)n) break;
    if (r == 0) sem_fatal(__FILE__, __LINE__, "wait_avail(%zu): EOF", n);
    if (r < 0 && errno != EAGAIN && errno != EINTR)
      sem_fatal(__FILE__, __LINE__, "wait_avail(%zu): %s", n, ename(errno));
    if (now_ms() > end) sem_fatal(__FILE__, __LINE__, "wait_avail(%zu): timeout", n);
    if (r <= 0)
      wait_ready(fd, POLLIN, 100);
    else
      msleep(1);
  }
  free(buf);
}

static void* sink_main(void* arg) {
  struct sink* s = arg;
  s->got = recv_all(s->fd, s->buf, s->max);
  return NULL;
}

void sink_start(struct sink* s, int fd, size_t max) {
  *s = (struct sink){.fd = fd, .max = max, .buf = malloc(max)};
  REQUIRE(s->buf);
  REQUIRE(pthread_create(&s->thread, NULL, sink_main, s) == 0);
}

void sink_join(struct sink* s) {
  REQUIRE(pthread_join(s->thread, NULL) == 0);
}

void send_all(int fd, const void* buf, size_t n) {
  const char* p = buf;
  while (n) {
    ssize_t r = send(fd, p, n, MSG_NOSIGNAL);
    if (r == -1 && errno == EINTR) continue;
    if (r <= 0) sem_fatal(__FILE__, __LINE__, "send_all: %s", ename(errno));
    p += r;
    n -= (size_t)r;
  }
}

size_t recv_all(int fd, void* buf, size_t n) {
  char* p = buf;
  size_t got = 0;
  while (got < n) {
    ssize_t r = recv(fd, p + got, n - got, 0);
    if (r == -1 && errno == EINTR) continue;
    if (r < 0) sem_fatal(__FILE__, __LINE__, "recv_all: %s", ename(errno));
    if (r == 0) break;
    got += (size_t)r;
  }
  return got;
}

void fill_pattern(void* buf, size_t n, unsigned seed) {
  unsigned char* p = buf;
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    p[i] = (unsigned char)x;
  }
}

uint32_t fnv1a(const void* buf, size_t n) {
  const unsigned char* p = buf;
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++)
    h = (h ^ p[i]) * 16777619u;
  return h;
}

// ------------------------------------------------------------ exec helper

static int fdcheck_main(int fd) {
  alarm(5);
  if (fcntl(fd, F_GETFD) == -1) return 3;
  int type = 0;
  socklen_t len = sizeof type;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) return 4;
  if (send(fd, "ping", 4, MSG_NOSIGNAL) != 4) return 5;
  char buf[4];
  if (recv(fd, buf, sizeof buf, MSG_WAITALL) != 4 || memcmp(buf, "pong", 4) != 0) return 5;
  return 0;
}

const char* fdcheck(enum spawn_how how, int fd, int peer) {
  static char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  REQUIRE(n > 0);
  exe[n] = 0;
  char num[16];
  snprintf(num, sizeof num, "%d", fd);
  char* argv[] = {exe, "--fdcheck", num, NULL};
  fflush(stdout);
  pid_t pid = -1;
  switch (how) {
  case SPAWN_FORK_EXEC:
    pid = fork();
    if (pid == 0) {
      execv(exe, argv);
      _exit(127);
    }
    break;
  case SPAWN_VFORK_EXEC:
    pid = vfork();
    if (pid == 0) {
      execv(exe, argv);
      _exit(127);
    }
    break;
  case SPAWN_POSIX:
    errno = posix_spawn(&pid, exe, NULL, NULL, argv, environ);
    if (errno) pid = -1;
    break;
  }
  REQUIRE(pid > 0);
  int pidfd = pidfd_open(pid, 0);
  REQUIRE(pidfd >= 0);
  struct pollfd p[2] = {{.fd = peer, .events = POLLIN}, {.fd = pidfd, .events = POLLIN}};
  long end = now_ms() + 8000;
  while (now_ms() < end) {
    int r = poll(p, 2, 200);
    if (r == -1 && errno == EINTR) continue;
    REQUIRE(r >= 0);
    if (p[0].revents & POLLIN) {
      char buf[4];
      REQUIRE(recv_all(peer, buf, 4) == 4);
      REQUIRE(memcmp(buf, "ping", 4) == 0);
      send_all(peer, "pong", 4);
      break;
    }
    if (p[1].revents) break;
  }
  close(pidfd);
  int st;
  REQUIRE(waitpid(pid, &st, 0) == pid);
  if (!WIFEXITED(st)) return "died";
  switch (WEXITSTATUS(st)) {
  case 0:
    return "usable";
  case 3:
    return "closed";
  case 4:
    return "not-socket";
  case 5:
    return "io-error";
  default:
    return "died";
  }
}

// ------------------------------------------------------------ runner

// Cases whose whole time is many connection set-ups, each with a hang check
// of its own: close_race opens 400 connections (5 s each), and on the
// emulated test bed (a TCG VM) their set-ups alone come near the default
// alarm without anything hanging.
static const struct {
  const char* name;
  int timeout_s;
} long_cases[] = {{"close_race", 40}};

static int case_timeout_s(const struct sem_case* c) {
  for (size_t i = 0; i < sizeof long_cases / sizeof long_cases[0]; i++)
    if (strcmp(long_cases[i].name, c->name) == 0) return long_cases[i].timeout_s;
  return CASE_TIMEOUT_S;
}

static int run_case(const struct sem_case* c) {
  say("=== %s", c->name);
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    say("--- FAIL %s: fork: %s", c->name, ename(errno));
    return 0;
  }
  if (pid == 0) {
    setpgid(0, 0);
    signal(SIGPIPE, SIG_DFL);
    alarm(case_timeout_s(c));
    c->fn();
    fflush(stdout);
    _exit(sem_failed ? 1 : sem_skipped ? EXIT_SKIP : 0);
  }
  setpgid(pid, pid);
  // Backstop for a case that blocks SIGALRM: kill the whole group.
  int pidfd = pidfd_open(pid, 0);
  if (pidfd >= 0) {
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    long end = now_ms() + (case_timeout_s(c) + 3) * 1000L;
    int r;
    do {
      long left = end - now_ms();
      r = poll(&p, 1, left < 0 ? 0 : (int)left);
    } while (r == -1 && errno == EINTR);
    if (r == 0) kill(-pid, SIGKILL);
    close(pidfd);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) == -1 && errno == EINTR) {
  }
  kill(-pid, SIGKILL); // leftover grandchildren of a failed case
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
    say("--- ok %s", c->name);
    return 1;
  }
  if (WIFEXITED(st) && WEXITSTATUS(st) == EXIT_SKIP) {
    say("--- skip %s", c->name);
    return 2;
  }
  if (WIFEXITED(st))
    say("--- FAIL %s: exit %d", c->name, WEXITSTATUS(st));
  else if (WTERMSIG(st) == SIGALRM || WTERMSIG(st) == SIGKILL)
    say("--- FAIL %s: timeout (%s after %d s)", c->name, signame(WTERMSIG(st)), case_timeout_s(c));
  else
    say("--- FAIL %s: killed by %s", c->name, signame(WTERMSIG(st)));
  return 0;
}

int sem_main(int argc, char** argv, const struct sem_case* const* groups) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 3 && strcmp(argv[1], "--fdcheck") == 0) return fdcheck_main(atoi(argv[2]));
  if (argc == 2 && strcmp(argv[1], "--list") == 0) {
    for (const struct sem_case* const* g = groups; *g; g++)
      for (const struct sem_case* c = *g; c->name; c++)
        say("%s", c->name);
    return 0;
  }
  for (int i = 1; i < argc; i++) {
    int found = 0;
    for (const struct sem_case* const* g = groups; *g; g++)
      for (const struct sem_case* c = *g; c->name; c++)
        found |= strcmp(c->name, argv[i]) == 0;
    if (!found) {
      fprintf(stderr, "%s: no case named '%s' (see --list)\n", argv[0], argv[i]);
      return 2;
    }
  }
  int passed = 0, failed = 0, skipped = 0;
  for (const struct sem_case* const* g = groups; *g; g++) {
    for (const struct sem_case* c = *g; c->name; c++) {
      int selected = argc == 1;
      for (int i = 1; i < argc; i++)
        selected |= strcmp(c->name, argv[i]) == 0;
      if (!selected) continue;
      int v = run_case(c);
      passed += v == 1;
      failed += v == 0;
      skipped += v == 2;
    }
  }
  if (skipped) say("%d skipped (environment)", skipped);
  say("%d passed, %d failed", passed, failed);
  return failed ? 1 : 0;
}

int thread_sleeping(pid_t tid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char* p = strrchr(buf, ')');
  return p && p[1] == ' ' && p[2] == 'S';
}

int ep_add(int ep, int fd, unsigned events, uint64_t data) {
  struct epoll_event ev = {.events = events, .data.u64 = data};
  return epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}
