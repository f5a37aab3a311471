// Admission of client connections to channels (issue 28): rdma_cm attempts
// under way count against XPRESS_CHANNELS_PER_PEER, so a burst of connects
// sets up at most that many channels; the rest wait for an attempt to end
// and attach over the channel it built, or stay on TCP with a reason when
// the channels are full and nothing is under way.  The engine's tables
// driven by hand as its thread would (no rdma_cm here: an attempt is a
// CmUser in the inflight table).
#include <doctest/doctest.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "fake_link.h"
#include "resume_pair.h"
#include "stream/engine_internal.h"

using namespace xp;
using namespace xp::stream;

namespace {

struct Knobs {
  uint32_t per_peer = engine::g().p.channels_per_peer;
  uint32_t streams = engine::g().p.streams_per_channel;
  Knobs(uint32_t pp, uint32_t spc) {
    engine::g().p.channels_per_peer = pp;
    engine::g().p.streams_per_channel = spc;
  }
  ~Knobs() {
    engine::g().p.channels_per_peer = per_peer;
    engine::g().p.streams_per_channel = streams;
  }
};

struct Burst {
  std::vector<Conn*> conns;
  explicit Burst(int n) {
    for (int i = 0; i < n; ++i)
      conns.push_back(new Conn(-1, test::rparams(recover::Role::client, 7)));
  }
  bool closed = false;
  void close_all() {
    for (Conn* c : conns)
      engine::on_close(c);
    closed = true;
  }
  ~Burst() {
    {
      std::lock_guard<std::mutex> g(engine::g().mu);
      for (Conn* c : engine::g().parked)
        c->unref();
      engine::g().parked.clear();
    }
    if (!closed) close_all();
    for (Conn* c : conns)
      c->unref();
  }
  void start(Conn* c) {
    std::lock_guard<std::mutex> g(engine::g().mu);
    engine::start_client(engine::g(), c);
  }
};

} // namespace

TEST_CASE("admission: a burst of connects waits behind the attempts under way") {
  // Two attempts to the server's host are under way: that is the cap.
  // Before, a connection that had waited once behind an attempt started
  // its own (1,000 connects: up to 1,000 queue pairs set up at once, under
  // TCG a storm of handshake_failed as the attempts timed out).
  Knobs k(2, 16384);
  Burst b(1000);
  Conn* first = new Conn(-1, test::rparams(recover::Role::client, 8));
  engine::CmUser u1{engine::CmUser::Kind::client, first, nullptr, 8080};
  engine::CmUser u2{engine::CmUser::Kind::client, first, nullptr, 8080};
  {
    std::lock_guard<std::mutex> g(engine::g().mu);
    engine::g().inflight.add(&u1);
    engine::g().inflight.add(&u2);
  }
  for (Conn* c : b.conns) {
    c->rv.parked_once = true; // each waited behind an attempt already
    b.start(c);
  }
  {
    std::lock_guard<std::mutex> g(engine::g().mu);
    CHECK(engine::g().inflight.size() == 2); // no attempt of their own
    CHECK(engine::g().parked.size() == b.conns.size());
    engine::g().inflight.clear();
  }
  for (Conn* c : b.conns)
    CHECK(c->phase.load() == Phase::upgrading);

  // The attempts ended with one channel up: the waiting connections attach
  // over it, as many as it carries; the rest stay on TCP, busy.
  test::LinkPair links(1 << 20);
  engine::g().p.streams_per_channel = 600;
  Channel* ch = nullptr;
  {
    std::lock_guard<std::mutex> g(engine::g().mu);
    ch = engine::make_channel(engine::g(), &links.la, true);
    REQUIRE(ch != nullptr);
    ch->peer_addr = recover::server_addr(b.conns[0]->tuple);
    ch->peer_port = b.conns[0]->tuple.server_port;
  }
  engine::g().p.channels_per_peer = 1;
  std::vector<Conn*> parked;
  {
    std::lock_guard<std::mutex> g(engine::g().mu);
    parked.swap(engine::g().parked);
  }
  int on_channel = 0, busy = 0;
  for (Conn* c : parked) {
    b.start(c);
    c->unref();
    if (c->ch == ch) ++on_channel;
    if (c->phase.load() == Phase::tcp && c->reason == Reason::resources_exhausted) ++busy;
  }
  CHECK(on_channel == 600);
  CHECK(busy == 400);
  CHECK(ch->conns.size() == 600);
  CHECK(ch->mux->stream_count() == 600);
  b.close_all();
  {
    std::lock_guard<std::mutex> g(engine::g().mu);
    CHECK(ch->conns.empty());
    engine::g().chans.free_now(ch);
  }
  first->unref();
}

TEST_CASE("admission: an attempt whose connection closed still holds the next one back") {
  // The VM fallback case (curl's sequential fetches from a busybox httpd
  // without xpress): fetch 2 closed while its rdma_cm attempt was under
  // way, and fetch 3 asked rdma_cm itself instead of waiting for that
  // attempt's refusal, which makes the negative cache conclusive: three
  // attempts where two are the bound.  The attempt stays in inflight until
  // its event, and the next connection to that host waits for it.
  Knobs k(4, 256);
  Burst b(2);
  Conn* first = b.conns[0];
  auto* u = new engine::CmUser{engine::CmUser::Kind::client, first, nullptr, 8080};
  {
    std::lock_guard<std::mutex> g(engine::g().mu);
    first->ref(); // the attempt's
    engine::g().inflight.add(u);
  }
  engine::on_close(first); // the fetch ended before the attempt's answer
  b.start(b.conns[1]);
  {
    std::lock_guard<std::mutex> g(engine::g().mu);
    CHECK(engine::g().inflight.size() == 1);
    CHECK(engine::g().parked.size() == 1); // waits for the attempt's answer
    engine::g().inflight.remove(u);
  }
  CHECK(b.conns[1]->phase.load() == Phase::upgrading);
  delete u;
  first->unref();
}

// The engine's wait (wait_ms) ticks while an upgrade times something, read
// from State::maybe_timed instead of a walk over every connection; the
// tick's walk clears it once none is timed, and whoever makes one sets it.
TEST_CASE("engine wait: it ticks while an upgrade is timed, and no longer once none is") {
  Conn* c = new Conn(-1, test::rparams(recover::Role::client, 7));
  {
    std::lock_guard<std::mutex> g(engine::g().mu);
    engine::g().conns.add(c);
    engine::g().maybe_timed.store(true); // as register_conn
  }
  CHECK(engine::wait_ms() == engine::kTickMs);
  // Waiting for the program's bytes: nothing to time.
  c->untimed.store(true);
  engine::tick_conns(engine::g(), engine::now_ms());
  CHECK_FALSE(engine::g().maybe_timed.load());
  CHECK(engine::wait_ms() != engine::kTickMs);
  // The session times something again (its step says so).
  {
    std::lock_guard<std::mutex> l(c->mu);
    engine::advance(c);
  }
  CHECK_FALSE(c->untimed.load());
  CHECK(engine::g().maybe_timed.load());
  CHECK(engine::wait_ms() == engine::kTickMs);
  // Settled (here: on TCP): the next tick finds nothing timed.
  c->phase.store(Phase::tcp);
  engine::tick_conns(engine::g(), engine::now_ms());
  CHECK_FALSE(engine::g().maybe_timed.load());
  {
    std::lock_guard<std::mutex> g(engine::g().mu);
    engine::g().conns.remove(c);
  }
  c->unref();
}
