// The fortified binary (built with -D_FORTIFY_SOURCE=3 -O2): glibc's headers
// turn read/recv/recvfrom/poll/ppoll with a known buffer size and a run-time
// length into __read_chk/__recv_chk/__recvfrom_chk/__poll_chk/__ppoll_chk.
// run.sh checks with nm that the binary really references them.  An
// interposer must both see these calls and keep their overflow check.
#include "sem.h"

#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#if !defined(_FORTIFY_SOURCE) || _FORTIFY_SOURCE < 2
#error "sem_fortify.c must be built with -D_FORTIFY_SOURCE=3 -O2"
#endif

// Run-time lengths: with compile-time constants glibc may skip the _chk call.
static volatile size_t len64 = 64, len128 = 128;
static volatile nfds_t one = 1, two = 2, three = 3;

static void fortified_calls(void) {
  int a, b;
  tcp_pair(&a, &b);
  char buf[64];
  size_t n = len64;
  struct pollfd p[2] = {{.fd = b, .events = POLLIN}, {.fd = a, .events = POLLOUT}};
  RC(0, poll(p, one, 0)); // nothing to read yet (__poll_chk)
  RC(5, send(a, "read1", 5, 0));
  RC(2, poll(p, two, 2000)); // __poll_chk
  MASK("revents[0]", p[0].revents, POLLIN);
  MASK("revents[1]", p[1].revents, POLLOUT);
  wait_avail(b, 5);
  RC(5, read(b, buf, n)); // __read_chk
  CHECK(memcmp(buf, "read1", 5) == 0);
  RC(5, send(a, "recv2", 5, 0));
  wait_avail(b, 5);
  RC(5, recv(b, buf, n, MSG_PEEK)); // __recv_chk
  RC(5, recv(b, buf, n, 0));
  CHECK(memcmp(buf, "recv2", 5) == 0);
  ERR(EAGAIN, recv(b, buf, n, MSG_DONTWAIT));
  RC(5, send(a, "from3", 5, 0));
  struct timespec ts = {2, 0};
  RC(1, ppoll(p, one, &ts, NULL)); // __ppoll_chk
  wait_avail(b, 5);
  struct sockaddr_in from;
  socklen_t flen = sizeof from;
  RC(5, recvfrom(b, buf, n, 0, (struct sockaddr*)&from, &flen)); // __recvfrom_chk
  CHECK(memcmp(buf, "from3", 5) == 0);
  // UDP: recvfrom reports the sender
  struct sockaddr_in ua = {.sin_family = AF_INET}, ub = ua;
  ua.sin_addr.s_addr = ub.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int u1 = OK(socket(AF_INET, SOCK_DGRAM, 0)), u2 = OK(socket(AF_INET, SOCK_DGRAM, 0));
  RC(0, bind(u1, (struct sockaddr*)&ua, sizeof ua));
  RC(0, bind(u2, (struct sockaddr*)&ub, sizeof ub));
  REQUIRE(getsockname(u1, (struct sockaddr*)&ua, &(socklen_t){sizeof ua}) == 0);
  REQUIRE(getsockname(u2, (struct sockaddr*)&ub, &(socklen_t){sizeof ub}) == 0);
  RC(4, sendto(u1, "dgrm", 4, 0, (struct sockaddr*)&ub, sizeof ub));
  REQUIRE(wait_ready(u2, POLLIN, 2000) & POLLIN);
  flen = sizeof from;
  RC(4, recvfrom(u2, buf, n, 0, (struct sockaddr*)&from, &flen));
  CHECK(flen == sizeof from && from.sin_port == ua.sin_port);
  // EOF through the fortified entry points
  RC(0, shutdown(a, SHUT_WR));
  RC(1, poll(p, one, 2000));
  RC(0, read(b, buf, n));
  RC(0, recv(b, buf, n, 0));
  RC(0, recvfrom(b, buf, n, 0, NULL, NULL));
  int fds[] = {a, b, u1, u2};
  for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
    RC(0, close(fds[i]));
}

// Each call asks for more than its buffer holds: glibc aborts before any
// system call ("*** buffer overflow detected ***").
static void fortify_overflow_aborts(void) {
  static const char* const names[] = {"read", "recv", "recvfrom", "poll", "ppoll"};
  for (int which = 0; which < 5; which++) {
    int a, b;
    tcp_pair(&a, &b);
    REQUIRE(send(a, "0123456789", 10, 0) == 10);
    wait_avail(b, 10);
    fflush(stdout);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      if (!freopen("/dev/null", "w", stderr)) _exit(5);
      struct rlimit no_core = {0, 0};
      setrlimit(RLIMIT_CORE, &no_core);
      char buf[64];
      struct pollfd p[2] = {{.fd = b, .events = POLLIN}, {.fd = a, .events = POLLOUT}};
      long r = -2;
      switch (which) {
      case 0:
        r = read(b, buf, len128);
        break;
      case 1:
        r = recv(b, buf, len128, 0);
        break;
      case 2:
        r = recvfrom(b, buf, len128, 0, NULL, NULL);
        break;
      case 3:
        r = poll(p, three, 0);
        break;
      case 4:
        r = ppoll(p, three, &(struct timespec){0, 0}, NULL);
        break;
      }
      _exit(r >= 0 ? 3 : 4);
    }
    int st;
    REQUIRE(waitpid(pid, &st, 0) == pid);
    if (WIFSIGNALED(st))
      say("%s past the buffer: killed by %s", names[which], signame(WTERMSIG(st)));
    else
      say("%s past the buffer: exit %d (no overflow check)", names[which], WEXITSTATUS(st));
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
    RC(0, close(a));
    RC(0, close(b));
  }
}

const struct sem_case sem_fortify_cases[] = {
    {"fortified_calls", fortified_calls},
    {"fortify_overflow_aborts", fortify_overflow_aborts},
    {NULL, NULL},
};

int main(int argc, char** argv) {
  static const struct sem_case* const groups[] = {sem_fortify_cases, NULL};
  return sem_main(argc, argv, groups);
}
