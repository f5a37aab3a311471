// Autocorking (flow/record_channel_cork.cc) over the fake link: writes the
// caller lets wait are gathered into one record, which leaves when a send
// without hold continues it, before any later record, when full, or on
// flush_cork(); nothing is lost, reordered or duplicated, the recovery
// walk sees a held record whole, and can_send still promises what send
// keeps.  When to hold is the stream layer's (test_stream.cc).
#include <doctest/doctest.h>

#include <map>
#include <random>
#include <vector>

#include "fake_link.h"
#include "flow/record_channel.h"

using namespace xp;
using namespace xp::flow;
using xp::test::FakeLink;

namespace {
struct CorkPair : test::LinkPair {
  RecordChannel a, b;
  explicit CorkPair(size_t ring = 65536, size_t cork = 4096, uint32_t signal_every = 1,
                    uint32_t sq = 128)
      : LinkPair(ring, sq), a(&la, signal_every), b(&lb, signal_every) {
    a.set_cork(cork);
    b.set_cork(cork);
  }
};

struct Got {
  uint8_t type;
  uint32_t stream;
  uint64_t seq;
  std::vector<uint8_t> bytes;
};

std::vector<Got> receive(RecordChannel& ch) {
  std::vector<Got> out;
  Record r[16];
  int got = 0;
  do {
    REQUIRE(ch.poll(r, 16, &got) == Status::ok);
    for (int i = 0; i < got; ++i) {
      out.push_back(Got{r[i].hdr.type, r[i].hdr.stream, r[i].hdr.seq,
                        std::vector<uint8_t>(r[i].payload, r[i].payload + r[i].hdr.len)});
      REQUIRE(ch.release(r[i].slot) == Status::ok);
    }
  } while (got > 0);
  return out;
}

std::vector<uint8_t> bytes_of(uint8_t first, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<uint8_t>(first + i);
  return v;
}
} // namespace

TEST_CASE("autocork: held writes become one record, posted by the send that does not hold") {
  CorkPair p;
  auto first = bytes_of(1, 100);
  REQUIRE(p.a.send(5, 0, first.data(), first.size()) == Status::ok);
  CHECK(!p.a.corked()); // no hold asked: it left at once
  CHECK(p.la.posts == 1);
  std::vector<uint8_t> held;
  for (int i = 0; i < 10; ++i) {
    auto m = bytes_of(static_cast<uint8_t>(i * 7), 100);
    REQUIRE(p.a.send(5, 100 + 100 * i, m.data(), m.size(), i < 9) == Status::ok);
    held.insert(held.end(), m.begin(), m.end());
    if (i < 9) {
      CHECK(p.a.corked());
      CHECK(p.a.cork_len() == 100u * (i + 1));
    }
  }
  CHECK(!p.a.corked()); // the last one did not hold: it took the record along
  CHECK(p.la.posts == 2);
  CHECK(p.a.counters().corked_records == 1);
  CHECK(p.a.counters().cork_appends == 9);
  auto got = receive(p.b);
  REQUIRE(got.size() == 2);
  CHECK(got[0].bytes == first);
  CHECK(got[1].stream == 5);
  CHECK(got[1].seq == 100);
  CHECK(got[1].bytes == held);
  // A poll alone never posts it: that is the stream layer's decision.
  REQUIRE(p.a.send(5, 1100, first.data(), first.size(), true) == Status::ok);
  receive(p.a);
  CHECK(p.a.corked());
  REQUIRE(p.a.flush_cork() == Status::ok);
  CHECK(!p.a.corked());
  got = receive(p.b);
  REQUIRE(got.size() == 1);
  CHECK(got[0].seq == 1100);
}

TEST_CASE("autocork: a held record leaves before any later record, of any kind") {
  CorkPair p;
  auto m = bytes_of(3, 64);
  REQUIRE(p.a.send(1, 0, m.data(), m.size()) == Status::ok);
  REQUIRE(p.a.send(1, 64, m.data(), m.size(), true) == Status::ok);
  REQUIRE(p.a.corked());
  SUBCASE("a control record") {
    REQUIRE(p.a.send_control(RecordType::fin, 1, 128) == Status::ok);
    auto got = receive(p.b);
    REQUIRE(got.size() == 3);
    CHECK(got[1].type == static_cast<uint8_t>(RecordType::data));
    CHECK(got[1].seq == 64);
    CHECK(got[2].type == static_cast<uint8_t>(RecordType::fin));
  }
  SUBCASE("another stream's data") {
    REQUIRE(p.a.send(2, 0, m.data(), m.size(), true) == Status::ok);
    CHECK(p.a.corked()); // the other stream's record is held now
    CHECK(p.a.cork_stream() == 2);
    REQUIRE(p.a.flush_cork() == Status::ok);
    auto got = receive(p.b);
    REQUIRE(got.size() == 3);
    CHECK((got[1].stream == 1 && got[1].seq == 64));
    CHECK((got[2].stream == 2 && got[2].seq == 0));
  }
  SUBCASE("the same stream out of sequence (a bug upstream): never merged") {
    REQUIRE(p.a.send(1, 1000, m.data(), m.size(), true) == Status::ok);
    REQUIRE(p.a.flush_cork() == Status::ok);
    auto got = receive(p.b);
    REQUIRE(got.size() == 3);
    CHECK(got[1].seq == 64);
    CHECK(got[1].bytes.size() == 64);
    CHECK(got[2].seq == 1000);
  }
}

TEST_CASE("autocork: a full held record is posted and the next one starts") {
  CorkPair p(65536, 1024);
  auto m = bytes_of(9, 300);
  uint64_t seq = 0;
  REQUIRE(p.a.send(1, seq, m.data(), m.size()) == Status::ok);
  seq += 300;
  for (int i = 0; i < 7; ++i, seq += 300)
    REQUIRE(p.a.send(1, seq, m.data(), m.size(), true) == Status::ok);
  REQUIRE(p.a.flush_cork() == Status::ok);
  auto got = receive(p.b);
  // 300, then records of at most 1024 bytes: 900 (3 writes), 900, 300.
  REQUIRE(got.size() == 4);
  uint64_t expect = 0;
  for (const Got& g : got) {
    CHECK(g.seq == expect);
    CHECK(g.bytes.size() <= 1024);
    expect += g.bytes.size();
  }
  CHECK(expect == seq);
}

TEST_CASE("autocork: off, every write is its own record") {
  CorkPair p(65536, 0);
  auto m = bytes_of(1, 100);
  for (int i = 0; i < 5; ++i)
    REQUIRE(p.a.send(1, 100 * i, m.data(), m.size(), true) == Status::ok);
  CHECK(!p.a.corked());
  CHECK(p.la.posts == 5);
}

TEST_CASE(
    "autocork: the recovery walk sees a held record whole, and a failed channel never posts it") {
  CorkPair p;
  auto m = bytes_of(5, 200);
  for (int i = 0; i < 4; ++i)
    REQUIRE(p.a.send(7, 200 * i, m.data(), m.size(), i > 0) == Status::ok);
  REQUIRE(p.a.corked());
  p.a.fail();
  CHECK(p.a.flush_cork() == Status::io_error);
  const uint64_t posts = p.la.posts;
  std::map<uint64_t, size_t> seen; // seq -> len
  REQUIRE(p.a.walk_uncredited(
              [](void* ctx, uint64_t, const RecordHeader& h, const uint8_t* payload) {
                auto* s = static_cast<std::map<uint64_t, size_t>*>(ctx);
                (*s)[h.seq] = h.len;
                for (uint32_t i = 0; i < h.len; ++i)
                  if (payload[i] != static_cast<uint8_t>(5 + (h.seq + i) % 200)) return false;
                return true;
              },
              &seen) == Status::ok);
  CHECK(seen.size() == 2);
  CHECK(seen[0] == 200);
  CHECK(seen[200] == 600); // the three held writes, one record
  CHECK(p.la.posts == posts);
}

TEST_CASE("autocork: random writes over several streams and small queues stay intact") {
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    // A small ring and send queue: credit and queue stalls with a held record.
    CorkPair p(8192, 64 + rng() % 2048, 1 + rng() % 4, 8 + rng() % 8);
    std::map<uint32_t, std::vector<uint8_t>> sent, received;
    std::map<uint32_t, uint64_t> next_seq;
    auto pump = [&](bool release_all) {
      for (const Got& g : receive(p.b)) {
        auto& r = received[g.stream];
        REQUIRE(g.type == static_cast<uint8_t>(RecordType::data));
        REQUIRE(g.seq == r.size()); // in order, no gap, no duplicate
        r.insert(r.end(), g.bytes.begin(), g.bytes.end());
      }
      if (release_all || rng() % 2) receive(p.a);
      if (release_all) (void)p.a.flush_cork(); // as the stream layer's look after a poll
    };
    for (int i = 0; i < 4000; ++i) {
      uint32_t s = 1 + rng() % 3;
      size_t len = 1 + rng() % 900;
      std::vector<uint8_t> m(len);
      for (auto& c : m)
        c = static_cast<uint8_t>(rng());
      int tries = 0;
      while (!p.a.can_send(len)) {
        pump(true);
        REQUIRE(++tries < 100);
      }
      // can_send's promise: send takes it (Stream::write counts on it).
      REQUIRE(p.a.send(s, next_seq[s], m.data(), len, rng() % 4 != 0) == Status::ok);
      next_seq[s] += len;
      auto& v = sent[s];
      v.insert(v.end(), m.begin(), m.end());
      if (rng() % 5 == 0) pump(false);
    }
    REQUIRE(p.a.flush_cork() == Status::ok);
    for (int i = 0; i < 20 && received != sent; ++i)
      pump(true);
    CHECK(!p.a.corked());
    CHECK(received == sent);
    CHECK(p.lb.rnr == 0);
    CHECK(p.a.counters().cork_appends > 0);
  }
}
