// The return of a moved stream after a fork, step 1 (stream/fork_bytes.h,
// docs/protocol.md §7 "The return of a moved stream"): the kernel's byte
// counts name the same switch point at both ends with bytes in flight both
// ways, and they tell, once the child let go, whether it read or wrote a
// byte of the stream (a real fork of a stream moved over the fake link).
#include <doctest/doctest.h>

#include <csignal>
#include <fcntl.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>

#include "resume_pair.h"
#include "stream/fork_bytes.h"
#include "stream/move.h"

using namespace xp;
using namespace xp::test;
using stream::fork_bytes::Kernel;
using stream::fork_bytes::Mark;
using stream::fork_bytes::Use;

namespace {

// Non-blocking writes of n bytes at most (what the kernel took).
uint64_t put(int fd, uint64_t n) {
  std::vector<char> b(16384, 'x');
  uint64_t done = 0;
  while (done < n) {
    ssize_t r = send(fd, b.data(), std::min<uint64_t>(b.size(), n - done), MSG_DONTWAIT);
    if (r <= 0) break;
    done += static_cast<uint64_t>(r);
  }
  return done;
}
uint64_t take(int fd, uint64_t n) {
  std::vector<char> b(16384);
  uint64_t done = 0;
  while (done < n) {
    ssize_t r = recv(fd, b.data(), std::min<uint64_t>(b.size(), n - done), MSG_DONTWAIT);
    if (r <= 0) break;
    done += static_cast<uint64_t>(r);
  }
  return done;
}

Kernel counts(int fd) {
  Kernel k;
  REQUIRE(stream::fork_bytes::kernel(fd, &k));
  return k;
}

} // namespace

TEST_CASE("fork_bytes: both ends name the same switch point, bytes in flight both ways") {
  int fds[2];
  tcp_loopback_pair(fds);
  int v = 64 * 1024;
  for (int fd : fds)
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof v);
  // a fills the connection: bytes queued at a (sent or not) and unread at b.
  const uint64_t aw = put(fds[0], 8u << 20);
  const uint64_t bw = put(fds[1], 30000);
  usleep(20000); // loopback delivers and acknowledges what fits
  const uint64_t br = take(fds[1], 100000);
  const uint64_t ar = take(fds[0], 1000);
  REQUIRE(br > 0);
  REQUIRE(br < aw); // still in flight: a's send queue, b's receive queue
  REQUIRE(ar < bw);
  int outq = 0, inq = 0;
  REQUIRE(ioctl(fds[0], SIOCOUTQ, &outq) == 0);
  REQUIRE(ioctl(fds[1], SIOCINQ, &inq) == 0);
  CHECK(outq > 0);
  CHECK(inq > 0);
  // What each program wrote and read, whatever is still in flight.  The
  // end that connected counts its SYN among what the peer acknowledged
  // (the SYN-ACK advanced its snd_una) on the kernels seen so far.
  const Kernel a = counts(fds[0]), b = counts(fds[1]);
  const uint64_t syn = a.written - aw;
  CHECK(syn <= 1);
  CHECK(a.read == ar);
  CHECK(b.written == bw);
  CHECK(b.read == br);
  // Once drained, each end's read count is the other's written count.
  uint64_t a_got = ar, b_got = br;
  for (int i = 0; i < 2000 && (b_got < aw || a_got < bw); ++i) {
    b_got += take(fds[1], 1 << 20);
    a_got += take(fds[0], 1 << 20);
    usleep(500);
  }
  REQUIRE(b_got == aw);
  REQUIRE(a_got == bw);
  CHECK(counts(fds[1]).read == counts(fds[0]).written - syn);
  CHECK(counts(fds[0]).read == counts(fds[1]).written);
  // A FIN counts a sequence number, not a byte: no answer then.
  shutdown(fds[0], SHUT_WR);
  usleep(20000);
  Kernel k;
  CHECK_FALSE(stream::fork_bytes::kernel(fds[0], &k));
  CHECK_FALSE(stream::fork_bytes::kernel(fds[1], &k));
  close(fds[0]);
  close(fds[1]);
  int up[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, up) == 0);
  CHECK_FALSE(stream::fork_bytes::kernel(up[0], &k)); // not TCP
  close(up[0]);
  close(up[1]);
}

TEST_CASE("fork_bytes: judge compares the kernel's moves with ours") {
  Mark m;
  m.k = {1000, 2000};
  m.app_tx = 500;
  m.app_rx = 700;
  m.held_rx = 50; // read by our program from user space, not from the kernel
  m.valid = true;
  using stream::fork_bytes::judge;
  // We wrote 300 and read 250 (50 of them held): the kernel moved 300 and 200.
  CHECK(judge(m, {1300, 2200}, 800, 950, 0) == Use::alone);
  CHECK(judge(m, {1000, 2000}, 500, 700, 50) == Use::alone); // nothing since
  CHECK(judge(m, {1000, 2000}, 500, 720, 30) == Use::alone); // 20 held ones read
  CHECK(judge(m, {1301, 2200}, 800, 950, 0) == Use::other);  // someone wrote one more
  CHECK(judge(m, {1300, 2201}, 800, 950, 0) == Use::other);  // someone read one more
  CHECK(judge(m, {1300, 2210}, 800, 950, 10) ==
        Use::alone); // 10 held ones left: 210 from the kernel
  CHECK(judge(m, {1300, 2211}, 800, 950, 10) == Use::other);
  CHECK(judge(m, {1300, 2200}, 800, 950, 10) == Use::inconsistent);
  CHECK(judge(m, {1299, 2200}, 800, 950, 0) == Use::inconsistent);
  CHECK(judge(m, {1300, 2200}, 400, 950, 0) == Use::inconsistent); // our counts went back
  CHECK(judge(m, {1300, 2200}, 800, 950, 60) == Use::inconsistent);
  CHECK(judge(m, {999, 2200}, 800, 950, 0) == Use::inconsistent);
}

namespace {

RPair* g_pair = nullptr;
// The program's counts of a's socket, as preload's statistics row has them.
bool pair_counts(int fd, stream::fork_bytes::Ours* out) {
  if (g_pair == nullptr || fd != g_pair->a.c->fd) return false;
  out->tx = g_pair->a.sent;
  out->rx = g_pair->a.got;
  out->begun = out->done = 0; // one thread: no call in flight
  return true;
}

// Writes and reads both ways for a while (no totals: a child may have
// taken or added bytes).
void traffic(RPair& p, unsigned seed, int steps) {
  std::mt19937 rng(seed);
  for (int i = 0; i < steps && !p.a.reset && !p.b.reset; ++i) {
    rput(p.a, 1 + rng() % 20000);
    rput(p.b, 1 + rng() % 20000);
    rtake(p.a, 1 + rng() % 30000, 1);
    rtake(p.b, 1 + rng() % 30000, 0);
    engine_step(p);
  }
}

enum class Child { idle, reads, writes };

// a's stream moves at a "fork" (for_fork, the peer answering) with bytes
// in flight both ways and the peer's bytes over RDMA unread at a; the
// parent marks the counts, forks for real, and the child does `what` with
// the socket; the parent goes on using it meanwhile and after the child
// exited.  What the counts say then.
Use after_child(Child what) {
  stream::engine::g().p.keepalive_ms = 0;
  RPair p(0, true);
  g_pair = &p;
  stream::fork_bytes::set_app_counts(pair_counts);
  rdrive(p, 60000, 91, -1, [] {});
  settle_switches(p);
  rput(p.a, 50000);
  rput(p.b, 50000);
  {
    std::lock_guard<std::mutex> l(stream::engine::g().mu);
    p.a.c->ref(); // the table's (on_close drops it)
    stream::engine::g().conns.add(p.a.c);
  }
  std::atomic<bool> stop{false};
  std::thread peer([&] {
    while (!stop.load()) {
      stream::engine::progress(p.b.ch);
      usleep(100);
    }
  });
  stream::engine::g().forking.store(true);
  stream::move::for_fork();
  stream::engine::g().forking.store(false);
  stop = true;
  peer.join();
  REQUIRE(p.a.c->rs != nullptr);
  REQUIRE(p.a.c->rs->moved);
  Mark mark;
  {
    std::lock_guard<std::mutex> g(stream::engine::g().mu);
    std::lock_guard<std::mutex> l(p.a.c->mu);
    stream::engine::mark_fork_bytes(p.a.c);
    mark = p.a.c->at_fork.mark;
  }
  REQUIRE(mark.valid);
  CHECK(mark.held_rx > 0); // the peer's bytes over RDMA, unread
  const int fd = p.a.c->fd;
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    alarm(10);
    char b = 'z';
    int rc = 0;
    if (what == Child::reads) {
      // The parent's traffic() reads the same socket: bytes a poll saw may
      // be gone by our recv, so try until one byte is ours (or 5 s).
      rc = 1;
      for (int i = 0; i < 500 && rc != 0; ++i) {
        pollfd q{fd, POLLIN, 0};
        if (poll(&q, 1, 10) == 1 && recv(fd, &b, 1, MSG_DONTWAIT) == 1) rc = 0;
      }
    } else if (what == Child::writes) {
      rc = send(fd, &b, 1, MSG_DONTWAIT) == 1 ? 0 : 1;
    }
    _exit(rc);
  }
  traffic(p, 92, 200); // the parent meanwhile
  // ... until the child exits: a reading child scheduled late would
  // otherwise find every byte taken by then and none coming.
  int status = 0;
  pid_t w = 0;
  for (unsigned seed = 1000; (w = waitpid(pid, &status, WNOHANG)) == 0; ++seed)
    traffic(p, seed, 5);
  REQUIRE(w == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  traffic(p, 93, 200); // and after
  {
    // A second fork while the socket is still watched keeps the first
    // mark (the first child may have used the stream since).
    std::lock_guard<std::mutex> g(stream::engine::g().mu);
    std::lock_guard<std::mutex> l(p.a.c->mu);
    p.a.c->at_fork.ino = 1;
    stream::engine::mark_fork_bytes(p.a.c);
    CHECK(p.a.c->at_fork.mark.k == mark.k);
    CHECK(p.a.c->at_fork.mark.app_tx == mark.app_tx);
    p.a.c->at_fork.ino = 0;
    // So does one while the first child's use is still to be judged (the
    // socket no longer watched, its judgement queued).
    p.a.c->at_fork.judging = true;
    stream::engine::mark_fork_bytes(p.a.c);
    CHECK(p.a.c->at_fork.mark.k == mark.k);
    CHECK(p.a.c->at_fork.mark.app_rx == mark.app_rx);
    p.a.c->at_fork.judging = false;
  }
  for (int i = 0; i < 200; ++i) { // what is left both ways
    rtake(p.a, 1 << 20, 1);
    rtake(p.b, 1 << 20, 0);
    engine_step(p);
  }
  if (what == Child::idle) { // every byte once, in order
    CHECK(p.a.got == p.b.sent);
    CHECK(p.b.got == p.a.sent);
    CHECK(p.a.bad + p.b.bad == 0);
  }
  Use u = Use::inconsistent;
  uint64_t held_left;
  {
    std::lock_guard<std::mutex> l(p.a.c->mu);
    held_left = p.a.c->rs ? p.a.c->rs->pre.size() + p.a.c->rs->buf.size() : 0;
  }
  CHECK(held_left == 0);
  bool busy = true;
  CHECK(stream::fork_bytes::observe(fd, mark, held_left, 3, &u, &busy));
  CHECK_FALSE(busy);
  {
    // Once another process used it, no later fork marks it again.
    std::lock_guard<std::mutex> g(stream::engine::g().mu);
    std::lock_guard<std::mutex> l(p.a.c->mu);
    p.a.c->at_fork.mark.valid = false;
    p.a.c->at_fork.used_elsewhere = true;
    stream::engine::mark_fork_bytes(p.a.c);
    CHECK_FALSE(p.a.c->at_fork.mark.valid);
  }
  stream::fork_bytes::set_app_counts(nullptr);
  g_pair = nullptr;
  return u;
}

} // namespace

TEST_CASE("fork_bytes: a child that did not touch the moved stream leaves it ours alone") {
  CHECK(after_child(Child::idle) == Use::alone);
}

TEST_CASE("fork_bytes: a child that read one byte of the moved stream is seen") {
  CHECK(after_child(Child::reads) == Use::other);
}

TEST_CASE("fork_bytes: a child that wrote one byte to the moved stream is seen") {
  CHECK(after_child(Child::writes) == Use::other);
}

namespace {
// A thread's call as the preload counts it (track::CallInFlight):
// begun, then the kernel, then the bytes, then done.
struct Counted {
  int fd = -1;
  std::atomic<uint64_t> tx{0}, rx{0}, begun{0}, done{0};
};
Counted* g_counted = nullptr;
bool counted(int fd, stream::fork_bytes::Ours* out) {
  if (g_counted == nullptr || fd != g_counted->fd) return false;
  out->done = g_counted->done.load();
  out->begun = g_counted->begun.load();
  out->tx = g_counted->tx.load();
  out->rx = g_counted->rx.load();
  return true;
}
} // namespace

// redisfork's intermittent "1 used by another process": a thread of ours
// preempted between its recv and its count made the kernel look ahead of
// our calls in every sample.  A call in flight spoils the sample instead.
TEST_CASE(
    "fork_bytes: our own call between its kernel move and its count is not another process's") {
  int fds[2];
  tcp_loopback_pair(fds);
  Counted cn;
  cn.fd = fds[0];
  g_counted = &cn;
  stream::fork_bytes::set_app_counts(counted);
  Mark mark;
  REQUIRE(stream::fork_bytes::sample(fds[0], &mark.k, &mark.app_tx, &mark.app_rx) ==
          stream::fork_bytes::Sample::ok);
  mark.valid = true;
  REQUIRE(put(fds[1], 100) == 100);
  usleep(20000);
  // Our call: begun, its recv took the bytes, not counted yet.
  cn.begun.fetch_add(1);
  REQUIRE(take(fds[0], 100) == 100);
  Use u = Use::alone;
  bool busy = false;
  CHECK_FALSE(stream::fork_bytes::observe(fds[0], mark, 0, 3, &u, &busy));
  CHECK(busy);
  Kernel k;
  uint64_t tx, rx;
  CHECK(stream::fork_bytes::sample(fds[0], &k, &tx, &rx) == stream::fork_bytes::Sample::busy);
  // ... and counted: ours alone.
  cn.rx.fetch_add(100);
  cn.done.fetch_add(1);
  CHECK(stream::fork_bytes::observe(fds[0], mark, 0, 3, &u, &busy));
  CHECK_FALSE(busy);
  CHECK(u == Use::alone);
  // Bytes no call of ours moved are another process's.
  REQUIRE(put(fds[1], 7) == 7);
  usleep(20000);
  char b[7];
  REQUIRE(::syscall(SYS_recvfrom, fds[0], b, 7, MSG_DONTWAIT, nullptr, nullptr) == 7);
  CHECK(stream::fork_bytes::observe(fds[0], mark, 0, 3, &u, &busy));
  CHECK(u == Use::other);
  // A sample fails on a socket that is not established TCP.
  ::shutdown(fds[1], SHUT_WR);
  usleep(20000);
  CHECK_FALSE(stream::fork_bytes::observe(fds[0], mark, 0, 3, &u, &busy));
  CHECK_FALSE(busy);
  stream::fork_bytes::set_app_counts(nullptr);
  g_counted = nullptr;
  close(fds[0]);
  close(fds[1]);
}

// The kernel's counts come from three calls, and ACKs arriving between
// TCP_INFO and SIOCOUTQ would make the written count short: kernel()
// reads TCP_INFO again and retries.  Bytes written once and drained slowly
// by the peer: every count that holds is the same.  (Loopback has not
// shown the short count without the second read; this guards the retry.)
TEST_CASE("fork_bytes: the kernel's counts hold still while the peer acknowledges") {
  int fds[2];
  tcp_loopback_pair(fds);
  int v = 4 << 20;
  setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &v, sizeof v);
  v = 16 << 10;
  setsockopt(fds[1], SOL_SOCKET, SO_RCVBUF, &v, sizeof v);
  const uint64_t sent = put(fds[0], 4 << 20);
  REQUIRE(sent > (256u << 10));
  std::atomic<bool> stop{false};
  std::thread drain([&] {
    char b[512];
    while (!stop.load()) {
      ::syscall(SYS_recvfrom, fds[1], b, sizeof b, MSG_DONTWAIT, nullptr, nullptr);
      usleep(20);
    }
  });
  Kernel first;
  bool have = false;
  int held = 0, moving = 0, wrong = 0;
  for (int i = 0; i < 400000 && held < 100000; ++i) {
    Kernel k;
    bool m = false;
    if (!stream::fork_bytes::kernel(fds[0], &k, &m)) {
      moving += m;
      continue;
    }
    ++held;
    if (!have) {
      first = k;
      have = true;
    }
    wrong += k.written != first.written;
  }
  stop = true;
  drain.join();
  MESSAGE("held ", held, " moving ", moving);
  CHECK(held > 0);
  CHECK(wrong == 0);
  close(fds[0]);
  close(fds[1]);
}
