// Who else holds a socket after a fork (stream/fork_share.h), with real
// processes: a child that exits (reaped or not), closes its copy, execs
// with and without close-on-exec, passes the socket to a grandchild, or
// goes on holding it.  A socket is reported once no other process holds it,
// and never while one does.
#include <doctest/doctest.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "stream/fork_share.h"

using namespace xp::stream;

namespace {

struct Pair {
  int fd[2] = {-1, -1};
  Pair() { REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, fd) == 0); }
  ~Pair() {
    for (int f : fd)
      if (f >= 0) close(f);
  }
  uint64_t ino() const { return fork_share::socket_inode(fd[0]); }
};

// A child that waits for a byte on `go` (or its end), then runs `body`.
template <typename F> pid_t spawn(int go_rd, int go_wr, F body) {
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(go_wr);
    char b;
    (void)!read(go_rd, &b, 1);
    body();
    _exit(0);
  }
  return pid;
}

// Polls (each call past the back-off, as if time passed) until `want`
// inodes were reported or ~5 s passed.
std::vector<uint64_t> poll_until(fork_share::Watch& w, size_t want, uint64_t* now) {
  std::vector<uint64_t> got;
  for (int i = 0; i < 250 && got.size() < want; ++i) {
    *now += fork_share::Watch::kMaxRecheckMs;
    auto r = w.poll(*now);
    got.insert(got.end(), r.begin(), r.end());
    if (got.size() < want) usleep(20000);
  }
  return got;
}

void reap(pid_t pid) {
  int st;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
}

} // namespace

TEST_CASE("fork_share: the inode of a socket, and nothing for a non-socket") {
  Pair p;
  CHECK(p.ino() != 0);
  CHECK(fork_share::socket_inode(p.fd[1]) != p.ino());
  int pipefd[2];
  REQUIRE(pipe(pipefd) == 0);
  CHECK(fork_share::socket_inode(pipefd[0]) == 0);
  close(pipefd[0]);
  close(pipefd[1]);
}

TEST_CASE("fork_share: a child that exits lets go, reaped or not; never while it lives") {
  Pair p;
  int go[2];
  REQUIRE(pipe(go) == 0);
  pid_t child = spawn(go[0], go[1], [] {});
  close(go[0]);
  fork_share::Watch w;
  uint64_t now = 1000;
  w.add_fork({p.ino()}, fork_share::boot_ticks(), now);
  w.add_holder(child);
  // The child holds the socket: re-checks find it, however often.
  for (int i = 0; i < 3; ++i) {
    now += fork_share::Watch::kMaxRecheckMs;
    CHECK(w.poll(now).empty());
  }
  CHECK(w.scans() == 3);
  // A poll before the back-off with no exit does not scan.
  CHECK(w.poll(now).empty());
  CHECK(w.scans() == 3);
  // The child exits and stays a zombie (nobody reaps it yet): its exit is
  // seen by its pidfd at the next poll, without waiting for the back-off.
  close(go[1]);
  bool seen = false;
  for (int i = 0; i < 250 && !seen; ++i) {
    auto r = w.poll(now);
    if (!r.empty()) {
      CHECK(r.size() == 1);
      CHECK(r[0] == p.ino());
      seen = true;
    } else {
      usleep(20000);
    }
  }
  CHECK(seen);
  CHECK(w.empty());
  reap(child);
}

TEST_CASE("fork_share: a child that closes its copy and lives on lets go at the re-check") {
  Pair p;
  int go[2], done[2];
  REQUIRE(pipe(go) == 0);
  REQUIRE(pipe(done) == 0);
  const int keep = p.fd[0];
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(go[1]);
    close(done[0]);
    char b;
    (void)!read(go[0], &b, 1);
    close(keep);
    (void)!write(done[1], "x", 1);
    pause();
    _exit(0);
  }
  close(go[0]);
  close(done[1]);
  fork_share::Watch w;
  uint64_t now = 1000;
  w.add_fork({p.ino()}, fork_share::boot_ticks(), now);
  w.add_holder(child);
  now += fork_share::Watch::kMaxRecheckMs;
  CHECK(w.poll(now).empty()); // the child still holds it (and fd[1]'s peer is ours)
  REQUIRE(write(go[1], "x", 1) == 1);
  char b;
  REQUIRE(read(done[0], &b, 1) == 1);
  // The child also holds fd[1], a different socket: only fd[0] is watched.
  auto r = poll_until(w, 1, &now);
  CHECK(r.size() == 1);
  kill(child, SIGKILL);
  reap(child);
  close(go[1]);
  close(done[0]);
}

TEST_CASE("fork_share: an exec'd child holds the socket unless it was close-on-exec") {
  for (bool cloexec : {false, true}) {
    CAPTURE(cloexec);
    Pair p;
    if (cloexec) REQUIRE(fcntl(p.fd[0], F_SETFD, FD_CLOEXEC) == 0);
    int go[2], execd[2];
    REQUIRE(pipe(go) == 0);
    REQUIRE(pipe2(execd, O_CLOEXEC) == 0);
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      close(go[1]);
      close(execd[0]);
      char b;
      (void)!read(go[0], &b, 1);
      // sleep keeps the pid: an exec is not an exit.
      execl("/bin/sleep", "sleep", "1.5", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(go[0]);
    close(execd[1]);
    fork_share::Watch w;
    uint64_t now = 1000;
    w.add_fork({p.ino()}, fork_share::boot_ticks(), now);
    w.add_holder(child);
    REQUIRE(write(go[1], "x", 1) == 1);
    char b;
    CHECK(read(execd[0], &b, 1) == 0); // the exec closed the pipe's copy
    now += fork_share::Watch::kMaxRecheckMs;
    auto r = w.poll(now);
    if (cloexec) {
      CHECK(r.size() == 1); // released while sleep still runs
    } else {
      CHECK(r.empty()); // sleep holds it until it exits
      r = poll_until(w, 1, &now);
      CHECK(r.size() == 1);
      int st = 0;
      CHECK(waitpid(child, &st, WNOHANG) == child); // it had exited by then
      child = -1;
    }
    if (child > 0) reap(child);
    close(go[1]);
    close(execd[0]);
  }
}

TEST_CASE("fork_share: a grandchild that inherited the socket keeps it shared after the child") {
  Pair p;
  int go[2], gc_pid[2], release_gc[2];
  REQUIRE(pipe(go) == 0);
  REQUIRE(pipe(gc_pid) == 0);
  REQUIRE(pipe(release_gc) == 0);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(go[1]);
    close(gc_pid[0]);
    close(release_gc[1]);
    pid_t gc = fork();
    if (gc == 0) {
      char b;
      (void)!read(release_gc[0], &b, 1); // holds every inherited fd until told
      _exit(0);
    }
    (void)!write(gc_pid[1], &gc, sizeof gc);
    char b;
    (void)!read(go[0], &b, 1);
    _exit(0); // the grandchild is re-parented, and still holds the socket
  }
  close(go[0]);
  close(gc_pid[1]);
  close(release_gc[0]);
  pid_t gc = -1;
  REQUIRE(read(gc_pid[0], &gc, sizeof gc) == static_cast<ssize_t>(sizeof gc));
  fork_share::Watch w;
  uint64_t now = 1000;
  w.add_fork({p.ino()}, fork_share::boot_ticks(), now);
  w.add_holder(child);
  close(go[1]); // the child exits
  reap(child);
  for (int i = 0; i < 5; ++i) {
    now += fork_share::Watch::kMaxRecheckMs;
    CHECK(w.poll(now).empty());
    usleep(20000);
  }
  // The grandchild lets go; it is not ours to reap (its pidfd still works,
  // and a re-check finds the socket free once it is gone).
  close(release_gc[1]);
  auto r = poll_until(w, 1, &now);
  CHECK(r.size() == 1);
  close(gc_pid[0]);
  (void)gc;
}

TEST_CASE("fork_share: a socket this process closed is no longer watched") {
  Pair p;
  int go[2];
  REQUIRE(pipe(go) == 0);
  pid_t child = spawn(go[0], go[1], [] {});
  close(go[0]);
  fork_share::Watch w;
  w.add_fork({p.ino()}, fork_share::boot_ticks(), 0);
  w.add_holder(child);
  CHECK(!w.empty());
  w.forget(p.ino());
  CHECK(w.empty());
  close(go[1]);
  reap(child);
  CHECK(w.poll(UINT64_MAX / 2).empty());
}

TEST_CASE("fork_share: a scan made without the lock answers only what it asked") {
  // The engine scans /proc between due() and answer() without its lock:
  // a socket closed meanwhile is not reported, one a new fork added
  // meanwhile is not taken as free (nobody was asked about it), and the
  // next scan is due at the first re-check.
  Pair p, q, r;
  fork_share::Watch w;
  uint64_t now = 1000;
  w.add_fork({p.ino(), q.ino()}, fork_share::boot_ticks(), now);
  fork_share::Ask a;
  CHECK_FALSE(w.due(now, &a)); // nobody exited, no re-check due yet
  now += fork_share::Watch::kFirstRecheckMs;
  REQUIRE(w.due(now, &a));
  CHECK(a.inos.size() == 2);
  // Nobody else holds any of them (no child here): the scan finds none.
  const fork_share::Held held = fork_share::holders(a.inos, getpid(), a.since_ticks);
  CHECK(held.empty());
  w.forget(q.ino());                                    // closed during the scan
  w.add_fork({r.ino()}, fork_share::boot_ticks(), now); // a fork during the scan
  auto got = w.answer(a, held, now);
  REQUIRE(got.size() == 1);
  CHECK(got[0] == p.ino());
  CHECK_FALSE(w.empty()); // r is still watched
  CHECK_FALSE(w.due(now + fork_share::Watch::kFirstRecheckMs - 1, &a));
  REQUIRE(w.due(now + fork_share::Watch::kFirstRecheckMs, &a));
  got = w.answer(a, fork_share::holders(a.inos, getpid(), a.since_ticks),
                 now + fork_share::Watch::kFirstRecheckMs);
  REQUIRE(got.size() == 1);
  CHECK(got[0] == r.ino());
  CHECK(w.empty());
}

TEST_CASE("fork_share: a holder's exit wakes the owner's epoll set, once per arming") {
  Pair p;
  int go[2];
  REQUIRE(pipe(go) == 0);
  pid_t child = spawn(go[0], go[1], [] {});
  close(go[0]);
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  REQUIRE(ep >= 0);
  fork_share::Watch w;
  w.set_epoll(ep, 4);
  uint64_t now = 1000;
  w.add_fork({p.ino()}, fork_share::boot_ticks(), now);
  w.add_holder(child);
  epoll_event ev{};
  CHECK(epoll_wait(ep, &ev, 1, 50) == 0); // it lives
  close(go[1]);                           // it exits (not reaped yet)
  REQUIRE(epoll_wait(ep, &ev, 1, 5000) == 1);
  const uint64_t tag = ev.data.u64;
  CHECK(tag == 4);
  CHECK(epoll_wait(ep, &ev, 1, 50) == 0); // one-shot: no busy loop before the poll
  auto r = w.poll(now);                   // no re-check due: the exit alone makes it scan
  REQUIRE(r.size() == 1);
  CHECK(r[0] == p.ino());
  CHECK(w.empty());
  reap(child);
  close(ep);
}

TEST_CASE("fork_share: a fork child's parent that it cannot look into counts as a holder") {
  // A claim (stream/fork_handover.h) must not take "fd table unreadable"
  // for "let go": holders() alone counts an unreadable process only when
  // it started since the fork, and the parent did not.
  const pid_t self = getpid();
  CHECK_FALSE(fork_share::parent_unseen(self)); // not our parent: nothing to say
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    int code = 0;
    if (fork_share::parent_unseen(self)) code |= 1; // readable: the scan saw it
    if (geteuid() == 0) {
      // As a fork-per-connection server's child that drops its user.
      if (setgid(65534) != 0 || setuid(65534) != 0) _exit(8);
      if (!fork_share::parent_unseen(self)) code |= 2;
    }
    _exit(code);
  }
  int st = 0;
  REQUIRE(waitpid(child, &st, 0) == child);
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
}

TEST_CASE("fork_share: /proc/P/stat: a kernel thread started since the fork holds nothing") {
  // A claim waited out its deadline behind a kworker that the rdma_cm's
  // work started meanwhile: its fd table is unreadable to an unprivileged
  // server and it started since the fork, yet it holds no user socket.
  const fork_share::StatInfo kw = fork_share::parse_stat(
      "4711 (kworker/u4:2-ib-comp-unb-wq) I 2 0 0 0 -1 69238880 0 0 0 0 0 1 0 0 20 0 1 0 "
      "98765 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 0 0 0 0 1 0 0 0 0 0\n");
  CHECK(kw.kernel_thread);
  CHECK(kw.start_ticks == 98765);
  // A user process whose name holds ") " counts from the last ')'.
  const fork_share::StatInfo up = fork_share::parse_stat(
      "812 (post) gres: x) S 1 812 812 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 "
      "12345 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n");
  CHECK_FALSE(up.kernel_thread);
  CHECK(up.start_ticks == 12345);
  CHECK(fork_share::parse_stat("9 (z) Z 1 0 0 0 -1 0\n").start_ticks == 0);
  CHECK(fork_share::parse_stat("9 (cut) S 1 0").start_ticks == UINT64_MAX);
  CHECK(fork_share::parse_stat("garbage").start_ticks == UINT64_MAX);
  // This process's own line: not a kernel thread, started before now.
  char buf[512];
  FILE* f = std::fopen("/proc/self/stat", "r");
  REQUIRE(f != nullptr);
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const fork_share::StatInfo me = fork_share::parse_stat(buf);
  CHECK_FALSE(me.kernel_thread);
  CHECK(me.start_ticks <= fork_share::boot_ticks());
}
