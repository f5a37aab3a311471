// The socket data calls of an upgrading connection (stream/conn_io.cc and
// the engine's control handling) over a fake transport: a socketpair plays
// the TCP connection, a FakeLink pair the RDMA channel.  Bytes written
// before, during and after each direction's switch must arrive exactly
// once and in order, whatever the interleaving of writes, reads and
// channel progress; a peer that never proves itself leaves the connection
// on TCP with every byte intact.
#include <doctest/doctest.h>

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

#include "fake_link.h"
#include "io_calls.h"
#include "stream/conn_io.h"
#include "stream/engine_internal.h"
#include "stream/iov_slice.h"
#include "stream/wake.h"

using namespace xp;
using namespace xp::stream;

namespace {

uint8_t pat(int dir, uint64_t i) {
  return static_cast<uint8_t>(i * 31 + dir * 101 + (i >> 9));
}

recover::SessionParams params(recover::Role r, uint8_t seed) {
  recover::SessionParams p;
  p.role = r;
  sockaddr_in c{}, s{};
  c.sin_family = s.sin_family = AF_INET;
  c.sin_port = htons(40000);
  s.sin_port = htons(80);
  inet_pton(AF_INET, "10.0.0.1", &c.sin_addr);
  inet_pton(AF_INET, "10.0.0.2", &s.sin_addr);
  REQUIRE(recover::tuple_from_sockaddrs(reinterpret_cast<sockaddr*>(&c),
                                        reinterpret_cast<sockaddr*>(&s), &p.tuple) == Status::ok);
  for (size_t i = 0; i < recover::kNonceBytes; ++i)
    p.nonce.b[i] = static_cast<uint8_t>(seed * 16 + i);
  for (size_t i = 0; i < sizeof p.seed; ++i) // the key exchange secret
    p.seed[i] = static_cast<uint8_t>(seed * 31 + i * 7 + 1);
  p.timeout_ms = 1000;
  return p;
}

void tcp_pair(int fds[2]) {
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

void bind(End& e, const recover::Nonce& peer_nonce) {
  std::lock_guard<std::mutex> l(e.c->mu);
  {
    std::lock_guard<std::mutex> chl(e.ch->mu);
    e.c->st = e.ch->mux->open(0, 0, 0);
    REQUIRE(e.c->st != nullptr);
    e.c->st->owner = e.c;
    e.ch->conns.push_back(e.c);
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
      a.ch = engine::make_channel(&la, true);
      b.ch = engine::make_channel(&lb, false);
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
    auto& v = engine::g().channels;
    for (Channel* ch : {a.ch, b.ch}) {
      for (size_t i = 0; i < v.size(); ++i)
        if (v[i] == ch) v.erase(v.begin() + static_cast<long>(i));
      delete ch->mux;
      delete ch;
    }
  }
};

// Non-blocking write of up to n pattern bytes; returns how many went.
size_t put(End& e, size_t n) {
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

size_t take(End& e, size_t n, int peer_dir) {
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
void run(Pair& p, uint64_t total, unsigned seed) {
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
template <typename Done> void settle(Pair& p, Done done) {
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
void a_on_rdma_drained(Pair& p, unsigned seed) {
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
template <typename Fn, typename... Held> bool returns_while_held(Fn fn, Held&... held) {
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

} // namespace

TEST_CASE("conn io: the iovec after a partial transfer, capped in bytes and elements") {
  using xp::stream::iov_slice;
  using xp::stream::kMaxIov;
  char a[10], b[5], c[7];
  const iovec in[] = {{a, sizeof a}, {b, 0}, {b, sizeof b}, {c, sizeof c}};
  iovec out[kMaxIov];
  CHECK(xp::stream::iov_total_len(in, 4) == 22);
  // skip into the first element, empty one dropped
  REQUIRE(iov_slice(in, 4, 4, out) == 3);
  CHECK((out[0].iov_base == a + 4 && out[0].iov_len == 6));
  CHECK((out[1].iov_base == b && out[1].iov_len == 5));
  CHECK((out[2].iov_base == c && out[2].iov_len == 7));
  // skip exactly to an element boundary, then a byte cap that ends mid-element
  REQUIRE(iov_slice(in, 4, 10, out, 8) == 2);
  CHECK((out[0].iov_base == b && out[0].iov_len == 5));
  CHECK((out[1].iov_base == c && out[1].iov_len == 3));
  // nothing left, and a zero cap
  CHECK(iov_slice(in, 4, 22, out) == 0);
  CHECK(iov_slice(in, 4, 0, out, 0) == 0);
  // more elements than one pass takes
  std::vector<iovec> many(kMaxIov + 5, iovec{a, 1});
  CHECK(iov_slice(many.data(), static_cast<int>(many.size()), 2, out) == kMaxIov);
  CHECK(xp::stream::iov_total_len(out, kMaxIov) == kMaxIov);
}

TEST_CASE("conn io: bytes before, across and after both switches arrive once, in order") {
  for (unsigned seed = 1; seed <= 12; ++seed) {
    CAPTURE(seed);
    Pair p(true);
    const uint64_t total = 300000 + seed * 7777;
    run(p, total, seed);
    CHECK(p.a.got == total);
    CHECK(p.b.got == total);
    CHECK(p.a.bad == 0);
    CHECK(p.b.bad == 0);
    // Both directions moved to the stream once the proofs verified.
    CHECK(p.a.c->tx_rdma.load());
    CHECK(p.b.c->tx_rdma.load());
    CHECK(p.a.c->rx_rdma.load());
    CHECK(p.b.c->rx_rdma.load());
    CHECK(p.a.c->phase.load() == Phase::rdma);
    CHECK(p.la.rnr == 0);
    CHECK(p.lb.rnr == 0);
  }
}

TEST_CASE("conn io: a peer that never binds leaves the connection on TCP, bytes intact") {
  Pair p(false); // no channel binding: the sessions stay idle
  {
    std::lock_guard<std::mutex> l(p.a.c->mu);
    engine::fail(p.a.c, Reason::peer_not_accelerated);
  }
  {
    std::lock_guard<std::mutex> l(p.b.c->mu);
    engine::fail(p.b.c, Reason::peer_not_accelerated);
  }
  CHECK(p.a.c->phase.load() == Phase::tcp);
  run(p, 200000, 99);
  CHECK(p.a.got == 200000);
  CHECK(p.b.got == 200000);
  CHECK(p.a.bad + p.b.bad == 0);
}

TEST_CASE("conn io: end of stream, half-close and reset over the stream") {
  Pair p(true);
  run(p, 5000, 7);
  settle(p, [&] { return (p.a.c->tx_rdma.load() && p.b.c->rx_rdma.load()); });
  REQUIRE(p.a.c->tx_rdma.load());
  REQUIRE(p.b.c->rx_rdma.load());
  bool kernel = false;
  REQUIRE(xp::test::call_shutdown(p.a.c, SHUT_WR, &kernel) == 0);
  CHECK_FALSE(kernel);
  engine::progress(p.b.ch);
  char buf[16];
  iovec v{buf, sizeof buf};
  CHECK(xp::test::call_recv(p.b.c, &v, 1, MSG_DONTWAIT, &kernel) == 0); // EOF after the bytes
  // Writing after our own half-close: EPIPE (MSG_NOSIGNAL: no signal).
  CHECK(xp::test::call_send(p.a.c, &v, 1, MSG_DONTWAIT | MSG_NOSIGNAL, &kernel) == -1);
  CHECK(errno == EPIPE);
  // The other direction still flows.
  CHECK(put(p.b, 100) == 100);
  engine::progress(p.a.ch);
  CHECK(take(p.a, 100, 1) == 100);
  // A reset from the peer: ECONNRESET.
  {
    std::lock_guard<std::mutex> l(p.b.ch->mu);
    p.b.c->st->reset();
  }
  engine::progress(p.a.ch);
  CHECK(xp::test::call_recv(p.a.c, &v, 1, MSG_DONTWAIT, &kernel) == -1);
  CHECK(errno == ECONNRESET);
}

TEST_CASE("conn io: nothing to read is EAGAIN for a non-blocking read, in every phase") {
  Pair p(true);
  char buf[8];
  iovec v{buf, sizeof buf};
  bool kernel = false;
  CHECK(xp::test::call_recv(p.a.c, &v, 1, MSG_DONTWAIT, &kernel) == -1);
  CHECK(errno == EAGAIN);
  run(p, 3000, 3);
  settle(p, [&] { return p.a.c->rx_rdma.load(); });
  REQUIRE(p.a.c->rx_rdma.load());
  CHECK(xp::test::call_recv(p.a.c, &v, 1, MSG_DONTWAIT, &kernel) == -1);
  CHECK(errno == EAGAIN);
  // Urgent data always travels on TCP: the kernel answers MSG_OOB.
  xp::test::call_recv(p.a.c, &v, 1, MSG_DONTWAIT | MSG_OOB, &kernel);
  CHECK(kernel);
}

TEST_CASE("conn io: readiness never outlives the TCP bytes (select, then a blocking read)") {
  // A reader that takes exactly what arrived must not leave the socket
  // "readable": the next select() would send it into a read that blocks.
  Pair p(false);
  REQUIRE(put(p.a, 100) == 100);
  for (size_t want : {40u, 60u}) {
    p.b.c->tcp_bits.fetch_or(EPOLLIN); // the engine's edge for the arrival
    CHECK(take(p.b, want, 0) == want);
  }
  CHECK((p.b.c->ready_events() & EPOLLIN) == 0);
  REQUIRE(put(p.a, 10) == 10);
  p.b.c->tcp_bits.fetch_or(EPOLLIN);
  CHECK(take(p.b, 4, 0) == 4); // bytes remain: still readable
  CHECK((p.b.c->ready_events() & EPOLLIN) != 0);
  CHECK(p.a.bad + p.b.bad == 0);
}

// A second stream (id 7) on b's channel, beside b's own connection.
struct SecondStream {
  Pair& p;
  Conn* other = new Conn(-1, params(recover::Role::server, 3));
  explicit SecondStream(Pair& pair) : p(pair) {
    {
      std::lock_guard<std::mutex> l(p.b.ch->mu);
      other->st = p.b.ch->mux->open(7, 0, 0);
      REQUIRE(other->st != nullptr);
      other->st->owner = other;
      p.b.ch->conns.push_back(other);
      other->ref();
    }
    other->ch = p.b.ch;
    other->sid = 7;
    other->rx_rdma.store(true);
    other->tx_rdma.store(true);
  }
  ~SecondStream() {
    {
      std::lock_guard<std::mutex> l(p.b.ch->mu);
      p.b.ch->mux->close(other->st);
      p.b.ch->conns.pop_back();
      other->st = nullptr;
    }
    other->unref();
    other->unref();
  }
};

TEST_CASE("conn io: a record one stream's reader polls in wakes the other stream's sleeper") {
  // Two streams share b's channel.  A reader of the second one polls the
  // channel and finds data for the first: whoever sleeps waiting for the
  // first must be woken, although its readiness was recomputed by that
  // other thread (a change seen once is not seen again).
  Pair p(true);
  run(p, 3000, 5);
  settle(p, [&] { return p.b.c->rx_rdma.load(); });
  REQUIRE(p.b.c->rx_rdma.load());
  SecondStream two(p);
  Conn* other = two.other;
  int efd = wake::thread_fd();
  REQUIRE(efd >= 0);
  wake::drain(efd);
  REQUIRE(wake::add(efd));
  REQUIRE(put(p.a, 64) == 64); // for b's first stream, not for `other`
  char buf[8];
  iovec v{buf, sizeof buf};
  bool kernel = false;
  CHECK(xp::test::call_recv(other, &v, 1, MSG_DONTWAIT, &kernel) == -1); // nothing for it...
  pollfd pf{efd, POLLIN, 0};
  CHECK(poll(&pf, 1, 0) == 1); // ...but b's sleeper was told
  wake::remove(efd);
  CHECK(take(p.b, 64, 0) == 64);
}

TEST_CASE("conn io: a watcher that names its connections sleeps through the others' bytes") {
  // poll() and epoll_wait() over a few user-mode fds register under those
  // connections' keys (their ReadySource, where a Conn starts): a change of
  // another connection of the process does not wake them.  Registered for
  // anything, 4 threads each polling its own connection over one channel
  // were all woken by every answer.
  Pair p(true);
  run(p, 3000, 11);
  settle(p, [&] { return p.b.c->rx_rdma.load(); });
  REQUIRE(p.b.c->rx_rdma.load());
  SecondStream two(p);
  const void* mine = static_cast<stream::ReadySource*>(two.other);
  CHECK(mine == static_cast<const void*>(two.other)); // the key notify() is given
  engine::progress(p.b.ch); // the new stream's first readiness (writable) is seen
  int efd = wake::thread_fd();
  REQUIRE(efd >= 0);
  wake::drain(efd);
  REQUIRE(wake::add_watch(efd, &mine, 1));
  CHECK(wake::any_sleepers()); // the channel stays armed for it (channel_events.cc)
  pollfd pf{efd, POLLIN, 0};
  REQUIRE(put(p.a, 64) == 64); // for b's first stream
  engine::progress(p.b.ch);
  CHECK((p.b.c->ready_events() & EPOLLIN) != 0);
  CHECK(poll(&pf, 1, 0) == 0); // not ours: asleep still
  wake::notify();              // a change announced to all (a mode change)
  CHECK(poll(&pf, 1, 0) == 1);
  wake::drain(efd);
  wake::remove(efd);
  CHECK_FALSE(wake::any_sleepers());
  // Both keys: b's bytes wake it, once per change however many keys match.
  const void* both[2] = {mine, static_cast<stream::ReadySource*>(p.b.c)};
  REQUIRE(wake::add_watch(efd, both, 2));
  CHECK(take(p.b, 64, 0) == 64);
  REQUIRE(put(p.a, 64) == 64);
  engine::progress(p.b.ch);
  CHECK(poll(&pf, 1, 0) == 1);
  wake::remove(efd); // every registration of efd
  wake::drain(efd);
  wake::notify();
  CHECK(poll(&pf, 1, 0) == 0);
  CHECK_FALSE(wake::add_watch(efd, both, 0)); // no keys: not a watch
  CHECK(take(p.b, 64, 0) == 64);
  CHECK(p.a.bad + p.b.bad == 0);
}

TEST_CASE("conn io: readiness that only goes away wakes no sleeper") {
  // A sleeper for anything (an epoll or poll waiter of this process) is
  // woken by bytes arriving, but not by a reader taking them: nobody waits
  // for less readiness, and an epoll thread woken for every receive of
  // every other thread's connections is a wake-up per call.
  Pair p(true);
  run(p, 3000, 7);
  settle(p, [&] { return p.b.c->rx_rdma.load() && p.a.c->tx_rdma.load(); });
  REQUIRE(p.b.c->rx_rdma.load());
  int efd = wake::thread_fd();
  REQUIRE(efd >= 0);
  wake::drain(efd);
  REQUIRE(wake::add(efd));
  pollfd pf{efd, POLLIN, 0};
  REQUIRE(put(p.a, 64) == 64);
  engine::progress(p.b.ch); // the bytes arrive: a change to wake for
  CHECK(poll(&pf, 1, 0) == 1);
  CHECK((p.b.c->ready_events() & EPOLLIN) != 0);
  wake::drain(efd);
  CHECK(take(p.b, 64, 0) == 64); // the reader takes them: readiness goes away
  CHECK((p.b.c->ready_events() & EPOLLIN) == 0);
  CHECK(poll(&pf, 1, 0) == 0);
  REQUIRE(put(p.a, 64) == 64); // and the next bytes wake again
  engine::progress(p.b.ch);
  CHECK(poll(&pf, 1, 0) == 1);
  wake::remove(efd);
  wake::drain(efd);
  CHECK(take(p.b, 64, 0) == 64);
  CHECK(p.a.bad + p.b.bad == 0);
}

TEST_CASE("conn io: a blocked read leaves a channel someone spins on to the spinner") {
  // Regression: xpress-bench's server had a thread blocked reading its idle
  // control connection while another thread ping-ponged over the same
  // channel.  The blocked read slept on the channel's completion fd, so it
  // armed the queue the spinner keeps unarmed and woke for every message
  // (ppoll, read, ioctl, two epoll_ctl and the channel lock each time, on
  // the spinner's CPU).  With a spinner at work it sleeps on its eventfd
  // alone: the spinner's polling wakes it when its own bytes come.
  Pair p(true);
  run(p, 3000, 5);
  settle(p, [&] { return p.b.c->rx_rdma.load(); });
  REQUIRE(p.b.c->rx_rdma.load());
  while (take(p.b, 4096, 0) > 0) { // nothing left to read: the call blocks
  }
  p.lb.event_fd = static_cast<int>(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  REQUIRE(p.lb.event_fd >= 0);
  std::atomic<ssize_t> got{-2};
  std::vector<char> buf(64);
  auto blocked_read = [&] {
    iovec v{buf.data(), buf.size()};
    bool kernel = false;
    got = xp::test::call_recv(p.b.c, &v, 1, 0, &kernel); // blocking
  };
  uint64_t one = 1;
  pollfd pf{p.lb.event_fd, POLLIN, 0};
  auto deliver = [&] { // bytes for the sleeper's stream, polled in by this thread
    REQUIRE(put(p.a, 64) == 64);
    for (int i = 0; i < 2000 && got.load() == -2; ++i) {
      engine::progress(p.b.ch);
      usleep(1000);
    }
  };
  SUBCASE("nobody else polls: the call that spun last sleeps on the completion fd") {
    std::thread sleeper(blocked_read);
    usleep(50 * 1000); // past its own spin: asleep
    REQUIRE(write(p.lb.event_fd, &one, sizeof one) == sizeof one);
    // It takes the event when it sleeps, or at once when asleep already: on
    // a loaded host (a sanitizer build, other processes on the CPUs) its
    // spin and its first sleep may come later than any fixed wait.
    for (int i = 0; i < 10000 && poll(&pf, 1, 0) == 1; ++i)
      usleep(1000);
    CHECK(poll(&pf, 1, 0) == 0); // it took the event
    deliver();
    sleeper.join();
    CHECK(got.load() == 64);
  }
  SUBCASE("another thread spins on the channel: the event is left to it") {
    engine::spin_enter(p.b.ch); // this thread: the other stream's spinner
    std::thread sleeper(blocked_read);
    usleep(50 * 1000);
    REQUIRE(write(p.lb.event_fd, &one, sizeof one) == sizeof one); // a message for the spinner
    usleep(50 * 1000);
    CHECK(poll(&pf, 1, 0) == 1); // the sleeper did not take it
    CHECK(got.load() == -2);
    deliver(); // the spinner's polling wakes it
    sleeper.join();
    CHECK(got.load() == 64);
    engine::spin_leave(p.b.ch);
  }
  close(p.lb.event_fd);
  p.lb.event_fd = -1;
}

TEST_CASE("conn io: the engine never waits for a channel lock a sender holds") {
  // Regression: the engine thread took a completion event while a sender
  // held the channel's lock, waited for it, was handed it and lost it to
  // the sender again, dozens of times per event (4 KiB stream on
  // Soft-RoCE: 600 futex waits a second, each a context switch on the
  // sender's CPU).  It now leaves the poll owed and does not block; the
  // sender pays it under the lock it holds, or the engine's retry does.
  Pair p(true);
  a_on_rdma_drained(p, 7);
  {
    std::unique_lock<std::mutex> held(p.a.ch->mu); // a sender at work
    CHECK(returns_while_held([&] { engine::take_event(p.a.ch, true); }, held));
  }
  CHECK(p.a.ch->poll_owed.load() == 1);
  CHECK(engine::polls_owed());
  // Bytes for a arrive; its sender, holding the lock, pays the owed poll.
  uint64_t before = p.a.c->st->received();
  REQUIRE(put(p.b, 64) == 64);
  REQUIRE(put(p.a, 64) == 64);
  CHECK(p.a.ch->poll_owed.load() == 0);
  CHECK(p.a.c->st->received() == before + 64);
  CHECK(take(p.a, 64, 1) == 64);
  // Owed again with nobody sending: the engine's retry pays it.
  engine::owe_poll(p.a.ch);
  REQUIRE(put(p.b, 32) == 32);
  engine::pay_owed_polls();
  CHECK(p.a.ch->poll_owed.load() == 0);
  CHECK_FALSE(engine::polls_owed());
  CHECK(p.a.c->st->received() == before + 96);
  CHECK(take(p.a, 32, 1) == 32);
  CHECK(p.a.bad == 0);
}

TEST_CASE("conn io: a sender polls an unarmed channel itself, and keeps it unarmed") {
  // 4 KiB stream on Soft-RoCE: every credit and acknowledgement raised a
  // completion event, and each woke the sender's engine thread on the
  // sender's CPU, which also does Soft-RoCE's work.  A thread that sends
  // now polls an unarmed channel on each send (what it needs, its credit
  // and acknowledgements, is among what arrives), and an event taken
  // while it sends leaves the channel unarmed: 0.19 -> 0.20 Gb/s, client
  // CPU per GB -12%.  Unless someone polled it since the previous send:
  // in a request/response loop the receive just did, and a poll per send
  // cost a provider call per message for nothing.
  Pair p(true);
  a_on_rdma_drained(p, 11);
  p.a.ch->armed.store(false); // an event was taken and not re-armed
  uint64_t before = p.a.c->st->received();
  REQUIRE(put(p.a, 16) == 16); // the first send after a's receive polled
  take(p.a, 64, 1);            // a's receive polls (nothing there)
  uint64_t polls = p.a.ch->polls;
  REQUIRE(put(p.a, 16) == 16); // ... so this send does not
  CHECK(p.a.ch->polls == polls);
  REQUIRE(put(p.b, 64) == 64); // arrives unannounced
  REQUIRE(put(p.a, 64) == 64); // nobody polled since a's last send: it looks
  CHECK(p.a.ch->polls == polls + 1);
  CHECK(p.a.c->st->received() == before + 64);
  CHECK(engine::sent_lately(p.a.ch));
  CHECK(take(p.a, 64, 1) == 64);
  // Armed: the event's taker polls, not the sender.
  p.a.ch->armed.store(true);
  REQUIRE(put(p.b, 32) == 32);
  REQUIRE(put(p.a, 32) == 32);
  CHECK(p.a.c->st->received() == before + 64);
  engine::progress(p.a.ch);
  CHECK(p.a.c->st->received() == before + 96);
  CHECK(take(p.a, 32, 1) == 32);
  CHECK(p.a.bad == 0);
  // Long after the last send, nobody keeps it unarmed.
  p.a.ch->last_send_ns.store(0);
  CHECK_FALSE(engine::sent_lately(p.a.ch));
}

TEST_CASE("conn io: the engine's tick leaves a busy stream's locks alone") {
  // Regression: every 10 ms tick (it ticks that often while a channel
  // stays unarmed for its spinner) locked each connection, each channel
  // for the keepalive, and polled each channel: a request/response loop's
  // thread then waited for the engine in the futex, or the engine for it.
  Pair p(true);
  run(p, 3000, 9);
  settle(p, [&] {
    return p.a.c->rx_rdma.load() && p.a.c->tx_rdma.load() && p.b.c->rx_rdma.load() &&
           p.b.c->tx_rdma.load();
  });
  REQUIRE(p.a.c->tx_rdma.load());
  REQUIRE(p.a.c->rx_rdma.load());
  uint32_t saved_ka = engine::g().p.keepalive_ms;
  engine::g().p.keepalive_ms = 3000;
  {
    std::lock_guard<std::mutex> g(engine::g().mu);
    p.a.c->ref(); // as the engine's table holds it
    engine::g().conns.push_back(p.a.c);
  }
  uint64_t now = engine::now_ms();
  engine::tick_conns(now); // the keepalive's look for this period
  engine::spin_enter(p.a.ch);
  engine::spin_enter(p.b.ch);
  {
    // The loop's thread at work on both ends.
    std::unique_lock<std::mutex> lc(p.a.c->mu), la(p.a.ch->mu), lb(p.b.ch->mu);
    CHECK(returns_while_held([&] { engine::tick_conns(now + 10); }, lb, la, lc));
  }
  {
    // The keepalive's next look is due, and the locks are still held: it
    // waits for a tick that finds them free instead of for the lock.
    const uint64_t due = now + 3000 / 6 + 1;
    const uint64_t checked_a = p.a.ch->ka_checked_ms;
    std::unique_lock<std::mutex> lc(p.a.c->mu), la(p.a.ch->mu), lb(p.b.ch->mu);
    CHECK(returns_while_held([&] { engine::tick_conns(due); }, lb, la, lc));
    CHECK(p.a.ch->ka_checked_ms == checked_a); // not looked at yet
    engine::tick_conns(due + 10);              // free now: the look happens
    CHECK(p.a.ch->ka_checked_ms == due + 10);
    CHECK_FALSE(p.a.ch->failed.load());
  }
  engine::spin_leave(p.a.ch);
  engine::spin_leave(p.b.ch);
  {
    std::lock_guard<std::mutex> g(engine::g().mu);
    auto& v = engine::g().conns;
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i] == p.a.c) v.erase(v.begin() + static_cast<long>(i));
  }
  p.a.c->unref();
  engine::g().p.keepalive_ms = saved_ka;
}

TEST_CASE("conn io: the switches themselves are no EPOLLET edge") {
  // A reader with EPOLLET sees an edge for bytes and for conditions that
  // appear; the peer's SWITCH moving the stream's sequence to S, or our
  // own direction switching, changes neither.
  Pair p(true);
  REQUIRE(put(p.b, 64) == 64); // 64 bytes each way: what the proofs cover
  CHECK(take(p.a, 64, 1) == 64);
  REQUIRE(put(p.a, 64) == 64);
  CHECK(take(p.b, 64, 0) == 64); // the server read the TCP bytes: proofs can verify
  p.b.c->note_ready(false);      // as the engine's watch of the socket would
  const uint32_t gen0 = p.b.c->ready_gen(EPOLLIN | EPOLLET);
  settle(p, [&] { return (p.b.c->rx_rdma.load() && p.b.c->tx_rdma.load()); });
  REQUIRE(p.b.c->rx_rdma.load());
  REQUIRE(p.b.c->tx_rdma.load());
  CHECK((p.b.c->ready_events() & EPOLLIN) == 0);
  CHECK(p.b.c->ready_gen(EPOLLIN | EPOLLET) == gen0);
  REQUIRE(put(p.a, 5) == 5); // new bytes over RDMA: an edge
  engine::progress(p.b.ch);
  CHECK(p.b.c->ready_gen(EPOLLIN | EPOLLET) != gen0);
  CHECK(take(p.b, 5, 0) == 5);
}

TEST_CASE("conn io: room to write appearing is no EPOLLIN edge") {
  // The kernel wakes an EPOLLIN|EPOLLET registration only for read events;
  // our direction switching to RDMA (room appears on the stream) while TCP
  // bytes are still unread must not report them a second time (found by
  // the semantics suite over RDMA: epoll_edge_triggered).
  Pair p(true);
  REQUIRE(put(p.b, 64) == 64); // 64 bytes each way: what the proofs cover
  CHECK(take(p.a, 64, 1) == 64);
  REQUIRE(put(p.a, 64) == 64);
  CHECK(take(p.b, 64, 0) == 64);
  settle(p, [&] { return (p.b.c->rx_rdma.load() && p.b.c->tx_rdma.load()); });
  REQUIRE(put(p.a, 5) == 5);
  engine::progress(p.b.ch);
  REQUIRE((p.b.c->ready_events() & EPOLLIN) != 0);
  p.b.c->last_ready.fetch_and(~static_cast<uint32_t>(EPOLLOUT)); // as after EAGAIN on a send
  const uint32_t in0 = p.b.c->ready_gen(EPOLLIN | EPOLLET);
  const uint32_t out0 = p.b.c->ready_gen(EPOLLOUT | EPOLLET);
  p.b.c->note_ready(false); // room again
  CHECK(p.b.c->ready_gen(EPOLLIN | EPOLLET) == in0);
  CHECK(p.b.c->ready_gen(EPOLLOUT | EPOLLET) != out0);
  CHECK(take(p.b, 5, 0) == 5);
}

TEST_CASE("conn io: TCP bytes are one EPOLLET edge, whoever notices them first") {
  // A channel event (the peer's SWITCH) may look at readiness after TCP
  // bytes arrived but before the engine's watch of the socket reports
  // them: the bytes are that edge, and the socket's wake-up for the same
  // bytes is none (found by the semantics suite over RDMA:
  // epoll_edge_triggered told the reader of 'xyz' twice).
  Pair p(true, /*tcp=*/true);
  REQUIRE(!p.a.c->tx_rdma.load());
  REQUIRE(::send(p.a.c->fd, "xyz", 3, 0) == 3); // before a's switch: TCP
  pollfd pf{p.b.c->fd, POLLIN, 0};
  REQUIRE(poll(&pf, 1, 2000) == 1);
  const uint32_t gen0 = p.b.c->ready_gen(EPOLLIN | EPOLLET);
  p.b.c->note_ready(false); // a channel event's refresh
  const uint32_t gen1 = p.b.c->ready_gen(EPOLLIN | EPOLLET);
  CHECK(gen1 != gen0);
  engine::tcp_event(p.b.c, EPOLLIN); // the socket's wake-up for the same bytes
  CHECK(p.b.c->ready_gen(EPOLLIN | EPOLLET) == gen1);
  REQUIRE(::send(p.a.c->fd, "q", 1, 0) == 1); // more bytes: an edge
  REQUIRE(poll(&pf, 1, 2000) == 1);
  engine::tcp_event(p.b.c, EPOLLIN);
  CHECK(p.b.c->ready_gen(EPOLLIN | EPOLLET) != gen1);
}

TEST_CASE("conn io: room opening after a full window is an EPOLLET edge") {
  // A non-blocking writer that got EAGAIN waits for EPOLLOUT with EPOLLET
  // (nginx): the acknowledgements that open the window must be an edge,
  // although the stream was writable when readiness was last looked at.
  Pair p(true);
  run(p, 3000, 9);
  settle(p, [&] { return (p.a.c->tx_rdma.load() && p.b.c->rx_rdma.load()); });
  REQUIRE(p.a.c->tx_rdma.load());
  size_t n = 0;
  for (int i = 0; i < 1000; ++i) {
    size_t w = put(p.a, 60000);
    n += w;
    if (w < 60000) break; // EAGAIN: the window is full
  }
  CHECK((p.a.c->ready_events() & EPOLLOUT) == 0);
  const uint32_t gen0 = p.a.c->ready_gen(EPOLLOUT | EPOLLET);
  while (take(p.b, 65536, 0) > 0) { // the reader drains: acks go back
    engine::progress(p.b.ch);
    engine::progress(p.a.ch);
  }
  engine::progress(p.a.ch);
  CHECK((p.a.c->ready_events() & EPOLLOUT) != 0);
  CHECK(p.a.c->ready_gen(EPOLLOUT | EPOLLET) != gen0);
  CHECK(p.b.bad == 0);
}

TEST_CASE("conn io: O_NONBLOCK and SO_RCVTIMEO set after a blocking call are honoured") {
  // The connection keeps its own copy of the file's flags and timeouts
  // (one fcntl and two getsockopt saved per blocking call); every change
  // made through the interposed calls must reach it.
  Pair p(true);
  run(p, 3000, 5);
  settle(p, [&] { return p.a.c->rx_rdma.load(); });
  REQUIRE(p.a.c->rx_rdma.load());
  char buf[8];
  iovec v{buf, sizeof buf};
  bool kernel = false;
  timeval tv{0, 300 * 1000};
  REQUIRE(setsockopt(p.fds[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0);
  io::fd_options_changed(); // what the setsockopt wrapper does
  auto t0 = std::chrono::steady_clock::now();
  CHECK(xp::test::call_recv(p.a.c, &v, 1, 0, &kernel) == -1); // blocks 300 ms, then EAGAIN
  CHECK(errno == EAGAIN);
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(250));
  int fl = fcntl(p.fds[0], F_GETFL);
  REQUIRE(fcntl(p.fds[0], F_SETFL, fl | O_NONBLOCK) == 0);
  io::fd_options_changed(); // what the fcntl wrapper does
  t0 = std::chrono::steady_clock::now();
  CHECK(xp::test::call_recv(p.a.c, &v, 1, 0, &kernel) == -1); // at once: non-blocking now
  CHECK(errno == EAGAIN);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(150));
}

// The hot path of a request/response loop over a bound stream: 64-byte
// send, non-blocking recv polling the channel, reply, recv; then receives
// that find nothing (a blocked receiver's spin).  Also the loops
// bench/hotpath.sh counts the instructions of (XPRESS_HOTPATH_ROUNDS round
// trips and XPRESS_HOTPATH_EMPTY empty receives instead of a few hundred).
TEST_CASE("conn io: 64-byte ping-pong over a bound stream, every byte in order") {
  Pair p(true);
  a_on_rdma_drained(p, 7);
  settle(p, [&] { return p.b.c->rx_rdma.load() && p.b.c->tx_rdma.load(); });
  REQUIRE(p.b.c->rx_rdma.load());
  REQUIRE(p.b.c->tx_rdma.load());
  while (take(p.b, 4096, 0) > 0) {
  }
  // As in a request/response loop, where the receiver spins: completion
  // events off (channel_events.cc), so a sender polls the channel itself.
  p.a.ch->armed.store(false);
  p.b.ch->armed.store(false);
  long rounds = 300;
  if (const char* e = getenv("XPRESS_HOTPATH_ROUNDS")) rounds = atol(e);
  char msg[64], got[64];
  bool ok = true;
  auto one_way = [&](End& from, End& to, long i) {
    memset(msg, static_cast<int>(i), sizeof msg);
    iovec v{msg, sizeof msg};
    bool kernel = false;
    if (xp::test::call_send(from.c, &v, 1, MSG_DONTWAIT, &kernel) != 64 || kernel) return false;
    size_t n = 0;
    for (int tries = 0; n < sizeof got && tries < 1000; ++tries) {
      iovec r{got + n, sizeof got - n};
      ssize_t k = xp::test::call_recv(to.c, &r, 1, MSG_DONTWAIT, &kernel);
      if (kernel) return false;
      if (k > 0) n += static_cast<size_t>(k);
    }
    return n == sizeof got && memcmp(msg, got, sizeof got) == 0;
  };
  for (long i = 0; i < rounds && ok; ++i)
    ok = one_way(p.a, p.b, i) && one_way(p.b, p.a, i + 1);
  CHECK(ok);
  long empty = 300;
  if (const char* e = getenv("XPRESS_HOTPATH_EMPTY")) empty = atol(e);
  for (long i = 0; i < empty && ok; ++i) {
    iovec r{got, sizeof got};
    bool kernel = false;
    ok = xp::test::call_recv(p.a.c, &r, 1, MSG_DONTWAIT, &kernel) == -1 && errno == EAGAIN &&
         !kernel;
  }
  CHECK(ok);
  CHECK(p.a.c->tx_rdma.load());
  CHECK(p.b.c->tx_rdma.load());
}

TEST_CASE("conn io: no direction of ours switches after the close counted the upgrade") {
  // The VM's iperf3 -P 4 -R run: the control connection reached its proofs'
  // coverage in its last exchange, the program closed it (this end counted
  // closed_during_upgrade), and the engine switched its direction after
  // that: a SWITCH the peer may take, counting the connection on RDMA.
  Pair p(true);
  auto exchange = [&](End& from, End& to, int from_dir) {
    for (int i = 0; i < 1000 && from.sent < 100; ++i)
      put(from, 100 - from.sent);
    for (int i = 0; i < 1000 && to.got < 100; ++i)
      take(to, 4096, from_dir);
    REQUIRE(to.got == 100);
  };
  exchange(p.a, p.b, 0);
  exchange(p.b, p.a, 1);
  REQUIRE_FALSE(p.a.c->tx_rdma.load());
  // Both ends reached (64, 64): the close is not short of bytes.
  CHECK_FALSE(engine::stop_switching(p.a.c));
  settle(p, [&] { return p.b.c->tx_rdma.load() && p.a.c->rx_rdma.load(); });
  // The proofs crossed (b switched on a's PROOF, and a took b's SWITCH) ...
  CHECK(p.b.c->tx_rdma.load());
  CHECK(p.a.c->sess.peer_proven());
  // ... but a's direction stayed on TCP, and b never saw a SWITCH of a's.
  CHECK_FALSE(p.a.c->tx_rdma.load());
  CHECK(p.a.c->sess.tx_mode() == Mode::tcp);
  CHECK(p.b.c->sess.rx_mode() == Mode::tcp);
  CHECK(p.a.bad == 0);
  CHECK(p.b.bad == 0);
}
