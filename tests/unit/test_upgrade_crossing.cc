// An upgrade given up at one end while the other end's SWITCH crosses it
// (docs/protocol.md §3, "An upgrade abandoned while a switch crosses"): the
// end that gave up reads the peer's direction as plain TCP, so the peer's
// bytes after its S must follow there, unframed -- never a short stream
// that ends in a clean EOF.  Found in the Soft-RoCE VM: the receiver's
// handshake timer fired (its NAK was never sent), the sender's bytes over
// RDMA met a stream the receiver had dropped, the sender got ECONNRESET and
// the receiver a silent end of stream at S.
#include <doctest/doctest.h>

#include "io_calls.h"
#include "recover/upgrade_wire.h"
#include "resume_pair.h"

using namespace xp;
using namespace xp::test;

namespace {

// a wrote `first` bytes on TCP and b read them; a then had b's SHARE and
// PROOF and switched; b polled nothing of a's since its SHARE.
void a_switched_b_unaware(RPair& p, size_t first) {
  REQUIRE(rput(p.b, 64) == 64); // b's part of what the proofs cover
  while (p.a.got < 64)
    REQUIRE(rtake(p.a, 65536, 1) > 0);
  REQUIRE(rput(p.a, first) == first);
  while (p.b.got < first)
    REQUIRE(rtake(p.b, 65536, 0) > 0); // b has the bytes a's SHARE covers
  stream::engine::progress(p.b.ch);    // b answers a's SHARE: SHARE and PROOF
  stream::engine::progress(p.a.ch);    // a keys, sends its PROOF, verifies b's
  {
    std::lock_guard<std::mutex> l(p.a.c->mu);
    stream::engine::advance(p.a.c);
  }
  REQUIRE(p.a.c->tx_rdma.load());
}

// b's handshake timer fires, as in the engine's tick.
void b_times_out(RPair& p) {
  std::lock_guard<std::mutex> l(p.b.c->mu);
  const uint64_t now = stream::engine::now_ms();
  p.b.c->sess.tick(now); // arms: b waits for a's PROOF (still in b's queue)
  p.b.c->sess.tick(now + 60000);
  REQUIRE(p.b.c->sess.state() == recover::State::failed);
  stream::engine::fail(p.b.c, p.b.c->sess.fallback_reason());
}

} // namespace

TEST_CASE("upgrade crossing: a receiver that gives up before it saw the SWITCH loses no byte") {
  for (size_t after : {size_t{0}, size_t{1}, size_t{30000}, size_t{200000}}) {
    CAPTURE(after);
    RPair p;
    const uint64_t total = 5000 + after + 40000;
    a_switched_b_unaware(p, 5000);
    // Bytes after S, over RDMA, before b gives up.
    if (after) REQUIRE(rput(p.a, after) > 0);
    b_times_out(p);
    CHECK(p.b.c->phase.load() == stream::Phase::tcp); // b reads plain TCP from here
    rdrive(p, total, 7, -1, [] {});
    // b never sends: its direction is done once a's bytes all arrived.
    CHECK_FALSE(p.a.reset);
    CHECK_FALSE(p.b.reset);
    CHECK_FALSE(p.b.eof);
    CHECK(p.b.got == total);
    CHECK(p.b.bad == 0);
    CHECK(p.a.c->resumed.load()); // a left the channel: its bytes went on TCP
  }
}

TEST_CASE(
    "upgrade crossing: a receiver that gives up after it polled the SWITCH never ends short") {
  // b's stream accepted a's SWITCH and bytes (polled, not yet handled by
  // the session) when b gives up: those bytes may be credited, so only
  // recovery can settle it -- every byte, or a reset at both ends, never a
  // clean end of stream after a short read.
  RPair p;
  const uint64_t total = 300000;
  a_switched_b_unaware(p, 5000);
  REQUIRE(rput(p.a, 60000) > 0);
  {
    std::lock_guard<std::mutex> l(p.b.ch->mu);
    REQUIRE(p.b.ch->mux->progress() == Status::ok); // records in, inbox not drained
  }
  REQUIRE(p.b.c->st->rx_started());
  {
    std::lock_guard<std::mutex> l(p.b.c->mu);
    p.b.c->sess.fail(Reason::handshake_failed);
    stream::engine::fail(p.b.c, Reason::handshake_failed);
  }
  CHECK(p.b.c->phase.load() != stream::Phase::tcp); // not plain: recovery decides
  rdrive(p, total, 11, -1, [] {});
  for (int i = 0; i < 50 && !p.b.reset && p.b.got < total; ++i) {
    rtake(p.b, 65536, 0);
    engine_step(p);
  }
  // (a's reset reaches b as a TCP reset on a real socket, not on this
  // socketpair.)
  CHECK(p.b.bad == 0);
  CHECK_FALSE((p.b.eof && p.b.got < total));
  CHECK((p.b.got == total || p.a.reset || p.b.reset));
}

TEST_CASE("upgrade crossing: the kernel's end of stream before a late SWITCH is not the end") {
  // a switched, sent the rest over RDMA and shut its direction (FIN record,
  // then the kernel's FIN); b meets the kernel's FIN at S while the SWITCH
  // is still "being retransmitted" (50 ms: beyond the 5 ms b waited before).
  RPair p;
  a_switched_b_unaware(p, 5000);
  REQUIRE(rput(p.a, 30000) == 30000);
  bool kernel = false;
  REQUIRE(xp::test::call_shutdown(p.a.c, SHUT_WR, &kernel) == 0);
  p.lb.late_until_ns = FakeLink::mono_ns() + 50000000ull;
  for (int i = 0; i < 100 && !p.b.eof && !p.b.reset; ++i)
    rtake(p.b, 65536, 0);
  CHECK_FALSE(p.b.reset);
  CHECK(p.b.got == 35000);
  CHECK(p.b.bad == 0);
  CHECK(p.b.eof); // after every byte
}

TEST_CASE("upgrade crossing: a direction that ends on TCP says so on the channel") {
  // a shuts its direction before it ever switched: its FIN record (no SWITCH
  // before it) tells b at once that the kernel's FIN is the end; b does not
  // wait for a SWITCH that will never come.
  auto& prm = stream::engine::g().p;
  const uint32_t saved = prm.handshake_timeout_ms;
  prm.handshake_timeout_ms = 60000; // b's longest wait, were the FIN record missed
  {
    RPair p;
    REQUIRE(rput(p.a, 5000) == 5000);
    bool kernel = false;
    REQUIRE(xp::test::call_shutdown(p.a.c, SHUT_WR, &kernel) == 0);
    CHECK_FALSE(p.a.c->tx_rdma.load());
    const uint64_t t0 = FakeLink::mono_ns();
    for (int i = 0; i < 100 && !p.b.eof && !p.b.reset; ++i)
      rtake(p.b, 65536, 0);
    CHECK(p.b.eof);
    CHECK(p.b.got == 5000);
    CHECK(p.b.bad == 0);
    CHECK(FakeLink::mono_ns() - t0 < 30000000000ull); // not the 60 s bound
  }
  prm.handshake_timeout_ms = saved;
}

TEST_CASE("upgrade crossing: a NAK's reads-plain flag") {
  using namespace recover;
  Message m = make_nak(3, NakCode::timeout);
  CHECK(nak_reason(m.seq | kNakReadsPlain) == xp::Reason::handshake_timeout);
  CHECK(nak_reason(m.seq) == xp::Reason::handshake_timeout);
}

namespace {

// A second connection on p's channels (stream id 1): a stream of the same
// channel that has nothing to do with the one whose upgrade fails.
struct Second : SecondStream {
  explicit Second(RPair& p) : SecondStream(p) {}
  void step() {
    for (REnd* e : {&a, &b}) {
      {
        std::lock_guard<std::mutex> l(e->c->mu);
        if (e->c->ch) stream::engine::advance(e->c);
      }
      stream::engine::progress(e->ch);
    }
  }
  // Both directions carry `n` more bytes, read at the other end.
  void exchange(uint64_t n) {
    const uint64_t ta = a.sent + n, tb = b.sent + n;
    for (int i = 0; i < 20000 && (b.got < ta || a.got < tb) && !a.reset && !b.reset; ++i) {
      if (a.sent < ta) rput(a, std::min<uint64_t>(ta - a.sent, 3000));
      if (b.sent < tb) rput(b, std::min<uint64_t>(tb - b.sent, 3000));
      rtake(a, 65536, 1);
      rtake(b, 65536, 0);
      step();
    }
  }
  // Both ends switched both directions (after the first exchange).
  void settle() {
    for (int i = 0; i < 200 && !on_rdma(); ++i) {
      rtake(a, 65536, 1);
      rtake(b, 65536, 0);
      step();
    }
  }
  bool on_rdma() const {
    return a.c->tx_rdma.load() && a.c->rx_rdma.load() && b.c->tx_rdma.load() &&
           b.c->rx_rdma.load() && !a.c->resumed.load() && !b.c->resumed.load();
  }
};

} // namespace

namespace {
// a's stream alone went back to TCP with every byte of `total`; the
// channel and its other stream q go on over RDMA at both ends.
void only_a_left(RPair& p, Second& q, uint64_t total, unsigned seed = 7) {
  rdrive(p, total, seed, -1, [] {});
  CHECK_FALSE(p.a.reset);
  CHECK_FALSE(p.b.reset);
  CHECK(p.b.got == total);
  CHECK(p.b.bad == 0);
  CHECK(p.a.c->resumed.load()); // a's stream alone left the channel
  CHECK(p.a.c->ch == nullptr);
  CHECK_FALSE(p.a.ch->failed.load());
  CHECK_FALSE(p.b.ch->failed.load());
  q.exchange(300000);
  CHECK(q.on_rdma());
  CHECK(q.a.got == 305000);
  CHECK(q.b.got == 305000);
  CHECK(q.a.bad + q.b.bad == 0);
}
} // namespace

TEST_CASE("upgrade crossing: a stream its peer gave up leaves the channel alone") {
  // b gives the upgrade up before it processed a's SWITCH (its NAK says it
  // reads a's direction plain): only that stream goes back to TCP, with
  // every byte a sent over RDMA; the channel and its other stream go on
  // over RDMA at both ends (it used to fail the whole channel at a).
  for (size_t after : {size_t{0}, size_t{30000}, size_t{200000}}) {
    CAPTURE(after);
    RPair p;
    Second q(p);
    q.exchange(5000);
    q.settle();
    REQUIRE(q.on_rdma());
    const uint64_t total = 5000 + after + 40000;
    a_switched_b_unaware(p, 5000);
    if (after) REQUIRE(rput(p.a, after) > 0);
    b_times_out(p);
    only_a_left(p, q, total);
  }
}

TEST_CASE("upgrade crossing: the handshake timer does not fire while the peer's SWITCH is in") {
  // b's stream accepted a's SWITCH (polled, the PROOF before it not yet
  // handled) when b's handshake timer comes due in the engine's tick: b is
  // the one behind, not a, and giving up now would fail the channel
  // (recovery).  The tick leaves it; the PROOF then binds the stream.
  RPair p;
  Second q(p);
  q.exchange(5000);
  q.settle();
  REQUIRE(q.on_rdma());
  const uint64_t total = 100000;
  a_switched_b_unaware(p, 5000);
  REQUIRE(rput(p.a, 30000) > 0);
  {
    std::lock_guard<std::mutex> l(p.b.ch->mu);
    REQUIRE(p.b.ch->mux->progress() == Status::ok); // records in, inbox not drained
  }
  REQUIRE(p.b.c->st->rx_started());
  const uint64_t now = stream::engine::now_ms();
  {
    std::lock_guard<std::mutex> l(p.b.c->mu);
    p.b.c->sess.tick(now); // arms the timer
  }
  {
    std::lock_guard<std::mutex> gl(stream::engine::g().mu);
    p.b.c->ref();
    stream::engine::g().conns.add(p.b.c);
  }
  stream::engine::tick_conns(stream::engine::g(), now + 60000);
  CHECK(p.b.c->sess.state() != recover::State::failed);
  rdrive(p, total, 5, -1, [] {});
  CHECK_FALSE(p.a.reset);
  CHECK_FALSE(p.b.reset);
  CHECK(p.b.got == total);
  CHECK(p.a.got == total);
  CHECK(p.b.bad + p.a.bad == 0);
  CHECK_FALSE(p.a.ch->failed.load());
  CHECK_FALSE(p.b.ch->failed.load());
  CHECK_FALSE(p.b.c->resumed.load());
  CHECK(p.b.c->rx_rdma.load());
  q.exchange(10000);
  CHECK(q.on_rdma());
}

namespace {
// Both channels fail; then 150,000 bytes each way (pattern `seed`) arrive
// whole, over TCP.
void fail_both_and_deliver(RPair& p, unsigned seed) {
  stream::engine::mark_failed(p.a.ch, stream::ResumeCause::completion_error);
  stream::engine::mark_failed(p.b.ch, stream::ResumeCause::completion_error);
  engine_step(p);
  const uint64_t total = 150000;
  rdrive(p, total, seed, -1, [] {});
  for (int i = 0; i < 200 && (p.a.got < total || p.b.got < total) && !p.a.reset && !p.b.reset;
       ++i) {
    rtake(p.a, 65536, 1);
    rtake(p.b, 65536, 0);
    engine_step(p);
  }
  check_delivered(p, total);
}
} // namespace

TEST_CASE("upgrade crossing: a channel that fails in any state of the switch resets no stream") {
  // The channel fails (both ends, as after a QP error) while the stream is
  // bound, while the proofs are under way, when a switched and b has not
  // polled a's SWITCH, when b polled it but did not verify it, and once
  // both directions switched.  Each time every byte arrives on TCP and
  // neither end sees a reset (docs/protocol.md §7).  "a switched, b
  // unaware" used to reset a at once ("the channel failed while the
  // switches were crossing"): a now goes on unframed from S, as b reads
  // it.
  enum class At { bound, proofs, a_switched, b_polled, both };
  for (At at : {At::bound, At::proofs, At::a_switched, At::b_polled, At::both}) {
    CAPTURE(static_cast<int>(at));
    RPair p;
    switch (at) {
    case At::bound:
      break;
    case At::proofs:
      REQUIRE(rput(p.b, 64) == 64);
      while (p.a.got < 64)
        REQUIRE(rtake(p.a, 65536, 1) > 0);
      REQUIRE(rput(p.a, 5000) == 5000);
      while (p.b.got < 5000)
        REQUIRE(rtake(p.b, 65536, 0) > 0);
      stream::engine::progress(p.b.ch); // b answers a's SHARE
      break;
    case At::a_switched:
    case At::b_polled:
      a_switched_b_unaware(p, 5000);
      REQUIRE(rput(p.a, 20000) > 0);
      if (at == At::b_polled) {
        std::lock_guard<std::mutex> l(p.b.ch->mu);
        REQUIRE(p.b.ch->mux->progress() == Status::ok); // in, not handled
        REQUIRE(p.b.c->st->rx_started());
      }
      break;
    case At::both:
      REQUIRE(rput(p.a, 3000) == 3000);
      REQUIRE(rput(p.b, 3000) == 3000);
      while (p.a.got < 3000 || p.b.got < 3000) {
        rtake(p.a, 65536, 1);
        rtake(p.b, 65536, 0);
      }
      settle_switches(p);
      REQUIRE(p.a.c->tx_rdma.load());
      REQUIRE(p.b.c->tx_rdma.load());
      break;
    }
    fail_both_and_deliver(p, 13);
  }
}

TEST_CASE("upgrade crossing: the reset that answers our bytes after the peer's NAK is no reset") {
  // b's handshake timer fires before a's SWITCH reaches it (a burst of
  // bindings: 2,000 connections in the Soft-RoCE VM): b NAKs "reads plain"
  // and drops the stream; a's records after S then find no stream at b,
  // which answers them with RST (as the kernel would, stream/mux.cc).  a
  // polls the NAK and that RST in one batch: the RST applies to the stream
  // at once, the NAK waits in the inbox, and the stream used to look reset
  // to a, so a failed the whole channel and every other stream of it went
  // through recovery.  The NAK's stream alone goes back to TCP, byte-exact.
  for (size_t after : {size_t{1}, size_t{30000}}) {
    CAPTURE(after);
    RPair p;
    Second q(p);
    q.exchange(5000);
    q.settle();
    REQUIRE(q.on_rdma());
    const uint64_t total = 5000 + after + 40000;
    a_switched_b_unaware(p, 5000);
    REQUIRE(rput(p.a, after) > 0);
    b_times_out(p);
    stream::engine::progress(p.b.ch); // a's bytes after S meet no stream: RST
    stream::engine::progress(p.a.ch); // the NAK and the RST in one batch
    CHECK_FALSE(p.a.ch->failed.load());
    CHECK_FALSE(p.a.reset);
    only_a_left(p, q, total);
  }
}

TEST_CASE("upgrade crossing: a channel that fails after b verified a's SWITCH, a unaware") {
  // b verified a's SWITCH (its acknowledgement is on the way), switched its
  // own direction and read some of a's bytes over RDMA; a polled nothing of
  // b's since its PROOF.  The channel fails at both ends (the whole channel
  // of a stream whose NAK did fail it, in the VM at 2,000 connections).
  // a never had b's ACK nor b's SWITCH: it goes on unframed from its S.  b
  // expected a's RESUME and read a's plain bytes as a malformed frame:
  // a reset.  b now knows them for what they are (docs/protocol.md §7).
  for (size_t read_first : {size_t{0}, size_t{7000}}) {
    CAPTURE(read_first);
    RPair p;
    a_switched_b_unaware(p, 5000);
    REQUIRE(rput(p.a, 20000) > 0);
    stream::engine::progress(p.b.ch); // PROOF, SWITCH: b verifies, acknowledges, switches
    REQUIRE(p.b.c->rx_rdma.load());
    REQUIRE(p.b.c->tx_rdma.load());
    while (p.b.got < 5000 + read_first)
      REQUIRE(rtake(p.b, 5000 + read_first - p.b.got, 0) > 0);
    REQUIRE(rput(p.b, 3000) > 0); // over RDMA: a never reads it there
    fail_both_and_deliver(p, 17);
  }
}

namespace {
// b's program reads (its resumed stream pumped between reads) until done()
// or 50 rounds.
template <typename Done> void b_reads(RPair& p, Done done) {
  for (int i = 0; i < 50 && !done(); ++i) {
    rtake(p.b, 65536, 0);
    std::lock_guard<std::mutex> l(p.b.c->mu);
    stream::resume::pump(p.b.c);
  }
}
void b_reads_until_end(RPair& p) {
  b_reads(p, [&] { return p.b.eof || p.b.reset; });
}
} // namespace

TEST_CASE("upgrade crossing: plain bytes after S must be those that came over RDMA") {
  // b expected a's frames and meets plain bytes after S instead: they are
  // taken only if they repeat, byte for byte, what came over RDMA from S
  // (a re-sends from its S).  Other bytes (the channel's peer was not the
  // TCP peer: a forger's SWITCH, docs/protocol.md §8) reset the stream:
  // never a mix of the two.  Written here straight into a's socket, b's
  // channel alone failed.
  for (int kind : {0, 1, 2}) { // the same bytes, a byte changed, part of them then FIN
    const bool same = kind != 1;
    CAPTURE(kind);
    RPair p;
    a_switched_b_unaware(p, 5000);
    REQUIRE(rput(p.a, 20000) == 20000);
    stream::engine::progress(p.b.ch); // b verifies a's SWITCH
    REQUIRE(p.b.c->rx_rdma.load());
    while (p.b.got < 9000)
      REQUIRE(rtake(p.b, 9000 - p.b.got, 0) > 0);
    stream::engine::mark_failed(p.b.ch, stream::ResumeCause::completion_error);
    stream::engine::progress(p.b.ch);
    REQUIRE(p.b.c->resumed.load());
    std::vector<uint8_t> plain(30000);
    for (size_t k = 0; k < plain.size(); ++k)
      plain[k] = rpat(0, 5000 + k);
    if (!same) plain[12345] ^= 1;
    if (kind == 2) { // the end comes within what must repeat: a break, as on TCP
      REQUIRE(::send(p.fds[0], plain.data(), 2000, MSG_DONTWAIT) == 2000);
      REQUIRE(::shutdown(p.fds[0], SHUT_WR) == 0);
      b_reads_until_end(p);
      CHECK(p.b.reset);
      CHECK_FALSE(p.b.eof);
      CHECK(p.b.bad == 0);
      CHECK(p.b.got <= 25000);
      continue;
    }
    REQUIRE(::send(p.fds[0], plain.data(), plain.size(), MSG_DONTWAIT) == 30000);
    b_reads(p, [&] { return p.b.got >= 35000 || p.b.reset; });
    CHECK(p.b.bad == 0);
    if (same) {
      CHECK_FALSE(p.b.reset);
      CHECK(p.b.got == 35000);
      // a's direction is plain TCP from its S: its FIN is an end of stream,
      // not a break (the review of the plain path: it was ECONNRESET).
      REQUIRE(::shutdown(p.fds[0], SHUT_WR) == 0);
      b_reads_until_end(p);
      CHECK(p.b.eof);
      CHECK_FALSE(p.b.reset);
      CHECK(p.b.got == 35000);
    } else {
      CHECK(p.b.reset);
      CHECK(p.b.got <= 25000); // what came over RDMA, and nothing after it
    }
  }
}

TEST_CASE("upgrade crossing: a SWITCH polled right after the handshake timer fired") {
  // The engine's tick finds b's handshake timer due and a's SWITCH not yet
  // in; before its fail() takes the stream off the channel, another thread
  // polls b's channel and a's SWITCH and bytes come in.  The timer's
  // decision and what the stream takes from then on are one step: b's NAK
  // says "reads plain", a's stream alone goes back to TCP with every byte,
  // and the channel's other stream stays on RDMA.  (The SWITCH used to start
  // b's receive side in that gap, and b failed the whole channel.)
  RPair p;
  Second q(p);
  q.exchange(5000);
  q.settle();
  REQUIRE(q.on_rdma());
  const uint64_t total = 5000 + 30000 + 40000;
  a_switched_b_unaware(p, 5000);
  REQUIRE(rput(p.a, 30000) > 0);
  const uint64_t now = stream::engine::now_ms();
  {
    std::lock_guard<std::mutex> l(p.b.c->mu);
    p.b.c->sess.tick(now); // arms: b waits for a's PROOF
    stream::engine::tick_handshake(p.b.c, now + 60000);
    REQUIRE(p.b.c->sess.state() == recover::State::failed);
  }
  {
    std::lock_guard<std::mutex> l(p.b.ch->mu);
    REQUIRE(p.b.ch->mux->progress() == Status::ok); // a's SWITCH and bytes, not handled
  }
  {
    std::lock_guard<std::mutex> l(p.b.c->mu);
    stream::engine::fail(p.b.c, p.b.c->sess.fallback_reason()); // the tick goes on
  }
  CHECK(p.b.c->phase.load() == stream::Phase::tcp);
  only_a_left(p, q, total, 9);
}
