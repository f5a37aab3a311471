// A fork child's claim of an accepted connection, the engine side
// (docs/protocol.md §7 "A fork child that holds an accepted connection",
// stream/fork_handover.h): what the fork child handler does with the
// connections it keeps (no allocation; the parent's claim references),
// and the engine tick that follows a claim (tick_claims: its back-off, its
// deadline, and what it does once the socket is the child's alone).  The
// engine's tables driven by hand as its thread would (as
// test_attach_lost.cc); engine::on_fork_child runs only in real fork
// children of this test, whose tables it empties.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <new>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "preload/epoll_state.h"
#include "resume_pair.h"
#include "stream/engine.h"
#include "stream/engine_internal.h"
#include "stream/fork_handover.h"

// Allocations made by the thread that armed the count (operator new is
// what the library's containers and `new` use).  Replaces the global
// operator new of this test binary; counting is off unless armed.  (Its
// operator delete frees what its operator new took from malloc, which GCC's
// heuristic takes for a mismatch.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {
thread_local bool t_count = false;
thread_local int t_allocs = 0;
void* counted(size_t n, size_t align) {
  if (t_count) ++t_allocs;
  if (n == 0) n = 1;
  if (align <= alignof(std::max_align_t)) return std::malloc(n);
  return std::aligned_alloc(align, (n + align - 1) / align * align);
}
void* counted_or_throw(size_t n, size_t align) {
  void* p = counted(n, align);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
} // namespace

void* operator new(size_t n) {
  return counted_or_throw(n, 0);
}
void* operator new[](size_t n) {
  return counted_or_throw(n, 0);
}
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  return counted(n, 0);
}
void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  return counted(n, 0);
}
void* operator new(size_t n, std::align_val_t a) {
  return counted_or_throw(n, static_cast<size_t>(a));
}
void* operator new[](size_t n, std::align_val_t a) {
  return counted_or_throw(n, static_cast<size_t>(a));
}
void* operator new(size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return counted(n, static_cast<size_t>(a));
}
void* operator new[](size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return counted(n, static_cast<size_t>(a));
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, size_t, std::align_val_t) noexcept {
  std::free(p);
}
#pragma GCC diagnostic pop

using namespace xp;
using namespace xp::stream;

namespace {

// An accepted connection of a listening socket with rendezvous state,
// still upgrading with nothing switched (what a fork child may claim).
struct Accepted {
  int fds[2];
  int lfd = -1;
  Conn* c = nullptr;
  // tcp: a loopback TCP connection (the kernel's byte counts exist).
  explicit Accepted(bool tcp) {
    if (tcp)
      test::tcp_loopback_pair(fds);
    else
      REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    lfd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(listen(lfd, 1) == 0);
    c = new Conn(fds[1], test::rparams(recover::Role::server, 9));
    c->rv.share = engine::on_listen(lfd);
    REQUIRE(c->rv.share != nullptr);
    REQUIRE(c->sess.can_hand_over());
  }
  ~Accepted() {
    c->unref();
    close(fds[0]);
    close(fds[1]);
    close(lfd);
  }
};

// As the engine's table has it (its own reference).
void add_to_table(Conn* c) {
  std::lock_guard<std::mutex> l(engine::g().mu);
  c->ref();
  engine::g().conns.add(c);
}

// As claim_start once the child's engine runs.
void claim(Conn* c, uint64_t now) {
  std::lock_guard<std::mutex> l(engine::g().mu);
  c->at_fork.claim.store(true);
  engine::follow_claim(c, now);
}

// Runs fn in a fork child of this test; its exit code is fn's.
template <typename Fn> int in_child(Fn fn) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    alarm(10);
    _exit(fn());
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status);
}

// A process other than this one that holds fd's socket until released.
struct OtherHolder {
  pid_t pid = -1;
  int go[2];
  explicit OtherHolder(int fd) {
    REQUIRE(pipe(go) == 0);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      (void)fd; // inherited, kept open
      close(go[1]);
      char b;
      (void)!read(go[0], &b, 1);
      _exit(0);
    }
    close(go[0]);
  }
  ~OtherHolder() {
    close(go[1]);
    waitpid(pid, nullptr, 0);
  }
};

bool claimed(Conn* c) {
  // tick_claims' list is internal: a claimed connection holds its reference.
  return c->ref_count() > 1;
}

} // namespace

TEST_CASE("fork claim: a kept connection's link in a parent's channel is the child's to reuse") {
  // A server connection bound on a channel before the fork (the client's
  // rdma_cm request was answered at accept()) that the child keeps: the
  // channel is the parent's, so the child's first channel must be able to
  // take the connection (its link in the parent's channel table is made
  // anew, never left pointing into the parent's list).
  Accepted k(false);
  ChannelConns parents; // stands in for the channel's table in the parent
  add_to_table(k.c);
  parents.add(k.c);
  k.c->at_fork.counts = true;
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ChannelConns childs;
    childs.add(k.c); // asserted (abort) while the link still named the parent's list
    const bool ok = childs.size() == 1 && k.c->at_fork.claim.load();
    childs.remove(k.c);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  parents.remove(k.c);
  engine::on_close(k.c);
}

TEST_CASE("fork claim: the fork child handlers allocate nothing") {
  // After fork() in a multithreaded parent only async-signal-safe work is
  // sure to be safe: the child handler must neither allocate a list of the
  // connections it keeps nor make its tables on first use.  The count runs
  // across a real fork(): this binary's fork handlers (preload/lifecycle.cc
  // registers them) run in the child on the table as this process has it,
  // and so do preload/epoll_state.cc's (named here so that the linker
  // takes that file, and its handler, from the library archive).
  (void)epoll::has_orphans();
  Accepted k(false), other(false), stays(false);
  other.c->phase.store(Phase::tcp); // not claimable: dropped from the child's table
  // Upgrading but not claimable (no counts at the fork): to TCP in the child.
  stays.c->at_fork.counts = false;
  add_to_table(other.c);
  add_to_table(stays.c);
  add_to_table(k.c);
  k.c->at_fork.counts = true; // as before_fork found (a socketpair has no TCP counts)
  t_allocs = 0;
  t_count = true;
  const pid_t pid = fork();
  t_count = false;
  REQUIRE(pid >= 0);
  if (pid == 0) {
    auto& conns = engine::g().conns;
    const bool kept = conns.size() == 1 && conns.front() == k.c && k.c->at_fork.claim.load() &&
                      stays.c->phase.load() == Phase::tcp &&
                      stays.c->reason == Reason::shared_by_fork;
    _exit(t_allocs == 0 && kept ? 0 : 1 + std::min(t_allocs, 100));
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  for (Accepted* a : {&k, &other, &stays})
    engine::on_close(a->c);
}

TEST_CASE("fork claim: a fork child of a child that claimed keeps no reference of the claim") {
  // The child claimed (engine started, the connection in its claims with a
  // reference) and forks again before the socket was its alone: the
  // grandchild keeps the connection and claims it anew.  The child's
  // claim reference is a copy in the grandchild that nobody else drops.
  Accepted k(false);
  CHECK(in_child([&] {
          add_to_table(k.c);
          k.c->at_fork.counts = true;
          claim(k.c, 1000); // in the child
          if (k.c->ref_count() != 3) return 1;
          engine::on_fork_child(); // the grandchild
          if (engine::g().conns.size() != 1 || !k.c->at_fork.claim.load()) return 2;
          // The program's reference (the fd's record) and the table's.
          if (k.c->ref_count() != 2) return 3;
          claim(k.c, 2000);
          engine::on_close(k.c);
          engine::tick_claims(3000); // closed: the claim lets go
          return k.c->ref_count() == 1 ? 0 : 4;
        }) == 0);
}

TEST_CASE("fork claim: while another process holds the socket, re-checks back off to the "
          "deadline") {
  Accepted k(false);
  k.c->at_fork.counts = true;
  OtherHolder h(k.fds[1]);
  const uint64_t t0 = 100000;
  claim(k.c, t0);
  REQUIRE(claimed(k.c));
  const uint64_t deadline = k.c->deadline_ms;
  CHECK(deadline == t0 + 2 * engine::g().p.handshake_timeout_ms);
  // At once, then 5 ms doubling up to 200 ms (docs/protocol.md §7).
  uint64_t now = t0;
  const uint32_t want[] = {5, 10, 20, 40, 80, 160, 200, 200};
  for (uint32_t d : want) {
    engine::tick_claims(now);
    CHECK(k.c->at_fork.claim_delay_ms == d);
    CHECK(k.c->at_fork.claim_next_ms == now + d);
    CHECK(k.c->phase.load() == Phase::upgrading);
    // Not asked again before it is due.
    engine::tick_claims(now + d - 1);
    CHECK(k.c->at_fork.claim_delay_ms == d);
    now += d;
  }
  CHECK(claimed(k.c));
  // Due, short of the deadline: still waiting.
  now = deadline - 1;
  engine::tick_claims(now);
  CHECK(k.c->phase.load() == Phase::upgrading);
  CHECK(claimed(k.c));
  // At the deadline (the next check is due by then): on TCP, claim let go.
  engine::tick_claims(deadline + 200);
  CHECK(k.c->phase.load() == Phase::tcp);
  CHECK(k.c->reason == Reason::shared_by_fork);
  CHECK_FALSE(claimed(k.c));
}

TEST_CASE("fork claim: a claim whose connection closed or left the upgrade is let go at the next "
          "tick") {
  Accepted a(false), b(false);
  claim(a.c, 0);
  claim(b.c, 0);
  // Not yet due (a later check): let go all the same.
  a.c->at_fork.claim_next_ms = b.c->at_fork.claim_next_ms = 1u << 30;
  a.c->closed.store(true);
  b.c->phase.store(Phase::tcp);
  engine::tick_claims(10);
  CHECK_FALSE(claimed(a.c));
  CHECK_FALSE(claimed(b.c));
  CHECK(b.c->reason == Reason::none); // nothing more said about it
}

TEST_CASE("fork claim: alone, but the kernel's counts differ from the session's: stays on TCP") {
  // Once no other process holds the socket, bytes read or written by
  // another process since the fork (or counts that cannot be read, as a
  // socketpair's) keep it on TCP: never two readers of one stream.
  Accepted k(false);
  k.c->at_fork.counts = true;
  claim(k.c, 0);
  engine::tick_claims(0);
  CHECK(k.c->phase.load() == Phase::tcp);
  CHECK(k.c->reason == Reason::shared_by_fork);
  CHECK_FALSE(claimed(k.c));
}

TEST_CASE("fork claim: alone with matching counts: published, then no longer followed") {
  Accepted k(true);
  // The rendezvous owner is this process: publishing asks no rdma_cm.
  k.c->rv.share->owner_pid.store(getpid());
  {
    std::lock_guard<std::mutex> l(k.c->mu);
    engine::note_fork_counts(k.c); // as before_fork
  }
  REQUIRE(k.c->at_fork.counts);
  add_to_table(k.c);
  claim(k.c, 0);
  k.c->rv.slot_written = true; // as keep_for_claim: not published before it is ours alone
  {
    OtherHolder h(k.fds[1]);
    engine::tick_claims(0);
    CHECK(k.c->rv.slot_written);
    CHECK(k.c->at_fork.claim_next_ms == 5);
  }
  // The other process exited: alone, and nobody used the socket since.
  engine::tick_claims(5);
  CHECK(k.c->phase.load() == Phase::upgrading);
  // Published in the listening socket's table, as a sibling worker's.
  CHECK(k.c->rv.slot_written);
  int mine = 0;
  for (auto& sl : k.c->rv.share->slots)
    mine += (sl.state.load() & 3) == ListenShare::kValid && sl.pid == getpid();
  CHECK(mine == 1);
  CHECK(k.c->ref_count() == 2); // the program's and the table's: the claim let go
  engine::on_close(k.c);
  std::lock_guard<std::mutex> l(engine::g().mu);
  auto& v = engine::g().shares; // serve_share's: no later test looks at it
  v.erase(std::remove(v.begin(), v.end(), k.c->rv.share), v.end());
}
