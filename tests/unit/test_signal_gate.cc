// The blocked data calls' sleep (stream/signal_gate.h): a signal that comes
// between a call's last check and its sleep still ends the sleep with EINTR,
// as the kernel's blocked call would end.
#include <doctest/doctest.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <ctime>
#include <poll.h>
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
  CHECK(!signals_restart());
  {
    SignalGate gate;
    gate.hold(); // the call's first sleep: then it checks its state again
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
