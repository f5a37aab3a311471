// Two connected ends for recovery tests: a socketpair plays the TCP
// connection, a FakeLink pair the RDMA channel (as in test_conn_io.cc),
// plus a driver that interleaves writes, reads, channel progress and what
// the engine thread does for resumed connections.
#pragma once
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <cerrno>
#include <mutex>
#include <random>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

#include "fake_link.h"
#include "io_calls.h"
#include "session_params.h"
#include "stream/conn_io.h"
#include "stream/engine_internal.h"

namespace xp::test {

// What the resume hook reported.  Both ends of a pair live in this process,
// and either end's call, engine or peer thread may be the one that resumes:
// the hook runs on two threads at once (for_fork's move and the peer's
// answer), so the log takes a lock.  An unlocked vector lost or doubled an
// event under ASan's timing ("fork" counted twice, "peer_moved" never).
class ResumeLog {
public:
  void add(const stream::ResumeEvent& e) {
    std::lock_guard<std::mutex> l(mu_);
    ev_.push_back(e);
  }
  void clear() {
    std::lock_guard<std::mutex> l(mu_);
    ev_.clear();
  }
  std::vector<stream::ResumeEvent> events() const {
    std::lock_guard<std::mutex> l(mu_);
    return ev_;
  }

private:
  mutable std::mutex mu_;
  std::vector<stream::ResumeEvent> ev_;
};

inline uint8_t rpat(int dir, uint64_t i) {
  return static_cast<uint8_t>(i * 131 + dir * 17 + (i >> 11));
}

inline recover::SessionParams rparams(recover::Role r, uint8_t seed) {
  return recover::test::params(
      r, recover::test::tuple(AF_INET, "10.0.0.1", 41000, "10.0.0.2", 8080), seed, 0);
}

// The same over native IPv6: client [fd00::1]:41000, server [fd00::2]:8080.
inline recover::SessionParams rparams6(recover::Role r, uint8_t seed) {
  return recover::test::params(r, recover::test::tuple(AF_INET6, "fd00::1", 41000, "fd00::2", 8080),
                               seed, 0);
}

struct REnd {
  stream::Conn* c;
  stream::Channel* ch;
  int dir;
  uint64_t sent = 0, got = 0, bad = 0;
  bool reset = false, eof = false;
};

// Binds e's connection to stream `id` of its channel, as an ATTACH would.
inline void bind_stream(REnd& e, uint32_t id, const recover::Nonce& peer_nonce) {
  std::lock_guard<std::mutex> l(e.c->mu);
  {
    std::lock_guard<std::mutex> chl(e.ch->mu);
    e.c->st = e.ch->mux->open(id, 0, 0);
    REQUIRE(e.c->st != nullptr);
    e.c->st->owner = e.c;
    e.ch->conns.add(e.c);
    e.c->ref();
  }
  e.c->ch = e.ch;
  e.c->sid = id;
  REQUIRE(e.c->sess.adopt(id, peer_nonce) == Status::ok);
  stream::engine::advance(e.c);
}

// A connected pair of loopback TCP sockets (for what only TCP has: the
// kernel's byte counts, stream/fork_bytes.h).
inline void tcp_loopback_pair(int fds[2]) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(l >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  REQUIRE(bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(listen(l, 1) == 0);
  REQUIRE(getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  fds[0] = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fds[0] >= 0);
  REQUIRE(connect(fds[0], reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  fds[1] = accept(l, nullptr, nullptr);
  REQUIRE(fds[1] >= 0);
  close(l);
}

struct RPair {
  int fds[2];
  FakeLink la{64 * 1024, 1024}, lb{64 * 1024, 1024};
  REnd a{}, b{};
  // tcp: a loopback TCP connection instead of a socketpair.
  explicit RPair(size_t sock_buf = 0, bool tcp = false) {
    if (tcp)
      tcp_loopback_pair(fds);
    else
      REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    if (sock_buf) {
      int v = static_cast<int>(sock_buf);
      for (int fd : fds) {
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof v);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof v);
      }
    }
    FakeLink::connect(la, lb);
    stream::engine::g().p.keepalive_ms = 30; // an idle peer's loss is noticed in the test's time
    auto pc = rparams(recover::Role::client, 5), ps = rparams(recover::Role::server, 6);
    a.c = new stream::Conn(fds[0], pc);
    b.c = new stream::Conn(fds[1], ps);
    a.dir = 0;
    b.dir = 1;
    {
      std::lock_guard<std::mutex> g(stream::engine::g().mu);
      a.ch = stream::engine::make_channel(stream::engine::g(), &la, true);
      b.ch = stream::engine::make_channel(stream::engine::g(), &lb, false);
    }
    bind(a, ps.nonce);
    bind(b, pc.nonce);
  }
  static void bind(REnd& e, const recover::Nonce& peer_nonce) { bind_stream(e, 0, peer_nonce); }
  ~RPair() {
    for (REnd* e : {&a, &b}) {
      stream::engine::on_close(e->c);
      e->c->unref();
    }
    close(fds[0]);
    close(fds[1]);
    std::lock_guard<std::mutex> g(stream::engine::g().mu);
    for (stream::Channel* ch : {a.ch, b.ch})
      stream::engine::g().chans.free_now(ch);
  }
};

// Non-blocking write of up to n pattern bytes.
inline size_t rput(REnd& e, size_t n) {
  std::vector<uint8_t> buf(n);
  for (size_t k = 0; k < n; ++k)
    buf[k] = rpat(e.dir, e.sent + k);
  iovec v{buf.data(), n};
  bool kernel = false;
  ssize_t r = xp::test::call_send(e.c, &v, 1, MSG_DONTWAIT | MSG_NOSIGNAL, &kernel);
  if (kernel) r = ::send(e.c->fd, buf.data(), n, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (r < 0 && errno != EAGAIN) e.reset = true;
  if (r > 0) e.sent += static_cast<uint64_t>(r);
  return r > 0 ? static_cast<size_t>(r) : 0;
}

inline size_t rtake(REnd& e, size_t n, int peer_dir) {
  std::vector<uint8_t> buf(n);
  iovec v{buf.data(), n};
  bool kernel = false;
  ssize_t r = xp::test::call_recv(e.c, &v, 1, MSG_DONTWAIT, &kernel);
  if (kernel) r = ::recv(e.c->fd, buf.data(), n, MSG_DONTWAIT);
  if (r < 0 && errno != EAGAIN) e.reset = true;
  if (r == 0) e.eof = true;
  if (r <= 0) return 0;
  for (ssize_t k = 0; k < r; ++k)
    e.bad += buf[static_cast<size_t>(k)] != rpat(peer_dir, e.got + static_cast<uint64_t>(k));
  e.got += static_cast<uint64_t>(r);
  return static_cast<size_t>(r);
}

// Both directions delivered `total` bytes, intact, and neither end reset.
inline void check_delivered(const RPair& p, uint64_t total) {
  CHECK_FALSE(p.a.reset);
  CHECK_FALSE(p.b.reset);
  CHECK(p.a.got == total);
  CHECK(p.b.got == total);
  CHECK(p.a.bad == 0);
  CHECK(p.b.bad == 0);
}

// What the engine thread does: poll channels (failed ones resume their
// streams), notice the peer's frames on TCP, pump resumed connections.
inline void engine_step(RPair& p) {
  stream::engine::keepalive(stream::engine::g(), stream::engine::now_ms());
  for (REnd* e : {&p.a, &p.b}) {
    stream::engine::progress(e->ch);
    if (e->c->rx_rdma.load()) stream::engine::tcp_after_switch(e->c);
    if (e->c->resumed.load()) {
      std::lock_guard<std::mutex> l(e->c->mu);
      stream::resume::pump(e->c);
    }
  }
}

// Settle the upgrade: both directions switched and acknowledged.
inline void settle_switches(RPair& p) {
  for (int i = 0; i < 40; ++i) {
    for (REnd* e : {&p.a, &p.b}) {
      std::lock_guard<std::mutex> l(e->c->mu);
      if (e->c->ch) stream::engine::advance(e->c);
    }
    engine_step(p);
  }
}

// Random interleaving until both directions delivered `total` (or an end
// reset); `hook` runs once at step `at`.
template <typename Hook>
void rdrive(RPair& p, uint64_t total, unsigned seed, int at, Hook hook, int steps = 400000) {
  std::mt19937 rng(seed);
  for (int step = 0; step < steps && (p.a.got < total || p.b.got < total); ++step) {
    if (step == at) hook();
    if (p.a.reset || p.b.reset) break;
    switch (rng() % 6) {
    case 0: // mostly small writes, some larger than a frame (64 KiB)
      if (p.a.sent < total)
        rput(p.a, std::min<uint64_t>(total - p.a.sent, 1 + rng() % (rng() % 4 ? 20000 : 200000)));
      break;
    case 1:
      if (p.b.sent < total)
        rput(p.b, std::min<uint64_t>(total - p.b.sent, 1 + rng() % (rng() % 4 ? 20000 : 200000)));
      break;
    case 2:
      rtake(p.a, 1 + rng() % 30000, 1);
      break;
    case 3:
      rtake(p.b, 1 + rng() % 30000, 0);
      break;
    case 4: {
      std::lock_guard<std::mutex> l(p.a.c->mu);
      if (p.a.c->ch) stream::engine::advance(p.a.c);
    }
      {
        std::lock_guard<std::mutex> l(p.b.c->mu);
        if (p.b.c->ch) stream::engine::advance(p.b.c);
      }
      break;
    default:
      engine_step(p);
    }
  }
}

// A second stream (id 1) on the same channels as p's, with its own
// socketpair as its TCP connection: a stream of the same channel that has
// nothing to do with p's.
struct SecondStream {
  int fds[2];
  REnd a{}, b{};
  explicit SecondStream(RPair& p) {
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    auto pc = rparams(recover::Role::client, 7), ps = rparams(recover::Role::server, 8);
    a.c = new stream::Conn(fds[0], pc);
    b.c = new stream::Conn(fds[1], ps);
    a.ch = p.a.ch;
    b.ch = p.b.ch;
    a.dir = 0;
    b.dir = 1;
    bind_stream(a, 1, ps.nonce);
    bind_stream(b, 1, pc.nonce);
  }
  ~SecondStream() {
    for (REnd* e : {&a, &b}) {
      stream::engine::on_close(e->c);
      e->c->unref();
    }
    close(fds[0]);
    close(fds[1]);
  }
  SecondStream(const SecondStream&) = delete;
  SecondStream& operator=(const SecondStream&) = delete;
};

// An accepted server connection over a socketpair that the engine finds by
// its 4-tuple, as accept() registers it.  forget() (or the destructor) ends
// it as the program's close would and drops it from the engine's table.
struct AcceptedConn {
  int fds[2] = {-1, -1};
  stream::Conn* c = nullptr;
  explicit AcceptedConn(const recover::SessionParams& p) {
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    c = new stream::Conn(fds[1], p);
    std::lock_guard<std::mutex> g(stream::engine::g().mu);
    c->ref();
    stream::engine::g().conns.add(c);
    stream::engine::index_server(stream::engine::g(), c);
  }
  AcceptedConn(const AcceptedConn&) = delete;
  AcceptedConn& operator=(const AcceptedConn&) = delete;
  ~AcceptedConn() { forget(); }
  void forget() {
    if (c == nullptr) return;
    stream::engine::on_close(c);
    {
      std::lock_guard<std::mutex> g(stream::engine::g().mu);
      if (stream::engine::g().conns.remove(c)) c->unref();
    }
    c->unref();
    c = nullptr;
    close(fds[0]);
    close(fds[1]);
  }
};

} // namespace xp::test
