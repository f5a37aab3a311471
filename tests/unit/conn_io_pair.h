// Shared by the conn io unit tests (test_conn_io.cc, test_conn_io_ready.cc):
// a fake transport where a socketpair plays the TCP connection and a
// FakeLink pair the RDMA channel, two ends bound over it, and byte patterns
// that tell each direction and offset apart.
#pragma once

#include <doctest/doctest.h>

#include "fake_link.h"
#include "io_calls.h"
#include "session_params.h"
#include "stream/conn_io.h"
#include "stream/engine_internal.h"
#include "stream/iov_slice.h"
#include "stream/wake.h"
#include <arpa/inet.h>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <random>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace xp::stream::conn_io_test {

inline uint8_t pat(int dir, uint64_t i) {
  return static_cast<uint8_t>(i * 31 + dir * 101 + (i >> 9));
}

inline recover::SessionParams params(recover::Role r, uint8_t seed) {
  return recover::test::params(r, recover::test::tuple(AF_INET, "10.0.0.1", 40000, "10.0.0.2", 80),
                               seed, 0);
}

inline void tcp_pair(int fds[2]) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(l >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  REQUIRE(::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(listen(l, 1) == 0);
  REQUIRE(getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  fds[0] = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(connect(fds[0], reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  fds[1] = accept(l, nullptr, nullptr);
  REQUIRE(fds[1] >= 0);
  close(l);
}

// One end: its connection bound to a channel over its FakeLink.
struct End {
  Conn* c;
  Channel* ch;
  int dir;
  uint64_t sent = 0, got = 0, bad = 0;
};

inline void bind(End& e, const recover::Nonce& peer_nonce) {
  std::lock_guard<std::mutex> l(e.c->mu);
  {
    std::lock_guard<std::mutex> chl(e.ch->mu);
    e.c->st = e.ch->mux->open(0, 0, 0);
    REQUIRE(e.c->st != nullptr);
    e.c->st->owner = e.c;
    e.ch->conns.add(e.c);
    e.c->ref();
  }
  e.c->ch = e.ch;
  e.c->sid = 0;
  REQUIRE(e.c->sess.adopt(0, peer_nonce) == Status::ok);
  engine::advance(e.c);
}

struct Pair {
  int fds[2];
  test::FakeLink la{64 * 1024, 1024}, lb{64 * 1024, 1024};
  End a{}, b{};
  // tcp: a loopback TCP connection instead of a socketpair (the engine
  // counts TCP bytes through TCP_INFO).
  Pair(bool bind_both, bool tcp = false) {
    if (tcp)
      tcp_pair(fds);
    else
      REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    test::FakeLink::connect(la, lb);
    auto pc = params(recover::Role::client, 1), ps = params(recover::Role::server, 2);
    a.c = new Conn(fds[0], pc);
    b.c = new Conn(fds[1], ps);
    a.dir = 0;
    b.dir = 1;
    {
      std::lock_guard<std::mutex> g(engine::g().mu);
      a.ch = engine::make_channel(engine::g(), &la, true);
      b.ch = engine::make_channel(engine::g(), &lb, false);
    }
    REQUIRE(a.ch != nullptr);
    REQUIRE(b.ch != nullptr);
    if (bind_both) {
      bind(a, ps.nonce);
      bind(b, pc.nonce);
    }
  }
  ~Pair() {
    for (End* e : {&a, &b}) {
      engine::on_close(e->c);
      e->c->unref();
    }
    close(fds[0]);
    close(fds[1]);
    std::lock_guard<std::mutex> g(engine::g().mu);
    for (Channel* ch : {a.ch, b.ch})
      engine::g().chans.free_now(ch);
  }
};

// Non-blocking write of up to n pattern bytes; returns how many went.
inline size_t put(End& e, size_t n) {
  std::vector<uint8_t> buf(n);
  for (size_t k = 0; k < n; ++k)
    buf[k] = pat(e.dir, e.sent + k);
  iovec v{buf.data(), n};
  bool kernel = false;
  ssize_t r = xp::test::call_send(e.c, &v, 1, MSG_DONTWAIT, &kernel);
  if (kernel) r = ::send(e.c->fd, buf.data(), n, MSG_DONTWAIT);
  if (r > 0) e.sent += static_cast<uint64_t>(r);
  return r > 0 ? static_cast<size_t>(r) : 0;
}

inline size_t take(End& e, size_t n, int peer_dir) {
  std::vector<uint8_t> buf(n);
  iovec v{buf.data(), n};
  bool kernel = false;
  ssize_t r = xp::test::call_recv(e.c, &v, 1, MSG_DONTWAIT, &kernel);
  if (kernel) r = ::recv(e.c->fd, buf.data(), n, MSG_DONTWAIT);
  if (r <= 0) return 0;
  for (ssize_t k = 0; k < r; ++k)
    e.bad += buf[static_cast<size_t>(k)] != pat(peer_dir, e.got + static_cast<uint64_t>(k));
  e.got += static_cast<uint64_t>(r);
  return static_cast<size_t>(r);
}

// Random interleaving of writes, reads and channel progress until both
// directions delivered `total` bytes.
inline void run(Pair& p, uint64_t total, unsigned seed) {
  std::mt19937 rng(seed);
  for (int step = 0; step < 200000 && (p.a.got < total || p.b.got < total); ++step) {
    switch (rng() % 5) {
    case 0:
      if (p.a.sent < total) put(p.a, std::min<uint64_t>(total - p.a.sent, 1 + rng() % 9000));
      break;
    case 1:
      if (p.b.sent < total) put(p.b, std::min<uint64_t>(total - p.b.sent, 1 + rng() % 9000));
      break;
    case 2:
      take(p.a, 1 + rng() % 12000, 1);
      break;
    case 3:
      take(p.b, 1 + rng() % 12000, 0);
      break;
    default:
      engine::progress(p.a.ch);
      engine::progress(p.b.ch);
    }
  }
}

// Idle directions switch on the next advance (the engine's tick does it):
// advance both ends and poll both channels until done() or 20 rounds.
template <typename Done> inline void settle(Pair& p, Done done) {
  for (int i = 0; i < 20 && !done(); ++i) {
    for (End* e : {&p.a, &p.b}) {
      std::lock_guard<std::mutex> l(e->c->mu);
      engine::advance(e->c);
    }
    engine::progress(p.a.ch);
    engine::progress(p.b.ch);
  }
}

// a's both directions (and b's sending one) on RDMA after some traffic,
// with nothing left for a to read.
inline void a_on_rdma_drained(Pair& p, unsigned seed) {
  run(p, 3000, seed);
  settle(p,
         [&] { return p.a.c->rx_rdma.load() && p.a.c->tx_rdma.load() && p.b.c->tx_rdma.load(); });
  REQUIRE(p.a.c->rx_rdma.load());
  REQUIRE(p.a.c->tx_rdma.load());
  while (take(p.a, 4096, 1) > 0) {
  }
}

// Runs fn in another thread while the caller holds `held` (locks a
// program's thread holds at work): whether it returned within 1 s, i.e.
// took none of them.  The locks are let go before the join either way.
template <typename Fn, typename... Held> inline bool returns_while_held(Fn fn, Held&... held) {
  std::atomic<bool> done{false};
  std::thread t([&] {
    fn();
    done = true;
  });
  for (int i = 0; i < 1000 && !done.load(); ++i)
    usleep(1000);
  bool returned = done.load();
  (held.unlock(), ...);
  t.join();
  return returned;
}

} // namespace xp::stream::conn_io_test
