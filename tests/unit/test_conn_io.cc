// The socket data calls of an upgrading connection (stream/conn_io.cc and
// the engine's control handling) over a fake transport: a socketpair plays
// the TCP connection, a FakeLink pair the RDMA channel.  Bytes written
// before, during and after each direction's switch must arrive exactly
// once and in order, whatever the interleaving of writes, reads and
// channel progress; a peer that never proves itself leaves the connection
// on TCP with every byte intact.
#include <doctest/doctest.h>

#include "conn_io_pair.h"

using namespace xp;
using namespace xp::stream;
using namespace xp::stream::conn_io_test;

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
    p.b.c->ready.tcp_bits.fetch_or(EPOLLIN); // the engine's edge for the arrival
    CHECK(take(p.b, want, 0) == want);
  }
  CHECK((p.b.c->ready_events() & EPOLLIN) == 0);
  REQUIRE(put(p.a, 10) == 10);
  p.b.c->ready.tcp_bits.fetch_or(EPOLLIN);
  CHECK(take(p.b, 4, 0) == 4); // bytes remain: still readable
  CHECK((p.b.c->ready_events() & EPOLLIN) != 0);
  CHECK(p.a.bad + p.b.bad == 0);
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
