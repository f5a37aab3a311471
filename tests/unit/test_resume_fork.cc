// A resumed stream at fork (docs/protocol.md §7 "At the fork";
// stream/resume_fork.h): its framed directions turn back into plain TCP
// (a RAW frame each way) so that parent and child share a kernel socket.
// Over the fake transport: after the turn, bytes written straight to the
// socket (a fork child's calls, which the kernel serves) and the parent's
// interleave as the kernel's would, and reads split between the two
// deliver every byte once; a silent peer costs the fork a bounded wait.
#include <doctest/doctest.h>

#include <atomic>
#include <sys/socket.h>
#include <thread>

#include "resume_pair.h"
#include "stream/resume.h"
#include "stream/resume_fork.h"

using namespace xp;
using namespace xp::test;

namespace {

// Both ends resumed on TCP (their channel failed) and carrying frames.
void resumed_pair(RPair& p, unsigned seed) {
  stream::engine::g().p.keepalive_ms = 0;
  rdrive(p, 60000, seed, -1, [] {});
  settle_switches(p);
  p.la.force_error();
  p.lb.force_error();
  engine_step(p);
  rdrive(p, 200000, seed + 1, -1, [] {}); // frames both ways, every RESUME read
  REQUIRE(p.a.c->resumed.load());
  REQUIRE(p.b.c->resumed.load());
  REQUIRE(p.a.c->rs->tx == stream::Resume::Tx::framed);
  REQUIRE(p.b.c->rs->tx == stream::Resume::Tx::framed);
  rput(p.a, 30000); // frames in flight both ways at the fork
  rput(p.b, 30000);
}

// raw_for_fork in a's process (a in the engine's table); b's engine pumps
// its connection from another thread when `peer_runs`.
uint64_t fork_turn(RPair& p, bool peer_runs, bool both = false) {
  {
    std::lock_guard<std::mutex> l(stream::engine::g().mu);
    for (REnd* e : {&p.a, &p.b}) {
      if (e == &p.b && !both) continue;
      e->c->ref(); // the table's (on_close drops it)
      stream::engine::g().conns.add(e->c);
    }
  }
  std::atomic<bool> stop{false};
  std::thread peer([&] {
    while (peer_runs && !both && !stop.load()) {
      {
        std::lock_guard<std::mutex> l(p.b.c->mu);
        stream::resume::pump(p.b.c);
      }
      usleep(100);
    }
  });
  const uint64_t t0 = stream::engine::now_ms();
  stream::resume::raw_for_fork();
  const uint64_t took = stream::engine::now_ms() - t0;
  stop = true;
  peer.join();
  return took;
}

// Read what the peer of `e` sent until `e` holds nothing in user space
// (its connection is the kernel's again).
void drain_to_kernel(RPair& p, REnd& e, int peer_dir) {
  for (int i = 0; i < 2000 && e.c->phase.load() != stream::Phase::tcp; ++i) {
    rtake(e, 1 << 16, peer_dir);
    engine_step(p);
  }
}

// A fork child's write: straight to the shared kernel socket.
void child_put(REnd& e, size_t n) {
  std::vector<uint8_t> buf(n);
  for (size_t k = 0; k < n; ++k)
    buf[k] = rpat(e.dir, e.sent + k);
  ssize_t w = ::send(e.c->fd, buf.data(), n, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (w > 0) e.sent += static_cast<uint64_t>(w);
}

// A fork child's read: straight from the shared kernel socket.
void child_take(REnd& e, size_t n, int peer_dir) {
  std::vector<uint8_t> buf(n);
  ssize_t r = ::recv(e.c->fd, buf.data(), n, MSG_DONTWAIT);
  if (r <= 0) return;
  for (ssize_t k = 0; k < r; ++k)
    e.bad += buf[static_cast<size_t>(k)] != rpat(peer_dir, e.got + static_cast<uint64_t>(k));
  e.got += static_cast<uint64_t>(r);
}

} // namespace

TEST_CASE("fork: a resumed stream turns into plain TCP; parent and child share it") {
  RPair p;
  resumed_pair(p, 91);
  const uint64_t took = fork_turn(p, true);
  MESSAGE("raw_for_fork with an answering peer took " << took << " ms");
  REQUIRE(p.a.c->rs != nullptr);
  CHECK(p.a.c->rs->moved);
  CHECK(p.a.c->rs->out.size() == 0); // our RAW and frames are in the kernel
  CHECK_FALSE(p.a.c->at_fork.unsafe);
  // Every byte sent before the turn arrives (frames, then raw).
  for (int i = 0; i < 400 && (p.a.got < p.b.sent || p.b.got < p.a.sent); ++i) {
    rtake(p.a, 1 << 16, 1);
    rtake(p.b, 1 << 16, 0);
    engine_step(p);
  }
  drain_to_kernel(p, p.a, 1);
  drain_to_kernel(p, p.b, 0);
  CHECK(p.a.c->phase.load() == stream::Phase::tcp);
  CHECK(p.b.c->phase.load() == stream::Phase::tcp);
  // The "child" and the parent write in turns, then read in turns: the
  // kernel serialises both, every byte once, in order.
  for (int i = 0; i < 40; ++i) {
    if (i % 2)
      child_put(p.a, 7000);
    else
      rput(p.a, 5000);
    rput(p.b, 6000);
    rtake(p.b, 1 << 16, 0);
    if (i % 3)
      child_take(p.a, 4000, 1);
    else
      rtake(p.a, 3000, 1);
  }
  for (int i = 0; i < 200 && (p.a.got < p.b.sent || p.b.got < p.a.sent); ++i) {
    rtake(p.b, 1 << 16, 0);
    child_take(p.a, 1 << 16, 1);
  }
  CHECK(p.b.got == p.a.sent);
  CHECK(p.a.got == p.b.sent);
  CHECK(p.a.bad + p.b.bad == 0);
  CHECK_FALSE(p.a.reset);
  CHECK_FALSE(p.b.reset);
}

TEST_CASE("fork: both ends turn a resumed stream at once (the RAW frames cross)") {
  RPair p;
  resumed_pair(p, 93);
  fork_turn(p, false, true);
  CHECK(p.a.c->rs->moved);
  CHECK(p.b.c->rs->moved);
  rdrive(p, 600000, 94, -1, [] {});
  check_delivered(p, 600000);
}

TEST_CASE("fork: a peer that does not answer the RAW: bounded wait, the stream goes on") {
  RPair p;
  resumed_pair(p, 95);
  const uint64_t took = fork_turn(p, false); // b's engine stopped
  MESSAGE("raw_for_fork with a silent peer took " << took << " ms");
  CHECK(took < 2000);
  CHECK_FALSE(p.a.c->rs->moved); // still reading frames: b's RAW comes later
  CHECK(p.a.c->rs->tx == stream::Resume::Tx::raw);
  // Still framed at the fork: a child's copy would number frames from the
  // same state as the parent's, and read the frames meant for it; it is
  // reset in the child (engine::on_fork_child) rather than shared.
  CHECK(p.a.c->at_fork.unsafe);
  rdrive(p, 600000, 96, -1, [] {}); // b answers once it reads a's RAW
  check_delivered(p, 600000);
  CHECK(p.a.c->rs->moved);
  CHECK(p.b.c->rs->moved);
}

TEST_CASE("fork: a RAW frame that does not verify resets the stream") {
  RPair p;
  resumed_pair(p, 97);
  for (int i = 0; i < 100 && (p.a.got < p.b.sent || p.b.got < p.a.sent); ++i) {
    rtake(p.a, 1 << 16, 1);
    rtake(p.b, 1 << 16, 0);
    engine_step(p);
  }
  uint8_t key[recover::kNonceBytes] = {}; // not the session key
  uint8_t f[recover::kRawFrameBytes];
  recover::encode_raw(key, recover::Dir::c2s, p.a.sent, p.a.got, f);
  REQUIRE(::send(p.a.c->fd, f, sizeof f, 0) == static_cast<ssize_t>(sizeof f));
  for (int i = 0; i < 20; ++i) {
    rtake(p.b, 1 << 16, 0);
    engine_step(p);
  }
  CHECK(p.b.reset);
  CHECK(p.b.bad == 0);
}
