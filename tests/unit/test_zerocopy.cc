// Zero-copy sends over the fake transport (docs/protocol.md §4): records
// gathered from the application's buffer arrive intact and interleave with
// copied records; the buffer is needed until the "NIC" finished reading it,
// and after zero_copy_release() never again, even by recovery; a channel
// failure with zero-copy records in flight (read or not) re-sends exactly
// what the peer lacks, from the buffer or from staging.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "fake_link.h"
#include "resume_pair.h"
#include "stream/conn_zerocopy.h"
#include "stream/mux.h"
#include "stream/resume.h"

using namespace xp;
using namespace xp::stream;
using xp::test::FakeLink;

namespace {

struct ZPair : test::LinkPair {
  Mux a, b;
  explicit ZPair(size_t ring = 65536, MuxParams p = MuxParams{})
      : LinkPair(ring), a(&la, p), b(&lb, p) {}
  void pump() {
    REQUIRE(a.progress() == Status::ok);
    REQUIRE(b.progress() == Status::ok);
  }
};

uint8_t zpat(uint32_t stream, uint64_t i) {
  return static_cast<uint8_t>(i * 13 + stream * 7 + (i >> 10));
}

// Reads everything buffered on rx, checking the pattern; returns bytes read.
uint64_t take(Stream* rx, uint32_t id, uint64_t* got, bool* ok) {
  std::vector<uint8_t> in(70000);
  uint64_t total = 0;
  size_t n = 0;
  while (rx->read(in.data(), in.size(), &n, false) == Status::ok && n > 0) {
    for (size_t k = 0; k < n; ++k)
      if (in[k] != zpat(id, *got + k)) *ok = false;
    *got += n;
    total += n;
  }
  return total;
}

// Bytes [lo, hi) of stream id as recovery would collect them from the
// staging mirror (the uncredited records); false on a gap.
bool staged_bytes(flow::RecordChannel& rc, uint32_t id, uint64_t lo, uint64_t hi,
                  std::vector<uint8_t>* out) {
  struct Ctx {
    uint32_t id;
    uint64_t lo, hi;
    std::vector<uint8_t>* out;
  } ctx{id, lo, hi, out};
  out->assign(hi - lo, 0);
  REQUIRE(rc.walk_uncredited(
              [](void* v, uint64_t, const flow::RecordHeader& h, const uint8_t* p) {
                auto* c = static_cast<Ctx*>(v);
                if (h.type != static_cast<uint8_t>(flow::RecordType::data) || h.stream != c->id)
                  return true;
                uint64_t a = std::max<uint64_t>(h.seq, c->lo),
                         b = std::min<uint64_t>(h.seq + h.len, c->hi);
                if (a < b) memcpy(c->out->data() + (a - c->lo), p + (a - h.seq), b - a);
                return true;
              },
              &ctx) == Status::ok);
  return true;
}

} // namespace

TEST_CASE("zero copy: gathered records arrive intact; the staging mirror holds no payload") {
  ZPair p;
  Stream* tx = p.a.open(1, 0, 0);
  Stream* rx = p.b.open(1, 0, 0);
  REQUIRE((tx && rx));
  std::vector<uint8_t> buf(40000);
  for (size_t k = 0; k < buf.size(); ++k)
    buf[k] = zpat(1, k);
  size_t done = 0;
  REQUIRE(tx->write_zero_copy(buf.data(), buf.size(), 42, &done) == Status::ok);
  CHECK(done > 0);
  CHECK(p.la.gathers > 0);
  CHECK(tx->zero_copy_pending());
  // No copy: the first record's staged payload is still the zeroed mirror.
  CHECK(p.la.send_stage()[sizeof(flow::RecordHeader) + 5] == 0);
  p.pump();
  CHECK(p.a.channel().completed() >= tx->zero_copy_wr()); // zero-copy records are signaled
  uint64_t got = 0;
  bool ok = true;
  take(rx, 1, &got, &ok);
  CHECK(ok);
  CHECK(got == done);
  tx->zero_copy_release();
  CHECK_FALSE(tx->zero_copy_pending());
}

TEST_CASE("zero copy: a QP that cannot gather keeps the copy path") {
  ZPair p;
  p.la.sge_ = 1;
  Stream* tx = p.a.open(1, 0, 0);
  REQUIRE(tx);
  std::vector<uint8_t> buf(1000, 1);
  size_t done = 0;
  CHECK(tx->write_zero_copy(buf.data(), buf.size(), 42, &done) == Status::unsupported);
  CHECK(done == 0);
  CHECK(tx->send_next() == 0); // nothing taken
}

TEST_CASE("zero copy: the buffer is read until completion; after release recovery uses staging") {
  ZPair p;
  Stream* tx = p.a.open(3, 0, 0);
  Stream* rx = p.b.open(3, 0, 0);
  REQUIRE((tx && rx));
  std::vector<uint8_t> buf(30000);
  for (size_t k = 0; k < buf.size(); ++k)
    buf[k] = zpat(3, k);
  p.la.hold_gathers = true; // the "NIC" has not read the buffer yet
  size_t done = 0;
  REQUIRE(tx->write_zero_copy(buf.data(), buf.size(), 42, &done) == Status::ok);
  REQUIRE(done == buf.size());
  REQUIRE(p.la.held() > 0);
  p.pump();
  CHECK(p.a.channel().completed() < tx->zero_copy_wr()); // send() must keep waiting
  // A copied record behind the zero-copy ones (RC order is kept).
  std::vector<uint8_t> more(500);
  for (size_t k = 0; k < more.size(); ++k)
    more[k] = zpat(3, done + k);
  size_t d2 = 0;
  REQUIRE(tx->write(more.data(), more.size(), &d2) == Status::ok);
  REQUIRE(d2 == more.size());
  p.la.run_held(); // the NIC reads the buffer now
  p.pump();
  REQUIRE(p.a.channel().completed() >= tx->zero_copy_wr());
  // Nothing acknowledged yet: release copies the whole zero-copy range into
  // its staged records.
  CHECK(tx->zero_copy_release() == done);
  std::memset(buf.data(), 0xEE, buf.size()); // the program reuses its buffer
  std::vector<uint8_t> st;
  staged_bytes(p.a.channel(), 3, 0, tx->send_next(), &st);
  bool same = true;
  for (size_t k = 0; k < st.size(); ++k)
    same &= st[k] == zpat(3, k);
  CHECK(same);
  uint64_t got = 0;
  bool ok = true;
  take(rx, 3, &got, &ok);
  CHECK(ok);
  CHECK(got == done + more.size());
}

TEST_CASE("zero copy: mixed zero-copy and copied records on several streams, in order") {
  MuxParams mp;
  mp.stream_window = 65536;
  ZPair p(65536, mp);
  constexpr int kStreams = 3;
  Stream* tx[kStreams];
  Stream* rx[kStreams];
  for (int i = 0; i < kStreams; ++i) {
    tx[i] = p.a.open(static_cast<uint32_t>(i), 0, 0);
    rx[i] = p.b.open(static_cast<uint32_t>(i), 0, 0);
    REQUIRE((tx[i] && rx[i]));
  }
  constexpr uint64_t kBytes = 600000;
  uint64_t sent[kStreams] = {}, got[kStreams] = {};
  std::mt19937 rng(9);
  std::vector<std::vector<uint8_t>> bufs(kStreams, std::vector<uint8_t>(40000));
  bool ok = true;
  uint64_t zc_calls = 0;
  for (int iter = 0; iter < 400000 && ok; ++iter) {
    int i = static_cast<int>(rng() % kStreams);
    if (sent[i] < kBytes && rng() % 2) {
      size_t n = 1 + rng() % bufs[i].size();
      if (n > kBytes - sent[i]) n = kBytes - sent[i];
      for (size_t k = 0; k < n; ++k)
        bufs[i][k] = zpat(static_cast<uint32_t>(i), sent[i] + k);
      size_t d = 0;
      bool zc = rng() % 2;
      Status s = zc ? tx[i]->write_zero_copy(bufs[i].data(), n, 9, &d)
                    : tx[i]->write(bufs[i].data(), n, &d);
      REQUIRE((s == Status::ok || s == Status::no_resource));
      sent[i] += d;
      if (zc && d > 0) {
        ++zc_calls;
        // send() waits for the completion, then lets the buffer go.
        for (int k = 0; k < 100 && p.a.channel().completed() < tx[i]->zero_copy_wr(); ++k)
          p.pump();
        REQUIRE(p.a.channel().completed() >= tx[i]->zero_copy_wr());
        tx[i]->zero_copy_release();
        std::memset(bufs[i].data(), 0xAB, bufs[i].size());
      }
    }
    p.pump();
    for (int j = 0; j < kStreams; ++j)
      take(rx[j], static_cast<uint32_t>(j), &got[j], &ok);
    bool all = true;
    for (int j = 0; j < kStreams; ++j)
      all &= got[j] == kBytes;
    if (all) break;
  }
  CHECK(ok);
  CHECK(zc_calls > 10);
  for (int j = 0; j < kStreams; ++j)
    CHECK(got[j] == kBytes);
}

namespace {
using namespace xp::test;

// a writes n pattern bytes zero-copy (as send() would), b may or may not see
// them, the channel fails; returns the "send() call" state.
struct ZcWrite {
  std::vector<uint8_t> buf;
  zc::Send z;
  size_t done = 0;
};

void zc_write(RPair& p, ZcWrite* w, size_t n) {
  w->buf.resize(n);
  for (size_t k = 0; k < n; ++k)
    w->buf[k] = rpat(0, p.a.sent + k);
  Stream* s = nullptr;
  {
    std::lock_guard<std::mutex> l(p.a.ch->mu);
    s = p.a.c->st;
    REQUIRE(s != nullptr);
    REQUIRE(s->write_zero_copy(w->buf.data(), n, 5, &w->done) == Status::ok);
    zc::posted(&w->z, p.a.ch, s, s->id(), s->zero_copy_wr());
  }
  w->z.on = true;
  p.a.sent += w->done;
}

ResumeLog g_zev;
void zcapture(const ResumeEvent& e) {
  g_zev.add(e);
}

void zfinish(RPair& p, uint64_t total, unsigned seed) {
  rdrive(p, total, seed, -1, [] {});
  check_delivered(p, total);
  CHECK(p.a.c->resumed.load());
}

} // namespace

TEST_CASE("zero copy: a channel failure with zero-copy records in flight loses nothing") {
  stream::set_resume_hook(zcapture);
  const uint64_t total = 300000;
  for (int variant = 0; variant < 5; ++variant) {
    CAPTURE(variant);
    g_zev.clear();
    RPair p;
    rdrive(p, 40000, 11 + variant, -1, [] {});
    settle_switches(p);
    REQUIRE(p.a.c->tx_rdma.load());
    uint64_t b_had = p.b.got;
    ZcWrite w;
    if (variant == 4) {
      // The channel fails while its queue pair still works (a keepalive
      // timeout, a protocol error): send() must move the QP into the error
      // state itself and wait for the flush before it lets the buffer go.
      p.la.hold_gathers = true;
      zc_write(p, &w, 30000);
      REQUIRE(w.done > 0);
      stream::engine::channel_failed(p.a.ch, stream::ResumeCause::keepalive_timeout);
      CHECK(p.a.c->resumed.load());
      CHECK_FALSE(p.la.failed);
      zc::finish(p.a.c, &w.z);
      CHECK(p.la.failed); // forced into the error state
      CHECK_FALSE(p.la.holds(w.buf.data(), w.buf.size()));
    } else if (variant == 0 || variant == 1) {
      // Not read by the NIC yet: recovery must take the bytes from the
      // buffer (send() still holds it), then send() waits for the flush.
      p.la.hold_gathers = true;
      zc_write(p, &w, 30000);
      REQUIRE(w.done > 0);
      if (variant == 0) {
        p.la.force_error();
        p.lb.force_error();
      } else {
        p.la.force_error(); // only a's side breaks; b learns from the frames
      }
      engine_step(p);
      CHECK(p.a.c->resumed.load());
      zc::finish(p.a.c, &w.z); // returns only once the held writes were flushed
      CHECK_FALSE(p.la.holds(w.buf.data(), w.buf.size()));
      CHECK(w.z.ch == nullptr);
    } else {
      // Read by the NIC and maybe by the peer, then send() returned (its
      // tail copied into staging), then the failure.
      zc_write(p, &w, 30000);
      REQUIRE(w.done > 0);
      if (variant == 3) { // the peer takes some of it (not all acknowledged)
        engine_step(p);
        rtake(p.b, 7000, 0);
      }
      zc::finish(p.a.c, &w.z);
      CHECK_FALSE(p.a.c->resumed.load());
      std::memset(w.buf.data(), 0x5A, w.buf.size()); // the program reuses the buffer
      p.la.drop_in_flight();
      p.lb.drop_in_flight();
      p.la.force_error();
      p.lb.force_error();
      engine_step(p);
      CHECK(p.a.c->resumed.load());
    }
    std::memset(w.buf.data(), 0xC3, w.buf.size());
    zfinish(p, total, 20 + variant);
    // Re-sent: at most what a had not seen acknowledged, at least what b
    // lacked of the zero-copy bytes when the channel failed.
    uint64_t resent = 0;
    for (const ResumeEvent& e : g_zev.events())
      if (e.resent_bytes) resent += e.resent_bytes;
    CHECK(resent > 0);
    CHECK(resent <= p.a.sent - b_had + 65536);
  }
  stream::set_resume_hook(nullptr);
}
