// common/fork_parts.h: what a fork's prepare handler did is the forking
// thread's own (since glibc 2.36 two threads' forks may run their handlers
// at the same time).
#include "common/fork_parts.h"

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace xp;

TEST_CASE("fork parts: a prepare handler's mark belongs to the thread that forks") {
  // Thread A prepared the engine; thread B's fork ran its prepare too. A's
  // parent handler taking its mark must leave B's: otherwise B's parent
  // handler skips what its prepare handler began.
  fork_parts::set_prepared(fork_parts::kEngine);
  bool other_took = true, other_had = false;
  std::thread b([&] {
    fork_parts::set_prepared(fork_parts::kEngine);
    std::thread a_parent([&] { other_took = fork_parts::take_prepared(fork_parts::kEngine); });
    a_parent.join();
    other_had = fork_parts::take_prepared(fork_parts::kEngine);
  });
  b.join();
  CHECK_FALSE(other_took); // a thread that prepared nothing takes nothing
  CHECK(other_had);
  CHECK(fork_parts::take_prepared(fork_parts::kEngine));
  CHECK_FALSE(fork_parts::take_prepared(fork_parts::kEngine)); // taken once
}

TEST_CASE("fork parts: a fork child inherits the forking thread's marks") {
  fork_parts::set_prepared(fork_parts::kStats);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) _exit(fork_parts::take_prepared(fork_parts::kStats) ? 0 : 1);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(fork_parts::take_prepared(fork_parts::kStats));
}
