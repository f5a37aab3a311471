// Credits and the send window: never overrun the ring, never exceed a
// window, reject hostile grants and acks.
#include <doctest/doctest.h>

#include <random>

#include "flow/credits.h"
#include "flow/send_window.h"

using namespace xp;
using namespace xp::flow;

TEST_CASE("credits: sender stops at the ring size and resumes on a grant") {
  SendCredit s(1024);
  RecvCredit r(1024);
  uint64_t off = 0;
  CHECK(s.reserve(600, &off) == Status::ok);
  CHECK(off == 0);
  CHECK(r.on_arrival(600) == Status::ok);
  CHECK(s.reserve(500, &off) == Status::no_resource);
  CHECK(s.reserve(424, &off) == Status::ok);
  CHECK(off == 600);
  CHECK(r.on_arrival(424) == Status::ok);
  CHECK(s.available() == 0);
  CHECK(r.on_consumed(200) == Status::ok);
  CHECK(!r.should_grant()); // below a quarter of the ring
  CHECK(r.on_consumed(400) == Status::ok);
  REQUIRE(r.should_grant());
  CHECK(s.on_grant(r.take_grant()) == Status::ok);
  CHECK(s.available() == 600);
  CHECK(s.reserve(600, &off) == Status::ok);
  CHECK(off == 0); // wrapped to the ring start
}

TEST_CASE("credits: hostile or broken peers are detected") {
  SendCredit s(1024);
  uint64_t off;
  CHECK(s.reserve(0, &off) == Status::invalid);
  CHECK(s.reserve(2000, &off) == Status::invalid);
  CHECK(s.reserve(100, &off) == Status::ok);
  CHECK(s.on_grant(5000) == Status::invalid); // consumed more than we wrote
  CHECK(s.on_grant(50) == Status::ok);
  CHECK(s.on_grant(10) == Status::ok); // stale grant: no effect
  CHECK(s.available() == 1024 - 50);
  RecvCredit r(1024);
  CHECK(r.on_arrival(1025) == Status::invalid); // sender overran its credit
  CHECK(r.on_arrival(1024) == Status::ok);
  CHECK(r.on_arrival(1) == Status::invalid);
  CHECK(r.on_consumed(2000) == Status::invalid);
}

TEST_CASE("credits: random traffic never overruns the ring") {
  std::mt19937 rng(7);
  SendCredit s(4096);
  RecvCredit r(4096);
  uint64_t sent = 0, consumed = 0;
  for (int i = 0; i < 100000; ++i) {
    uint64_t n = 1 + rng() % 1500, off;
    if (s.reserve(n, &off) == Status::ok) {
      REQUIRE(r.on_arrival(n) == Status::ok);
      sent += n;
    }
    uint64_t c = rng() % (r.in_ring() + 1);
    REQUIRE(r.on_consumed(c) == Status::ok);
    consumed += c;
    REQUIRE(r.in_ring() <= 4096);
    if (r.should_grant()) REQUIRE(s.on_grant(r.take_grant()) == Status::ok);
  }
  CHECK(sent - consumed == r.in_ring());
  CHECK(sent > 1000000);
}

TEST_CASE("send window: per stream and shared budgets, partial fits, acks") {
  WindowBudget channel(1000), peer(1500);
  SendWindow a(0, 800, &channel, &peer), b(100, 800, &channel, &peer);
  uint64_t got;
  CHECK(a.reserve(700, &got) == Status::ok);
  CHECK(got == 700);
  CHECK(b.reserve(700, &got) == Status::ok);
  CHECK(got == 300); // the channel budget allows only 300 more
  CHECK(b.reserve(1, &got) == Status::no_resource);
  CHECK(b.next() == 400);
  CHECK(a.on_ack(500) == Status::ok);
  CHECK(channel.in_flight() == 500);
  CHECK(b.reserve(1000, &got) == Status::ok);
  CHECK(got == 500);                  // stream b's own limit: 800 - 300 unacked
  CHECK(a.on_ack(100) == Status::ok); // old ack: ignored
  CHECK(a.acked() == 500);
  CHECK(a.on_ack(701) == Status::invalid); // beyond what was sent
  CHECK(b.on_ack(b.next()) == Status::ok);
  CHECK(a.on_ack(a.next()) == Status::ok);
  CHECK(channel.in_flight() == 0);
  CHECK(peer.in_flight() == 0);
  CHECK(b.acked() == 900); // the resume point recovery would use
}

#include "recover/resume.h"

TEST_CASE("resume point: boundaries") {
  uint64_t from, resend;
  // nothing sent
  CHECK(recover::resume_point({0, 0, 0}, &from, &resend) == Status::ok);
  CHECK((from == 0 && resend == 0));
  // mid-message: receiver delivered part of what was sent
  CHECK(recover::resume_point({100, 500, 300}, &from, &resend) == Status::ok);
  CHECK((from == 300 && resend == 200));
  // peer acknowledged everything
  CHECK(recover::resume_point({500, 500, 500}, &from, &resend) == Status::ok);
  CHECK(resend == 0);
  // contradictions
  CHECK(recover::resume_point({100, 500, 600}, &from, &resend) == Status::invalid);
  CHECK(recover::resume_point({400, 500, 300}, &from, &resend) == Status::invalid);
}
