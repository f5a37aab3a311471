// A fork child's own librdmacm (verbs/rdma_lib.h fresh_rdmacm_if_asked,
// docs/protocol.md §7 "A fork child that holds an accepted connection"):
// a copy that cannot be made is said once, with why, and the table in use
// stays the inherited one; a child whose rdma_cm event channel cannot be
// made says so, with why its connection stays on TCP.
#include <doctest/doctest.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "common/logsink.h"
#include "verbs/cm.h"
#include "verbs/device.h"
#include "verbs/rdma_lib.h"

using namespace xp;

namespace {

std::vector<std::string> g_lines;
void keep_line(int, const char* fmt, va_list ap) {
  char b[1024];
  vsnprintf(b, sizeof b, fmt, ap);
  g_lines.emplace_back(b);
}

// Lines logged (info and above) while it lives.
struct LogCapture {
  logsink::Writer w = logsink::g_writer.load();
  int level = logsink::g_level.load();
  LogCapture() {
    g_lines.clear();
    logsink::install(keep_line, XP_SLOG_INFO);
  }
  ~LogCapture() { logsink::install(w, level); }
  int count(const char* s) const {
    int n = 0;
    for (const auto& l : g_lines)
      n += l.find(s) != std::string::npos;
    return n;
  }
};

} // namespace

TEST_CASE("fresh librdmacm: a copy that cannot be made is said once, with why") {
  const auto before = verbs::detail::rdmacm().create_id;
  {
    LogCapture log;
    CHECK_FALSE(verbs::detail::fresh_rdmacm_from("/nonexistent/librdmacm.so.1"));
    CHECK(g_lines.size() == 1);
    CHECK(log.count("no private copy of librdmacm (open /nonexistent/librdmacm.so.1: No such "
                    "file or directory): the inherited copy serves") == 1);
  }
  {
    // Not a library: the loader's own reason.
    char path[] = "/tmp/xpress-not-elf-XXXXXX";
    const int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, "not an ELF file\n", 16) == 16);
    close(fd);
    LogCapture log;
    CHECK_FALSE(verbs::detail::fresh_rdmacm_from(path));
    unlink(path);
    CHECK(g_lines.size() == 1);
    CHECK(log.count("dlopen of the copy of") == 1);
    CHECK(log.count("the inherited copy serves") == 1);
  }
  // Nothing half-replaced.
  CHECK((verbs::detail::rdmacm().create_id == before));
}

TEST_CASE("fresh librdmacm: a fork child without an rdma_cm event channel says why its "
          "connection stays on TCP") {
  // Where rdma-core is installed but no RDMA device is there (the unit
  // tests' usual host), the child's event channel cannot be made.  In a
  // fork child of the test: rdma-core stays unloaded here.
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    alarm(10);
    if (!verbs::detail::rdma_loaded()) _exit(3); // no rdma-core: nothing to see
    LogCapture log;
    verbs::fresh_cm_for_fork_child();
    verbs::Cm* cm = verbs::Cm::create();
    if (cm != nullptr) _exit(2); // a device here: the channel exists
    const int said = log.count("no rdma_cm event channel (") +
                     log.count("the accepted connection it would upgrade stays on TCP");
    // Asked once: a second start says nothing more.
    g_lines.clear();
    verbs::Cm* again = verbs::Cm::create();
    _exit(said == 2 && again == nullptr && g_lines.empty() ? 0 : 1);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  if (WEXITSTATUS(status) >= 2) {
    MESSAGE("skipped: ", WEXITSTATUS(status) == 3 ? "no rdma-core" : "an RDMA device here");
    return;
  }
  CHECK(WEXITSTATUS(status) == 0);
}
