// Lock rules checked (common/lock_check.h): a function's "X held" is an
// assertion in the checked builds (the sanitizer unit run, the test
// library), which names the lock and the place when broken.
#include <doctest/doctest.h>

#include <csignal>
#include <cstring>
#include <mutex>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "common/lock_check.h"

TEST_CASE("lock check: knows whether this thread holds a mutex") {
  std::mutex m;
  CHECK(!xp::held_by_this_thread(m));
  {
    std::lock_guard<std::mutex> g(m);
    CHECK(xp::held_by_this_thread(m));
    bool other = true;
    std::thread t([&] { other = xp::held_by_this_thread(m); });
    t.join();
    CHECK(!other); // held, but not by that thread
  }
  CHECK(!xp::held_by_this_thread(m));
  CHECK(xp::lock_owner(m) == 0);
}

#if XP_CHECKED
TEST_CASE("lock check: a broken rule aborts with the lock's name and place") {
  int p[2];
  REQUIRE(pipe(p) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    signal(SIGABRT, SIG_DFL); // not the test framework's crash report
    dup2(p[1], 2);
    std::mutex state_mu;
    XP_ASSERT_HELD(state_mu); // not held: aborts
    _exit(0);
  }
  close(p[1]);
  char buf[512] = {};
  size_t got = 0;
  ssize_t n;
  while ((n = read(p[0], buf + got, sizeof buf - 1 - got)) > 0)
    got += static_cast<size_t>(n);
  close(p[0]);
  int st = 0;
  REQUIRE(waitpid(pid, &st, 0) == pid);
  CHECK(WIFSIGNALED(st));
  CHECK(WTERMSIG(st) == SIGABRT);
  CHECK(strstr(buf, "lock rule broken: state_mu held") != nullptr);
  CHECK(strstr(buf, "test_lock_check.cc") != nullptr);
}
#endif
