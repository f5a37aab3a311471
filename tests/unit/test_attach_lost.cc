// A client's ATTACH over a channel whose process goes away before it
// answers (docs/protocol.md §7 "A fork child that holds an accepted
// connection"): pgbench's first connection is served by one PostgreSQL
// backend, which exits when pgbench closes it; pgbench's next connections
// find the channel to that backend still up and attach over it.  The
// channel then fails (disconnected) with nothing bound, and the connection
// asks rdma_cm instead, which redirects it to the backend that holds it.
// Before, it stayed on TCP (rdma_error_fallback), and its backend, never
// asked, counted peer_not_accelerated.  The engine's tables driven by hand
// as its thread would (as test_admission.cc).
#include <doctest/doctest.h>

#include <algorithm>
#include <arpa/inet.h>
#include <cstring>
#include <mutex>

#include "fake_link.h"
#include "recover/rendezvous_wire.h"
#include "resume_pair.h"
#include "stream/engine_internal.h"

using namespace xp;
using namespace xp::stream;

namespace {

// A client channel to c's server, in the engine's table, as an earlier
// connection's rdma_cm attempt left it.
struct ClientChannel {
  test::LinkPair links{1 << 20};
  Channel* ch = nullptr;
  explicit ClientChannel(const Conn* c) {
    std::lock_guard<std::mutex> g(engine::g().mu);
    ch = engine::make_channel(engine::g(), &links.la, true);
    REQUIRE(ch != nullptr);
    ch->peer_addr = recover::server_addr(c->tuple);
    ch->peer_port = c->tuple.server_port;
    ch->local_addr = recover::client_addr(c->tuple);
  }
  ~ClientChannel() {
    std::lock_guard<std::mutex> g(engine::g().mu);
    engine::g().chans.free_now(ch);
  }
};

// Whether c waits in the engine's start queue (its reference taken out).
bool take_queued(Conn* c) {
  std::lock_guard<std::mutex> q(engine::g().qmu);
  auto& v = engine::g().start_queue;
  auto it = std::find(v.begin(), v.end(), c);
  if (it == v.end()) return false;
  v.erase(it);
  c->unref();
  return true;
}

void attach(Conn* c, Channel* ch) {
  {
    std::lock_guard<std::mutex> g(engine::g().mu);
    engine::start_client(engine::g(), c);
  }
  REQUIRE(c->ch == ch);
  REQUIRE(c->sess.state() == recover::State::attaching);
}

} // namespace

TEST_CASE("attach: a channel that fails before the ATTACH's answer: rdma_cm next") {
  Conn* c = new Conn(-1, test::rparams(recover::Role::client, 21));
  {
    ClientChannel cc(c);
    attach(c, cc.ch);
    {
      std::lock_guard<std::mutex> l(c->mu);
      c->deadline_ms = 1; // the ATTACH waited longer than a handshake
    }
    engine::channel_failed(cc.ch, ResumeCause::disconnected);
    CHECK(c->phase.load() == Phase::upgrading);
    // A fresh handshake's time: the engine's tick must not end the retry
    // before it starts.
    CHECK(c->deadline_ms > engine::now_ms());
    CHECK(c->ch == nullptr);
    CHECK(c->st == nullptr);
    CHECK(cc.ch->conns.empty());
    CHECK(c->rv.attach_refused); // start_client goes to rdma_cm, not to another ATTACH
    CHECK(c->sess.state() == recover::State::refused);
    CHECK(take_queued(c));
  }
  engine::on_close(c);
  c->unref();
}

TEST_CASE("attach: once only; a bound stream's channel that fails keeps it on TCP") {
  SUBCASE("rdma_cm tried already") {
    Conn* c = new Conn(-1, test::rparams(recover::Role::client, 22));
    c->rv.cm_tried = true;
    {
      ClientChannel cc(c);
      attach(c, cc.ch);
      engine::channel_failed(cc.ch, ResumeCause::disconnected);
      CHECK(c->phase.load() == Phase::tcp);
      CHECK(c->reason == Reason::rdma_error_fallback);
      CHECK_FALSE(take_queued(c));
    }
    engine::on_close(c);
    c->unref();
  }
  SUBCASE("the server's ACK came: bound there, nothing to start over") {
    Conn* c = new Conn(-1, test::rparams(recover::Role::client, 23));
    {
      ClientChannel cc(c);
      attach(c, cc.ch);
      // The server's session answers the ATTACH (its own nonce).
      recover::UpgradeSession srv(test::rparams(recover::Role::server, 24));
      recover::Message m, ack;
      {
        std::lock_guard<std::mutex> l(c->mu);
        // The ATTACH itself left with start_client; rebuild it for the
        // server from a fresh client session with the same parameters.
        recover::UpgradeSession twin(test::rparams(recover::Role::client, 23));
        REQUIRE(twin.start_attach(c->sid, &m) == Status::ok);
        REQUIRE(srv.on_attach(m.stream, m.seq, m.payload, m.len, &ack) == Status::ok);
        REQUIRE(c->sess.on_message(ack.type, ack.stream, ack.seq, ack.payload, ack.len) ==
                Status::ok);
        REQUIRE(c->sess.state() != recover::State::attaching);
      }
      engine::channel_failed(cc.ch, ResumeCause::disconnected);
      CHECK(c->phase.load() == Phase::tcp);
      CHECK(c->reason == Reason::rdma_error_fallback);
      CHECK_FALSE(take_queued(c));
    }
    engine::on_close(c);
    c->unref();
  }
}

TEST_CASE("attach: an ATTACH that comes after the server's timer costs that stream only") {
  // A burst of connects (2,000 in the Soft-RoCE VM): the server's wait for
  // this connection's ATTACH ended (handshake timer, the connection on TCP)
  // before the ATTACH came over a channel that carries another stream on
  // RDMA.  The server answers NAK; the client's connection stays on TCP with
  // every byte, and the channel and its other stream go on over RDMA at both
  // ends (docs/protocol.md §1).
  {
    test::RPair p;
    REQUIRE(test::rput(p.a, 3000) == 3000); // what the binding covers
    REQUIRE(test::rput(p.b, 3000) == 3000);
    while (p.a.got < 3000 || p.b.got < 3000) {
      test::rtake(p.a, 65536, 1);
      test::rtake(p.b, 65536, 0);
    }
    test::settle_switches(p);
    REQUIRE(p.a.c->tx_rdma.load());
    REQUIRE(p.b.c->rx_rdma.load());
    const recover::SessionParams ps = recover::test::params(
        recover::Role::server, recover::test::tuple(AF_INET, "10.0.0.1", 41002, "10.0.0.2", 8080),
        31, 0);
    recover::SessionParams pc = ps;
    pc.role = recover::Role::client;
    pc.nonce.b[0] ^= 1;
    pc.seed[0] ^= 1;
    test::AcceptedConn srv(ps);
    p.a.ch->peer_addr = recover::server_addr(ps.tuple);
    p.a.ch->peer_port = ps.tuple.server_port;
    p.b.ch->peer_addr = recover::client_addr(ps.tuple);
    {
      // The server's wait ends as in the engine's tick (engine_tick.cc).
      std::lock_guard<std::mutex> l(srv.c->mu);
      engine::fail(srv.c, Reason::peer_not_accelerated);
    }
    REQUIRE(srv.c->phase.load() == Phase::tcp);
    Conn* c = new Conn(srv.fds[0], pc);
    attach(c, p.a.ch);
    for (int i = 0; i < 5; ++i) {
      engine::progress(p.b.ch); // the late ATTACH: NAK
      engine::progress(p.a.ch);
    }
    CHECK(c->phase.load() == Phase::tcp);
    CHECK(c->reason == Reason::handshake_failed); // the server's NAK failed
    CHECK(c->ch == nullptr);
    CHECK_FALSE(c->resumed.load());
    CHECK_FALSE(take_queued(c));
    CHECK_FALSE(p.a.ch->failed.load());
    CHECK_FALSE(p.b.ch->failed.load());
    // The connection's bytes, both ways, on TCP.
    test::REnd ce{c, nullptr, 0}, se{srv.c, nullptr, 1};
    for (int i = 0; i < 200 && (se.got < 50000 || ce.got < 50000); ++i) {
      if (ce.sent < 50000) test::rput(ce, std::min<uint64_t>(50000 - ce.sent, 7000));
      if (se.sent < 50000) test::rput(se, std::min<uint64_t>(50000 - se.sent, 7000));
      test::rtake(se, 65536, 0);
      test::rtake(ce, 65536, 1);
    }
    CHECK(ce.got == 50000);
    CHECK(se.got == 50000);
    CHECK(ce.bad + se.bad == 0);
    CHECK_FALSE(ce.reset);
    CHECK_FALSE(se.reset);
    // The channel's other stream, still on RDMA.
    test::rdrive(p, 203000, 3, -1, [] {});
    test::check_delivered(p, 203000);
    CHECK(p.a.c->tx_rdma.load());
    CHECK(p.a.c->rx_rdma.load());
    CHECK_FALSE(p.a.c->resumed.load());
    engine::on_close(c);
    c->unref();
  }
  // The other stream's corked records left the process-wide "some channel
  // holds a record" note set: clear it for the tests that follow.
  engine::post_idle_held();
}

TEST_CASE("server wait: a client host that sets up channels here is waited for longer") {
  // VM, nginx (4 worker processes) under host load: wrk's 20 connects
  // took its engine over 4 s to work through (a few channels at a time, a
  // redirect each), and the workers gave up on the last connections
  // (peer_not_accelerated) just before their requests came: those were
  // refused busy, and 6 of 20 stayed on TCP.
  const recover::SessionParams ps = recover::test::params(
      recover::Role::server, recover::test::tuple(AF_INET, "10.0.0.1", 41003, "10.0.0.2", 8080), 32,
      0);
  auto past_deadline = [](Conn* c) {
    std::lock_guard<std::mutex> l(c->mu);
    c->deadline_ms = 1;
  };
  SUBCASE("no channel from the client's host: not accelerated at the deadline") {
    test::AcceptedConn srv(ps);
    REQUIRE(srv.c->phase.load() == Phase::upgrading);
    past_deadline(srv.c);
    engine::tick_conns(engine::g(), engine::now_ms());
    CHECK(srv.c->phase.load() == Phase::tcp);
    CHECK(srv.c->reason == Reason::peer_not_accelerated);
  }
  SUBCASE("a channel from the client's host: waits, up to a bound") {
    test::LinkPair links{1 << 20};
    Channel* ch = nullptr;
    {
      std::lock_guard<std::mutex> g(engine::g().mu);
      ch = engine::make_channel(engine::g(), &links.lb, false);
      REQUIRE(ch != nullptr);
      ch->peer_addr = recover::client_addr(ps.tuple);
    }
    {
      test::AcceptedConn srv(ps);
      for (int i = 0; i < 3; ++i) {
        past_deadline(srv.c);
        engine::tick_conns(engine::g(), engine::now_ms());
        CHECK(srv.c->phase.load() == Phase::upgrading);
        CHECK(srv.c->deadline_ms > engine::now_ms());
      }
      past_deadline(srv.c);
      engine::tick_conns(engine::g(), engine::now_ms());
      CHECK(srv.c->phase.load() == Phase::tcp);
      CHECK(srv.c->reason == Reason::peer_not_accelerated);
    }
    std::lock_guard<std::mutex> g(engine::g().mu);
    engine::g().chans.free_now(ch);
  }
}

namespace {

// An rdma_cm attempt of c's to port, under way (as cm_connect leaves it).
engine::CmUser* attempt(Conn* c, uint16_t port) {
  auto* u = new engine::CmUser{engine::CmUser::Kind::client, c, nullptr, port};
  std::lock_guard<std::mutex> g(engine::g().mu);
  c->ref();
  c->rv.cm_tried = true;
  engine::g().inflight.add(u);
  return u;
}

// The rdma_cm listener owner's redirect to port, answering c's attempt.
void redirect_to(Conn* c, uint16_t port) {
  engine::CmUser* u = attempt(c, c->tuple.server_port);
  verbs::CmEvent ev{};
  ev.kind = verbs::CmEvent::Kind::rejected;
  ev.user = u;
  ev.consumer_reject = true;
  const recover::CmRejectWire w{recover::rej_redirect, 0, htons(port)};
  memcpy(ev.priv, &w, sizeof w);
  ev.priv_len = sizeof w;
  std::lock_guard<std::mutex> g(engine::g().mu);
  engine::on_cm_event(engine::g(), ev); // frees u
}

} // namespace

TEST_CASE("redirect: a channel to the named process carries the ATTACH") {
  // nginx's 4 workers: every one of wrk's connections made a channel of
  // its own to the worker its redirect named, although a channel to that
  // worker was up; under load a burst of them outlasted the handshake.
  Conn* c = new Conn(-1, test::rparams(recover::Role::client, 25));
  {
    ClientChannel cc(c);
    cc.ch->cm_port = 50123; // a worker's private port: a redirect's target
    redirect_to(c, 50123);
    CHECK(c->rv.redirected);
    CHECK(c->ch == cc.ch);
    CHECK(c->sess.state() == recover::State::attaching);
    CHECK(c->deadline_ms > engine::now_ms());
    CHECK(c->rv.redirect_attach);
    SUBCASE("answered: bound there") {
      engine::on_close(c);
    }
    SUBCASE("the channel fails before the answer: rdma_cm, and the redirect once more") {
      // c tried rdma_cm already (the attempt the redirect answered): a
      // plain ATTACH would stay on TCP now; a redirected one connects to
      // the port as it would have without the channel.
      CHECK(c->rv.cm_tried);
      engine::channel_failed(cc.ch, ResumeCause::disconnected);
      CHECK(c->phase.load() == Phase::upgrading);
      CHECK(c->ch == nullptr);
      CHECK(c->rv.attach_refused);
      CHECK_FALSE(c->rv.redirected);
      CHECK_FALSE(c->rv.redirect_attach);
      CHECK(take_queued(c));
      engine::on_close(c);
    }
  }
  c->unref();
}

TEST_CASE("redirect: a channel from another client address is not used") {
  // The server binds no stream whose TCP client is not the channel's
  // requester (docs/protocol.md §2): an ATTACH from another local address
  // would be refused for sure.
  Conn* c = new Conn(-1, test::rparams(recover::Role::client, 28));
  {
    ClientChannel cc(c);
    cc.ch->cm_port = 50124;
    cc.ch->local_addr = recover::server_addr(c->tuple); // not c's client address
    redirect_to(c, 50124);
    CHECK(c->ch == nullptr);
    CHECK_FALSE(c->rv.redirect_attach);
    // No rdma_cm in unit tests: the connect it chose instead fails.
    CHECK(c->phase.load() == Phase::tcp);
    engine::on_close(c);
  }
  c->unref();
}

TEST_CASE("client wait: a connection behind its host's rdma_cm attempt is waited for longer") {
  Conn* c = new Conn(-1, test::rparams(recover::Role::client, 26));
  {
    std::lock_guard<std::mutex> g(engine::g().mu);
    c->ref();
    engine::g().conns.add(c);
  }
  auto past_deadline = [c] {
    std::lock_guard<std::mutex> l(c->mu);
    c->deadline_ms = 1;
  };
  Conn* other = new Conn(-1, test::rparams(recover::Role::client, 27)); // same server
  engine::CmUser* u = attempt(other, other->tuple.server_port);
  for (int i = 0; i < 3; ++i) {
    past_deadline();
    engine::tick_conns(engine::g(), engine::now_ms());
    CHECK(c->phase.load() == Phase::upgrading);
  }
  past_deadline();
  engine::tick_conns(engine::g(), engine::now_ms());
  CHECK(c->phase.load() == Phase::tcp);
  CHECK(c->reason == Reason::handshake_timeout);
  {
    std::lock_guard<std::mutex> g(engine::g().mu);
    engine::g().inflight.remove(u);
    engine::g().conns.remove(c);
  }
  delete u;
  other->unref();
  engine::on_close(other);
  other->unref();
  engine::on_close(c);
  c->unref();
  c->unref();
}

TEST_CASE("client wait: its own rdma_cm attempt does not extend the handshake") {
  // An rdma_cm peer that never answers (docs/protocol.md §8: a client
  // waits for its answer at most the handshake timeout).
  Conn* c = new Conn(-1, test::rparams(recover::Role::client, 29));
  {
    std::lock_guard<std::mutex> g(engine::g().mu);
    c->ref();
    engine::g().conns.add(c);
  }
  engine::CmUser* u = attempt(c, c->tuple.server_port);
  {
    std::lock_guard<std::mutex> l(c->mu);
    c->deadline_ms = 1;
  }
  engine::tick_conns(engine::g(), engine::now_ms());
  CHECK(c->phase.load() == Phase::tcp);
  CHECK(c->reason == Reason::handshake_timeout);
  {
    std::lock_guard<std::mutex> g(engine::g().mu);
    engine::g().inflight.remove(u);
    engine::g().conns.remove(c);
  }
  delete u;
  c->unref(); // the attempt's
  engine::on_close(c);
  c->unref(); // the table's
  c->unref();
}
