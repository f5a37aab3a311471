// The blocked data calls' sleep (stream/signal_gate.h): a signal that comes
// between a call's last check and its sleep still ends the sleep with EINTR,
// as the kernel's blocked call would end.
#include <doctest/doctest.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <ctime>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include "stream/signal_gate.h"

using namespace xp::stream;

namespace {
std::atomic<int> g_handled{0};
void on_usr1(int) {
  g_handled.fetch_add(1);
}
uint64_t ms_now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}
} // namespace

TEST_CASE("signal gate: a signal between the last check and the sleep ends the sleep") {
  struct sigaction sa {
  }, old{};
  sa.sa_handler = on_usr1; // no SA_RESTART: the kernel's recv would say EINTR
  sigemptyset(&sa.sa_mask);
  REQUIRE(sigaction(SIGUSR1, &sa, &old) == 0);
  int pipefd[2];
  REQUIRE(pipe(pipefd) == 0);
  g_handled = 0;
  {
    SignalGate gate;
    gate.hold(); // the call's first sleep: then it checks its state again
    CHECK(!gate.restarts());
    // The signal comes after that check, before the sleep.
    REQUIRE(kill(getpid(), SIGUSR1) == 0);
    CHECK(g_handled.load() == 0); // held: not run in user space, not lost
    pollfd p{pipefd[0], POLLIN, 0};
    uint64_t t0 = ms_now();
    long r = gate.sleep(&p, 1, 2000);
    int err = errno;
    CHECK(r == -1);
    CHECK(err == EINTR);
    CHECK(ms_now() - t0 < 1000); // at once, not at the timeout
    CHECK(g_handled.load() == 1);
  }
  // The call's mask is back: a signal runs its handler at once again.
  REQUIRE(kill(getpid(), SIGUSR1) == 0);
  CHECK(g_handled.load() == 2);
  close(pipefd[0]);
  close(pipefd[1]);
  sigaction(SIGUSR1, &old, nullptr);
}

TEST_CASE("signal gate: faults are never held") {
  SignalGate gate;
  gate.hold();
  sigset_t now;
  pthread_sigmask(SIG_SETMASK, nullptr, &now);
  CHECK(sigismember(&now, SIGUSR1) == 1);
  CHECK(sigismember(&now, SIGSEGV) == 0);
}

namespace {
void crash_handler(int) {}
// The thread's mask with every signal but SIGUSR1 and the faults blocked:
// handlers of the test framework's own (SIGINT, SIGTERM...) then cannot
// interrupt the sleep and do not count.
struct OnlyUsr1 {
  sigset_t old;
  OnlyUsr1() {
    sigset_t m;
    sigfillset(&m);
    for (int s : {SIGUSR1, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS})
      sigdelset(&m, s);
    pthread_sigmask(SIG_SETMASK, &m, &old);
  }
  ~OnlyUsr1() { pthread_sigmask(SIG_SETMASK, &old, nullptr); }
};
} // namespace

TEST_CASE("signal gate: the kernel's restart rule for an interrupted sleep") {
  struct sigaction usr1 {
  }, segv{}, old_usr1{}, old_segv{};
  usr1.sa_handler = on_usr1;
  usr1.sa_flags = SA_RESTART;
  sigemptyset(&usr1.sa_mask);
  // A crash handler without SA_RESTART (Python's faulthandler, a JVM's):
  // faults interrupt no sleep, so it must not turn restarts into EINTR.
  segv.sa_handler = crash_handler;
  segv.sa_flags = SA_ONSTACK;
  sigemptyset(&segv.sa_mask);
  REQUIRE(sigaction(SIGUSR1, &usr1, &old_usr1) == 0);
  REQUIRE(sigaction(SIGSEGV, &segv, &old_segv) == 0);
  int pipefd[2];
  REQUIRE(pipe(pipefd) == 0);
  pollfd p{pipefd[0], POLLIN, 0};
  {
    OnlyUsr1 mask;
    g_handled = 0;
    SUBCASE("no socket timeout: the call restarts, as the kernel's recv") {
      SignalGate gate;
      gate.hold();
      CHECK(gate.restarts());
      REQUIRE(pthread_kill(pthread_self(), SIGUSR1) == 0);
      uint64_t t0 = ms_now();
      errno = 0;
      long r = gate.sleep_call(&p, 1, 2000, false);
      CHECK(r == 0); // the caller re-checks and sleeps again
      CHECK(ms_now() - t0 < 1000);
      CHECK(g_handled.load() == 1);
    }
    SUBCASE("with a socket timeout: EINTR even under SA_RESTART") {
      SignalGate gate;
      gate.hold();
      REQUIRE(pthread_kill(pthread_self(), SIGUSR1) == 0);
      long r = gate.sleep_call(&p, 1, 2000, true);
      int err = errno;
      CHECK(r == -1);
      CHECK(err == EINTR);
      CHECK(g_handled.load() == 1);
    }
    SUBCASE("a handler without SA_RESTART: EINTR") {
      struct sigaction plain = usr1;
      plain.sa_flags = 0;
      REQUIRE(sigaction(SIGUSR1, &plain, nullptr) == 0);
      SignalGate gate;
      gate.hold();
      CHECK(!gate.restarts());
      REQUIRE(pthread_kill(pthread_self(), SIGUSR1) == 0);
      long r = gate.sleep_call(&p, 1, 2000, false);
      int err = errno;
      CHECK(r == -1);
      CHECK(err == EINTR);
    }
    SUBCASE("a signal the call's own mask blocks does not count") {
      struct sigaction plain = usr1;
      plain.sa_flags = 0;
      REQUIRE(sigaction(SIGUSR2, &plain, nullptr) == 0); // blocked by OnlyUsr1
      SignalGate gate;
      gate.hold();
      CHECK(gate.restarts());
      signal(SIGUSR2, SIG_DFL);
    }
  }
  close(pipefd[0]);
  close(pipefd[1]);
  sigaction(SIGSEGV, &old_segv, nullptr);
  sigaction(SIGUSR1, &old_usr1, nullptr);
}

TEST_CASE("signal gate: the sleep's timeout follows the call's deadline") {
  int t = 0;
  CHECK(sleep_timeout(-1, 1000, -1, &t));
  CHECK(t == -1); // no deadline, no cap: sleep until woken
  CHECK(sleep_timeout(-1, 1000, 100, &t));
  CHECK(t == 100);
  CHECK(sleep_timeout(1050, 1000, 100, &t));
  CHECK(t == 50);
  CHECK(sleep_timeout(5000, 1000, -1, &t));
  CHECK(t == 4000);
  CHECK(!sleep_timeout(1000, 1000, 100, &t)); // at the deadline: the timeout
}
