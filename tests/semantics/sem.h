// Socket semantics suite: shared declarations.
//
// Every case is a function that prints a deterministic transcript (return
// values, errno names, readiness masks, byte counts, checksums: never ports,
// pids, fd numbers chosen by the kernel or timings) and checks each result
// against what the Linux kernel does.  sem_main() runs each case in its own
// forked child with an alarm() timeout, so one broken case cannot hide the
// others.  tests/semantics/run.sh runs the binaries without and with
// LD_PRELOAD=build/libxpress.so and requires identical transcripts.
#ifndef XPRESS_TESTS_SEMANTICS_SEM_H
#define XPRESS_TESTS_SEMANTICS_SEM_H

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct sem_case {
  const char* name;
  void (*fn)(void);
};

// Case groups (NULL-terminated arrays), one per source file.
extern const struct sem_case sem_connect_cases[];
extern const struct sem_case sem_epoll_cases[];
extern const struct sem_case sem_poll_cases[];
extern const struct sem_case sem_io_cases[];
extern const struct sem_case sem_fd_cases[];
extern const struct sem_case sem_proc_cases[];
extern const struct sem_case sem_data_cases[];
extern const struct sem_case sem_misc_cases[];
extern const struct sem_case sem_wait_sets_cases[];
extern const struct sem_case sem_fortify_cases[];

// Runs the cases of `groups` (NULL-terminated) selected by argv; see sem_core.c.
int sem_main(int argc, char** argv, const struct sem_case* const* groups);

// ---- transcript and checks
void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void sem_fail(const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
void sem_fatal(const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
// The environment cannot provide what the case needs (e.g. no CAP_SYS_RESOURCE):
// the case still runs what it can; if nothing failed it is reported as skipped.
void sem_skip(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

enum sem_mode { SEM_EXACT, SEM_ERRNO, SEM_NONNEG, SEM_ANY };
void sem_rc(const char* file, int line, const char* what, long r, int e, enum sem_mode mode,
            long want, int want_err);

// RC(want, call): prints "call = r" (or "= -1 ENAME"), requires r == want.
#define RC(want, call)                                                                             \
  ({                                                                                               \
    errno = 0;                                                                                     \
    long r_ = (long)(call);                                                                        \
    int e_ = errno;                                                                                \
    sem_rc(__FILE__, __LINE__, #call, r_, e_, SEM_EXACT, (long)(want), 0);                         \
    errno = e_;                                                                                    \
    r_;                                                                                            \
  })
// ERR(err, call): requires r == -1 with errno == err.
#define ERR(err, call)                                                                             \
  ({                                                                                               \
    errno = 0;                                                                                     \
    long r_ = (long)(call);                                                                        \
    int e_ = errno;                                                                                \
    sem_rc(__FILE__, __LINE__, #call, r_, e_, SEM_ERRNO, -1, (err));                               \
    errno = e_;                                                                                    \
    r_;                                                                                            \
  })
// OK(call): requires r >= 0 and prints "ok" (the value may be an fd or port).
#define OK(call)                                                                                   \
  ({                                                                                               \
    errno = 0;                                                                                     \
    long r_ = (long)(call);                                                                        \
    int e_ = errno;                                                                                \
    sem_rc(__FILE__, __LINE__, #call, r_, e_, SEM_NONNEG, 0, 0);                                   \
    errno = e_;                                                                                    \
    r_;                                                                                            \
  })
// ANY(call): prints the result, checks nothing (follow with CHECK on errno).
#define ANY(call)                                                                                  \
  ({                                                                                               \
    errno = 0;                                                                                     \
    long r_ = (long)(call);                                                                        \
    int e_ = errno;                                                                                \
    sem_rc(__FILE__, __LINE__, #call, r_, e_, SEM_ANY, 0, 0);                                      \
    errno = e_;                                                                                    \
    r_;                                                                                            \
  })
// CHECK(cond): prints "cond: yes|no", fails on no.
#define CHECK(cond)                                                                                \
  do {                                                                                             \
    int c_ = !!(cond);                                                                             \
    say("%s: %s", #cond, c_ ? "yes" : "no");                                                       \
    if (!c_) sem_fail(__FILE__, __LINE__, "check failed: %s", #cond);                              \
  } while (0)
// EQ(label, got, want): prints "label = got", requires got == want (integers).
#define EQ(label, got, want)                                                                       \
  do {                                                                                             \
    long g_ = (long)(got), w_ = (long)(want);                                                      \
    say("%s = %ld", (label), g_);                                                                  \
    if (g_ != w_) sem_fail(__FILE__, __LINE__, "%s: got %ld, want %ld", (label), g_, w_);          \
  } while (0)
// MASK(label, got, want): readiness masks, printed as names.
#define MASK(label, got, want)                                                                     \
  do {                                                                                             \
    unsigned g_ = (unsigned)(got), w_ = (unsigned)(want);                                          \
    say("%s = %s", (label), pmask(g_));                                                            \
    if (g_ != w_)                                                                                  \
      sem_fail(__FILE__, __LINE__, "%s: got %s, want %s", (label), pmask(g_), pmask(w_));          \
  } while (0)
// REQUIRE(cond): quiet setup check; aborts the case when false.
#define REQUIRE(cond)                                                                              \
  do {                                                                                             \
    if (!(cond)) sem_fatal(__FILE__, __LINE__, "required: %s (errno %s)", #cond, ename(errno));    \
  } while (0)

// ---- names
const char* ename(int e);      // "EAGAIN"
const char* pmask(unsigned m); // "POLLIN|POLLOUT" (also for EPOLL* bits), "0"
const char* signame(int sig);  // "SIGPIPE"
const char* fdflags(int fl);   // F_GETFL result: "O_RDWR|O_NONBLOCK"

// ---- helpers (all abort the case on unexpected setup failures)
// The address TCP cases use: 127.0.0.1, or $SEM_ADDR (e.g. an address with an
// RDMA device, so that the preloaded run carries the cases over RDMA).
uint32_t sem_addr(void);                      // network byte order
int tcp_listener(struct sockaddr_in* addr);   // sem_addr(), ephemeral port, listening
void tcp_pair(int* client, int* server);      // connected loopback TCP pair, blocking
int wait_ready(int fd, short events, int ms); // poll(); returns revents (0 on timeout)
void wait_avail(int fd, size_t n);            // until >= n bytes are queued (peeked)
void send_all(int fd, const void* buf, size_t n);
size_t recv_all(int fd, void* buf, size_t n); // until n bytes or EOF
// A thread that reads fd with recv_all into buf (max bytes, malloc'd; the
// caller frees it) while the case writes; got: what it read, after join.
struct sink {
  int fd;
  size_t max, got;
  char* buf;
  pthread_t thread;
};
void sink_start(struct sink* s, int fd, size_t max);
void sink_join(struct sink* s);
void fill_pattern(void* buf, size_t n, unsigned seed);
uint32_t fnv1a(const void* buf, size_t n);
long now_ms(void);
int thread_sleeping(pid_t tid); // 1 while the thread sleeps (/proc/self/task/TID/stat: S)
int ep_add(int ep, int fd, unsigned events, uint64_t data); // EPOLL_CTL_ADD
void msleep(int ms);
int fd_open(int fd);          // 1 when fcntl(F_GETFD) succeeds
int roundtrip(int x, int y);  // 4 bytes x->y and y->x (quiet); 1 when both arrived intact
int closed_port(int* holder); // a loopback port bound but not listening (RST on connect)

// Exec helper: runs "/proc/self/exe --fdcheck FD" (fork+exec, vfork+exec or
// posix_spawn per `how`), serves its ping with pong over `peer`, and returns
// its verdict: "usable", "closed", "not-socket", "io-error", or "died".
enum spawn_how { SPAWN_FORK_EXEC, SPAWN_VFORK_EXEC, SPAWN_POSIX };
const char* fdcheck(enum spawn_how how, int fd, int peer);

#endif
