// A thread's wake state (stream/wake.cc) in a fork child.
#include <doctest/doctest.h>

#include <cerrno>
#include <cstdint>
#include <sys/wait.h>
#include <unistd.h>

#include "stream/wake.h"

using namespace xp::stream;

TEST_CASE("wake: a fork child does not share the forking thread's eventfd") {
  static int key;
  int pfd = wake::thread_fd();
  REQUIRE(pfd >= 0);
  REQUIRE(wake::add(pfd, &key)); // installs the fork handler
  wake::remove(pfd);
  wake::drain(pfd);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int cfd = wake::thread_fd();
    uint64_t one = 1;
    _exit(cfd >= 0 && write(cfd, &one, sizeof one) == sizeof one ? 0 : 1);
  }
  int st = 0;
  REQUIRE(waitpid(pid, &st, 0) == pid);
  CHECK(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  uint64_t v = 0;
  CHECK(read(pfd, &v, sizeof v) == -1); // the child's wake-up is not ours
  CHECK(errno == EAGAIN);
}
