// Streams over a multiplexed channel (fake link): integrity with many
// streams at once, a stream whose reader stalls does not block the others,
// window and acks, half-close, reset, hostile records.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "fake_link.h"
#include "stream/mux.h"

using namespace xp;
using namespace xp::stream;
using xp::test::FakeLink;

namespace {
struct MuxPair : test::LinkPair {
  Mux a, b;
  explicit MuxPair(size_t ring = 65536, MuxParams p = MuxParams{})
      : LinkPair(ring), a(&la, p), b(&lb, p) {}
  void pump() {
    REQUIRE(a.progress() == Status::ok);
    REQUIRE(b.progress() == Status::ok);
  }
};
uint8_t pat(uint32_t stream, uint64_t i) {
  return static_cast<uint8_t>(i * 7 + stream * 31 + (i >> 9));
}
} // namespace

TEST_CASE("streams: many streams interleaved arrive intact, and acks keep windows open") {
  MuxParams mp;
  mp.stream_window = 16384;
  MuxPair p(32768, mp);
  constexpr int kStreams = 8;
  constexpr uint64_t kBytes = 300000;
  Stream* tx[kStreams];
  Stream* rx[kStreams];
  for (int i = 0; i < kStreams; ++i) {
    tx[i] = p.a.open(static_cast<uint32_t>(i), 1000 * i, 0);
    rx[i] = p.b.open(static_cast<uint32_t>(i), 0, 1000 * i); // a's tx start is b's rx start
    REQUIRE((tx[i] && rx[i]));
  }
  uint64_t sent[kStreams] = {}, got[kStreams] = {};
  std::mt19937 rng(3);
  std::vector<uint8_t> buf(5000), in(7000);
  bool ok = true;
  for (int iter = 0; iter < 200000 && ok; ++iter) {
    int i = static_cast<int>(rng() % kStreams);
    if (sent[i] < kBytes) {
      size_t n = 1 + rng() % buf.size();
      if (n > kBytes - sent[i]) n = kBytes - sent[i];
      for (size_t k = 0; k < n; ++k)
        buf[k] = pat(i, sent[i] + k);
      size_t done = 0;
      Status st = tx[i]->write(buf.data(), n, &done);
      REQUIRE((st == Status::ok || st == Status::no_resource));
      sent[i] += done;
    }
    p.pump();
    int j = static_cast<int>(rng() % kStreams);
    size_t n = 0;
    Status st = rx[j]->read(in.data(), 1 + rng() % in.size(), &n, false);
    REQUIRE((st == Status::ok || st == Status::would_block));
    for (size_t k = 0; k < n; ++k)
      if (in[k] != pat(j, got[j] + k)) ok = false;
    got[j] += n;
    bool all = true;
    for (int k = 0; k < kStreams; ++k)
      all = all && got[k] == kBytes;
    if (all) break;
  }
  CHECK(ok);
  for (int i = 0; i < kStreams; ++i) {
    CHECK(got[i] == kBytes);
    CHECK(tx[i]->send_next() == 1000u * i + kBytes);
    CHECK(rx[i]->delivered() == 1000u * i + kBytes);
  }
  CHECK(p.b.counters().acks_sent > 0);
  CHECK(p.la.rnr + p.lb.rnr == 0);
}

TEST_CASE("streams: a reader that stalls does not block other streams on the channel") {
  MuxParams mp;
  mp.stream_window = 8192;
  MuxPair p(16384, mp);
  Stream* slow_tx = p.a.open(1, 0, 0);
  Stream* slow_rx = p.b.open(1, 0, 0);
  Stream* fast_tx = p.a.open(2, 0, 0);
  Stream* fast_rx = p.b.open(2, 0, 0);
  std::vector<uint8_t> buf(100000, 5), in(100000);
  size_t done = 0;
  // Fill the slow stream's window; nobody reads it.
  while (slow_tx->write(buf.data(), 4096, &done) == Status::ok && done > 0)
    p.pump();
  CHECK(!slow_tx->writable());
  CHECK(slow_rx->readable_bytes() == 8192);
  // The fast stream still moves a lot of data.
  uint64_t moved = 0;
  for (int i = 0; i < 1000 && moved < 1000000; ++i) {
    fast_tx->write(buf.data(), 4096, &done);
    p.pump();
    size_t n = 0;
    fast_rx->read(in.data(), in.size(), &n, false);
    moved += n;
  }
  CHECK(moved >= 1000000);
  // The slow reader finally reads: its sender may continue.
  size_t n = 0;
  CHECK(slow_rx->read(in.data(), in.size(), &n, false) == Status::ok);
  CHECK(n == 8192);
  p.pump();
  CHECK(slow_tx->writable());
}

TEST_CASE("streams: peek, half-close, end of stream and reset") {
  MuxPair p;
  Stream* a = p.a.open(0, 0, 0);
  Stream* b = p.b.open(0, 0, 0);
  size_t done, got;
  char out[16] = {};
  CHECK(b->read(out, sizeof out, &got, false) == Status::would_block);
  CHECK(a->write("hello", 5, &done) == Status::ok);
  p.pump();
  CHECK(b->read(out, 3, &got, true) == Status::ok);
  CHECK(got == 3);
  CHECK(b->readable_bytes() == 5); // peek leaves the bytes
  CHECK(a->shutdown_write() == Status::ok);
  CHECK(a->write("x", 1, &done) == Status::closed); // EPIPE at the boundary
  p.pump();
  CHECK(b->read(out, sizeof out, &got, false) == Status::ok);
  CHECK(std::string(out, got) == "hello");
  CHECK(b->read(out, sizeof out, &got, false) == Status::ok);
  CHECK(got == 0); // end of stream
  CHECK(b->peer_finished());
  // The other direction still works after the half-close.
  CHECK(b->write("back", 4, &done) == Status::ok);
  p.pump();
  CHECK(a->read(out, sizeof out, &got, false) == Status::ok);
  CHECK(got == 4);
  // Reset.
  CHECK(p.b.channel().send_control(flow::RecordType::rst, 0, 0) == Status::ok);
  p.pump();
  CHECK(a->was_reset());
  CHECK(a->read(out, sizeof out, &got, false) == Status::closed);
}

TEST_CASE("streams: open rules and records for closed streams") {
  MuxParams mp;
  mp.max_streams = 4;
  MuxPair p(65536, mp);
  Stream* s = p.a.open(3, 0, 0);
  CHECK(s != nullptr);
  CHECK(p.a.open(3, 0, 0) == nullptr);
  CHECK(p.a.open(Mux::kMaxStreamId + 1, 0, 0) == nullptr);
  CHECK(p.a.find(7) == nullptr);
  CHECK(p.a.find(3) == s);
  Stream* r = p.b.open(3, 0, 0);
  size_t done;
  CHECK(s->write("abc", 3, &done) == Status::ok);
  p.b.close(r); // closed here, the peer's data still arrives
  CHECK(p.b.progress() == Status::ok);
  CHECK(p.b.counters().unknown_stream_records == 1);
}

TEST_CASE(
    "streams: ids are never reused, so a closed stream's late records never reach a new one") {
  // redis-benchmark over Soft-RoCE (CI): the client closed a stream whose
  // upgrade was under way and attached the next connection with the same
  // id while the server still held the first; the server's FIN and data
  // for the first then landed in the second (a refused record, a failed
  // channel, three connections reset).  Now the client proposes ids never
  // used on the channel, and a slot's records carry the whole id.
  MuxParams mp;
  mp.max_streams = 2;
  MuxPair p(65536, mp);
  uint32_t id = 99;
  REQUIRE(p.a.fresh_id(&id));
  CHECK(id == 1); // 0 is the first stream's (named in the rdma_cm request)
  Stream* a_old = p.a.open(0, 0, 0);
  Stream* b_old = p.b.open(0, 0, 0);
  REQUIRE((a_old && b_old));
  size_t done = 0;
  REQUIRE(b_old->write("0123456789", 10, &done) == Status::ok);
  p.pump();
  p.a.close(a_old); // the client is done with it; the server is not yet
  REQUIRE(p.a.fresh_id(&id));
  CHECK(id == 1);
  Stream* a_one = p.a.open(id, 0, 0);
  REQUIRE(a_one != nullptr);
  REQUIRE(p.a.fresh_id(&id));
  CHECK(id == 2); // slot 0 again, under a new id
  Stream* a_new = p.a.open(id, 0, 0);
  REQUIRE(a_new != nullptr);
  // The server's first stream goes on: data, then its FIN, all crossing
  // the client's new stream in the same slot.
  REQUIRE(b_old->write("late", 4, &done) == Status::ok);
  p.b.close(b_old);
  const uint64_t dropped = p.a.counters().unknown_stream_records;
  REQUIRE(p.a.progress() == Status::ok);
  CHECK(p.a.counters().unknown_stream_records == dropped + 2);
  CHECK(a_new->readable_bytes() == 0);
  CHECK_FALSE(a_new->readable());
  // The server opens the new stream (its ATTACH arrived): bytes flow.
  Stream* b_new = p.b.open(2, 0, 0);
  REQUIRE(b_new != nullptr);
  REQUIRE(b_new->write("fresh", 5, &done) == Status::ok);
  REQUIRE(p.a.progress() == Status::ok);
  char out[8];
  size_t got = 0;
  REQUIRE(a_new->read(out, sizeof out, &got, false) == Status::ok);
  CHECK(got == 5);
  CHECK(memcmp(out, "fresh", 5) == 0);
  // Every id is used once: with both slots taken there is none to give.
  CHECK_FALSE(p.a.fresh_id(&id));
  p.a.close(a_one);
  REQUIRE(p.a.fresh_id(&id));
  CHECK(id == 3);
}

TEST_CASE("streams: hostile records break the channel, never the process") {
  auto inject = [](MuxPair& p, flow::RecordHeader h) {
    // One forged record at b's ring position 0 (nothing sent yet).
    p.lb.inject(0, &h, sizeof h, static_cast<uint32_t>(flow::record_bytes(h.len)));
    return p.b.progress();
  };
  SUBCASE("data out of sequence") {
    MuxPair p;
    p.b.open(0, 0, 0);
    CHECK(inject(p, {1, 0, 0, 0, 77, 0, 0}) == Status::invalid);
  }
  SUBCASE("ack beyond what was sent") {
    MuxPair p;
    p.b.open(0, 0, 0);
    CHECK(inject(p, {3, 0, 0, 0, 5000, 0, 0}) == Status::invalid);
  }
  SUBCASE("fin not at the end of the data") {
    MuxPair p;
    p.b.open(0, 0, 0);
    CHECK(inject(p, {4, 0, 0, 0, 9, 0, 0}) == Status::invalid);
  }
  SUBCASE("more data than the window") {
    MuxParams mp;
    mp.stream_window = 4096;
    MuxPair p(65536, mp);
    Stream* s = p.b.open(0, 0, 0);
    std::vector<uint8_t> rec(sizeof(flow::RecordHeader) + 8000);
    flow::RecordHeader h{1, 0, 0, 0, 0, 8000, 0};
    memcpy(rec.data(), &h, sizeof h);
    p.lb.inject(0, rec.data(), rec.size(), static_cast<uint32_t>(flow::record_bytes(8000)));
    CHECK(p.b.progress() == Status::invalid);
    size_t done;
    CHECK(s->write("x", 1, &done) == Status::closed);
  }
  SUBCASE("more data than the window, even with a large buffer lent") {
    // A lent buffer takes bytes without the receive buffer's room check:
    // the window is checked on its own.
    MuxParams mp;
    mp.stream_window = 4096;
    MuxPair p(65536, mp);
    Stream* s = p.b.open(0, 0, 0);
    std::vector<uint8_t> rec(sizeof(flow::RecordHeader) + 8000), big(100000);
    flow::RecordHeader h{1, 0, 0, 0, 0, 8000, 0};
    memcpy(rec.data(), &h, sizeof h);
    p.lb.inject(0, rec.data(), rec.size(), static_cast<uint32_t>(flow::record_bytes(8000)));
    iovec v{big.data(), big.size()};
    s->lend(&v, 1);
    CHECK(p.b.progress() == Status::invalid);
    CHECK(s->take_lent() == 0);
  }
  SUBCASE("stream id beyond the table is dropped") {
    MuxPair p;
    CHECK(inject(p, {1, 0, 0, 1u << 30, 0, 0, 0}) == Status::ok);
    CHECK(p.b.counters().unknown_stream_records == 1);
  }
}

// docs/protocol.md §4 "The ring is peer-writable": a peer rewrites a record's
// header with a plain RDMA WRITE after the channel validated it, before the
// stream layer uses it (here from the control handler of the record before,
// which runs between the two).  Only the validated copy counts: the stream
// gets the bytes that were sent, never a read past the record's slot (the
// ring's end: a heap-buffer-overflow read under ASan when the stream layer
// read the header a second time from the ring).
TEST_CASE("streams: a header rewritten in the ring after it arrived is never read again") {
  struct Rewrite {
    FakeLink* link;
    uint32_t len; // the forged length
  };
  for (uint32_t forged : {20000u, 65536u - 64 - 24 + 4096}) { // inside the ring; past its end
    CAPTURE(forged);
    MuxPair p;
    Stream* tx = p.a.open(0, 0, 0);
    Stream* rx = p.b.open(0, 0, 0);
    REQUIRE((tx && rx));
    Rewrite rw{&p.lb, forged};
    p.b.set_control_handler(
        [](void* ctx, const flow::RecordHeader&, const uint8_t*) {
          auto* w = static_cast<Rewrite*>(ctx);
          // The data record after this keepalive starts at ring offset 64.
          flow::RecordHeader h{1, 0, 0, 0, 0, w->len, 0};
          w->link->overwrite(64, &h, sizeof h);
          return Status::ok;
        },
        &rw);
    REQUIRE(p.a.channel().send_control(flow::RecordType::keepalive, 0, 0) == Status::ok);
    size_t done = 0;
    REQUIRE(tx->write("hello, world", 12, &done) == Status::ok);
    REQUIRE(done == 12);
    CHECK(p.b.progress() == Status::ok);
    CHECK(rx->received() == 12);
    char buf[64] = {};
    size_t got = 0;
    CHECK(rx->read(buf, sizeof buf, &got, false) == Status::ok);
    CHECK(got == 12);
    CHECK(memcmp(buf, "hello, world", 12) == 0);
  }
}

TEST_CASE("streams: upgrade control records reach the handler, or break the channel without one") {
  MuxPair p;
  static int seen;
  seen = 0;
  CHECK(p.a.channel().send_control(flow::RecordType::keepalive, 0, 7, "abc", 3) == Status::ok);
  p.b.set_control_handler(
      [](void*, const flow::RecordHeader& h, const uint8_t* payload) {
        seen = static_cast<int>(h.seq) + (memcmp(payload, "abc", 3) == 0 ? 100 : 0);
        return Status::ok;
      },
      nullptr);
  CHECK(p.b.progress() == Status::ok);
  CHECK(seen == 107);
  CHECK(p.b.channel().send_control(flow::RecordType::switch_, 0, 1) == Status::ok);
  CHECK(p.a.progress() == Status::invalid); // a has no handler
  CHECK(p.a.channel().send_control(flow::RecordType::attach, 0, 0, nullptr, 200) ==
        Status::invalid); // control payloads are small
}

TEST_CASE("streams: switch offsets are set once, before bytes flow") {
  MuxPair p;
  Stream* a = p.a.open(0, 0, 0);
  Stream* b = p.b.open(0, 0, 0);
  CHECK(a->set_tx_start(1234) == Status::ok);
  CHECK(a->set_tx_start(99) == Status::invalid); // once
  CHECK(b->set_rx_start(1234) == Status::ok);
  CHECK(b->set_rx_start(1234) == Status::invalid);
  size_t done, got;
  CHECK(a->write("xyz", 3, &done) == Status::ok);
  CHECK(a->send_next() == 1237);
  p.pump();
  char out[8];
  CHECK(b->read(out, sizeof out, &got, false) == Status::ok);
  CHECK(got == 3);
  CHECK(b->delivered() == 1237);
  // Data that does not start at the announced offset is a protocol error.
  Stream* c = p.b.open(1, 0, 0);
  CHECK(c->set_rx_start(500) == Status::ok);
  CHECK(p.a.open(1, 0, 0)->write("q", 1, &done) == Status::ok); // seq 0, not 500
  CHECK(p.b.progress() == Status::invalid);
}

TEST_CASE("streams: autocorking gathers a bulk stream's small writes, never a request/response") {
  MuxParams mp;
  mp.stream_window = 65536; // holds from 16 KiB in flight (a quarter)
  mp.cork_max = 16384;
  MuxPair p(262144, mp);
  Stream* tx = p.a.open(1, 0, 0);
  Stream* rx = p.b.open(1, 0, 0);
  REQUIRE((tx && rx));
  const flow::RecordChannel& rc = p.a.channel();
  std::vector<uint8_t> buf(1024), in(70000);

  SUBCASE("request/response: every write leaves at once") {
    for (uint64_t i = 0; i < 200; ++i) {
      for (size_t k = 0; k < buf.size(); ++k)
        buf[k] = pat(1, i * buf.size() + k);
      size_t done = 0;
      REQUIRE(tx->write(buf.data(), buf.size(), &done) == Status::ok);
      REQUIRE(done == buf.size());
      CHECK(!rc.corked());
      p.pump();
      size_t got = 0;
      REQUIRE(rx->read(in.data(), in.size(), &got, false) == Status::ok);
      REQUIRE(got == buf.size());
      for (size_t k = 0; k < got; ++k)
        REQUIRE(in[k] == pat(1, i * buf.size() + k));
      p.pump();
    }
    CHECK(rc.counters().corked_records == 0);
  }

  SUBCASE("bulk: writes beyond a quarter window in flight are gathered; acks post them") {
    constexpr uint64_t kBytes = 4 << 20;
    uint64_t sent = 0, received = 0;
    std::mt19937 rng(5);
    while (received < kBytes) {
      // The writer runs ahead while the reader lags (the bulk case).
      for (int w = 0; w < 64 && sent < kBytes; ++w) {
        for (size_t k = 0; k < buf.size(); ++k)
          buf[k] = pat(1, sent + k);
        size_t done = 0;
        Status st = tx->write(buf.data(), buf.size(), &done);
        REQUIRE((st == Status::ok || st == Status::no_resource));
        sent += done;
        if (done < buf.size()) break; // window full
      }
      p.pump();
      size_t got = 0;
      size_t want = 1 + rng() % in.size();
      REQUIRE(rx->read(in.data(), want, &got, false) == Status::ok);
      for (size_t k = 0; k < got; ++k)
        REQUIRE(in[k] == pat(1, received + k));
      received += got;
      p.pump();
      REQUIRE(sent >= received);
    }
    CHECK(rc.counters().corked_records > 0);
    CHECK(rc.counters().cork_appends > 2 * rc.counters().corked_records);
    // Far fewer records than writes of 1 KiB.
    CHECK(rc.counters().records_sent < kBytes / 1024 / 2);
    CHECK(!rc.corked());
  }
}

TEST_CASE("streams: autocorking never holds the tail of one large send, nor of a gathered one") {
  MuxParams mp; // 256 KiB window: holds from 64 KiB of earlier calls in flight
  mp.cork_max = 64 * 1024;
  MuxPair p(524288, mp);
  Stream* tx = p.a.open(1, 0, 0);
  Stream* rx = p.b.open(1, 0, 0);
  REQUIRE((tx && rx));
  const flow::RecordChannel& rc = p.a.channel();
  std::vector<uint8_t> msg(150000, 3);
  size_t done = 0;
  // One send() of a 150000-byte request: three records (the last 18976
  // bytes) and nothing held, though 131072 bytes are in flight by then.
  REQUIRE(tx->write(msg.data(), msg.size(), &done) == Status::ok);
  REQUIRE(done == msg.size());
  CHECK_FALSE(rc.corked());
  // A writev of [100000, 8000]: the second element is the same call's.
  REQUIRE(tx->write(msg.data(), 8000, &done, 100000) == Status::ok);
  CHECK_FALSE(rc.corked());
  // A later call, with more than a quarter window of earlier bytes in
  // flight (the bulk case), may hold.
  REQUIRE(tx->write(msg.data(), 4000, &done) == Status::ok);
  CHECK(rc.corked());
  p.pump();
  CHECK(rc.corked()); // nothing read yet: still a quarter window in flight
  std::vector<uint8_t> in(200000);
  uint64_t got = 0;
  for (int i = 0; i < 20 && got < 162000; ++i) {
    size_t n = 0;
    if (rx->read(in.data(), in.size(), &n, false) == Status::ok) got += n;
    p.pump(); // b's ACK, then a posts the held record
  }
  CHECK(got == 162000);
  CHECK_FALSE(rc.corked());
}

TEST_CASE("streams: MSG_MORE holds the bytes for the next write, which takes them along") {
  MuxParams mp;
  mp.cork_max = 64 * 1024;
  MuxPair p(65536, mp);
  Stream* tx = p.a.open(1, 0, 0);
  Stream* rx = p.b.open(1, 0, 0);
  REQUIRE((tx && rx));
  const flow::RecordChannel& rc = p.a.channel();
  size_t done = 0;
  REQUIRE(tx->write("head", 4, &done, 0, true) == Status::ok);
  CHECK(rc.corked());
  p.pump(); // nothing in flight, but the program said more follows
  CHECK(rc.corked());
  const uint64_t records = rc.counters().records_sent;
  REQUIRE(tx->write("body", 4, &done) == Status::ok);
  CHECK_FALSE(rc.corked());
  CHECK(rc.counters().records_sent == records + 1); // one record for both
  p.pump();
  char in[16] = {};
  size_t got = 0;
  REQUIRE(rx->read(in, sizeof in, &got, false) == Status::ok);
  CHECK(got == 8);
  CHECK(std::string(in, got) == "headbody");
  // A FIN after MSG_MORE bytes: the bytes, then the end.
  REQUIRE(tx->write("last", 4, &done, 0, true) == Status::ok);
  CHECK(rc.corked());
  REQUIRE(tx->shutdown_write() == Status::ok);
  CHECK_FALSE(rc.corked());
  p.pump();
  REQUIRE(rx->read(in, sizeof in, &got, false) == Status::ok);
  CHECK(std::string(in, got) == "last");
  REQUIRE(rx->read(in, sizeof in, &got, false) == Status::ok);
  CHECK(got == 0); // end of stream
}

TEST_CASE("streams: a lent buffer takes arriving bytes directly, in order, the rest is buffered") {
  MuxParams mp;
  mp.stream_window = 65536;
  MuxPair p(262144, mp);
  Stream* tx = p.a.open(0, 0, 0);
  Stream* rx = p.b.open(0, 0, 0);
  Stream* other_tx = p.a.open(1, 0, 0);
  Stream* other_rx = p.b.open(1, 0, 0);
  REQUIRE((tx && rx && other_tx && other_rx));
  std::vector<uint8_t> out(40000), in(40000, 0), other(500, 9), other_in(500);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = pat(0, i);
  size_t done = 0;
  // Three records, another stream's bytes between them.
  REQUIRE(tx->write(out.data(), 10000, &done) == Status::ok);
  REQUIRE(other_tx->write(other.data(), other.size(), &done) == Status::ok);
  REQUIRE(tx->write(out.data() + 10000, 10000, &done) == Status::ok);
  REQUIRE(tx->write(out.data() + 20000, 20000, &done) == Status::ok);
  SUBCASE("the buffer (two iovec elements) takes what fits, the rest waits in order") {
    iovec v[2] = {{in.data(), 7000}, {in.data() + 7000, 18000}};
    rx->lend(v, 2);
    REQUIRE(p.b.progress() == Status::ok);
    CHECK(rx->take_lent() == 25000);
    CHECK(rx->delivered() == 25000);
    CHECK(rx->readable_bytes() == 15000);
    size_t n = 0;
    CHECK(rx->read(in.data() + 25000, 15000, &n, false) == Status::ok);
    CHECK(n == 15000);
    CHECK(in == out);
    CHECK(p.b.counters().direct_bytes == 25000);
    // The other stream's bytes were buffered for it, untouched.
    CHECK(other_rx->read(other_in.data(), other_in.size(), &n, false) == Status::ok);
    CHECK(other_in == other);
  }
  SUBCASE("nothing goes direct while bytes are buffered (they come first)") {
    REQUIRE(p.b.progress() == Status::ok); // all 40000 buffered
    iovec v{in.data(), in.size()};
    REQUIRE(tx->write(out.data(), 100, &done) == Status::ok);
    rx->lend(&v, 1);
    REQUIRE(p.b.progress() == Status::ok);
    CHECK(rx->take_lent() == 0);
    CHECK(rx->readable_bytes() == 40100);
    CHECK(p.b.counters().direct_bytes == 0);
  }
  SUBCASE("bytes taken directly are acknowledged: the sender's window reopens") {
    std::vector<uint8_t> big(65536);
    iovec v{big.data(), big.size()};
    rx->lend(&v, 1);
    REQUIRE(p.b.progress() == Status::ok);
    CHECK(rx->take_lent() == 40000);
    REQUIRE(p.a.progress() == Status::ok);
    CHECK(tx->send_acked() == 40000);
    CHECK(memcmp(big.data(), out.data(), out.size()) == 0);
  }
}

TEST_CASE("streams: a sender never has more in flight than the peer's smaller window") {
  // Regression: each end used its own XPRESS_STREAM_WINDOW_KB as the send
  // window; a sender configured larger than its receiver overran the
  // receiver's buffer, which broke the channel (its streams fell back to
  // TCP, then came back and broke it again).
  test::LinkPair lp(262144);
  MuxParams big, small;
  big.stream_window = 65536;
  small.stream_window = 16384;
  lp.la.told_window = big.stream_window;
  lp.lb.told_window = small.stream_window;
  Mux a(&lp.la, big), b(&lp.lb, small);
  Stream* tx = a.open(0, 0, 0);
  Stream* rx = b.open(0, 0, 0);
  REQUIRE((tx && rx));
  std::vector<uint8_t> buf(4096, 1), in(65536);
  size_t done = 0, total = 0;
  // The reader does not read: the sender stops at the receiver's window.
  while (tx->write(buf.data(), buf.size(), &done) == Status::ok && done > 0) {
    total += done;
    REQUIRE(b.progress() == Status::ok);
    REQUIRE(a.progress() == Status::ok);
  }
  CHECK(total == 16384);
  CHECK(rx->readable_bytes() == 16384);
  // And the small end still sends its full window to the big one.
  Stream* tx2 = b.open(1, 0, 0);
  Stream* rx2 = a.open(1, 0, 0);
  REQUIRE((tx2 && rx2));
  total = 0;
  while (tx2->write(buf.data(), buf.size(), &done) == Status::ok && done > 0) {
    total += done;
    REQUIRE(a.progress() == Status::ok);
  }
  CHECK(total == 16384);
  // The window then moves as the reader reads.
  size_t n = 0;
  CHECK(rx->read(in.data(), in.size(), &n, false) == Status::ok);
  CHECK(n == 16384);
  REQUIRE(a.progress() == Status::ok);
  CHECK(tx->writable());
}
