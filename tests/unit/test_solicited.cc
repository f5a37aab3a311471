// Solicited completion events (docs/protocol.md §4, "Completion events"):
// the records that change a stream's readiness for a reader are sent
// solicited, credits and acknowledgements are not; a channel is armed for
// solicited completions only while no thread of the process may wait for
// room to send and it holds no corked record, and such an arm is widened
// as soon as one may.
#include <doctest/doctest.h>

#include <vector>

#include "channel_fixture.h"
#include "flow/record_channel.h"
#include "stream/channel_sleep.h"

using namespace xp;
using namespace xp::stream;
using namespace xp::test;

namespace {

struct SolicitedSetting {
  bool saved = engine::g().p.solicited_events;
  explicit SolicitedSetting(bool on) { engine::g().p.solicited_events = on; }
  ~SolicitedSetting() { engine::g().p.solicited_events = saved; }
};

} // namespace

TEST_CASE("solicited: data, end of stream and control records are; credits and acks are not") {
  LinkPair lp(8192);
  flow::RecordChannel a(&lp.la, 4), b(&lp.lb, 4);
  const uint8_t bytes[100] = {1, 2, 3};
  REQUIRE(a.send(7, 0, bytes, sizeof bytes, false) == Status::ok);
  REQUIRE(a.send(7, 100, bytes, sizeof bytes, false) == Status::ok); // bare (no header)
  REQUIRE(a.send_control(flow::RecordType::fin, 7, 200, nullptr, 0) == Status::ok);
  REQUIRE(a.send_control(flow::RecordType::keepalive, 0, 0, nullptr, 0) == Status::ok);
  CHECK(lp.la.solicited_posts == 4);
  CHECK(lp.la.unsolicited_posts == 0);
  REQUIRE(a.send_control(flow::RecordType::ack, 7, 100, nullptr, 0) == Status::ok);
  CHECK(lp.la.unsolicited_posts == 1);

  // The receiver consumes a quarter of its ring: its credit record goes
  // back unsolicited.
  std::vector<uint8_t> big(1024);
  for (uint64_t seq = 200; b.counters().credit_records_sent == 0; seq += big.size()) {
    flow::Record r[16];
    int got = 0;
    if (a.send(8, seq, big.data(), big.size(), false) != Status::ok) {
      REQUIRE(a.poll(r, 16, &got) == Status::ok);
      REQUIRE(got == 0);
    }
    REQUIRE(b.poll(r, 16, &got) == Status::ok);
    for (int i = 0; i < got; ++i)
      REQUIRE(b.release(r[i].slot) == Status::ok);
  }
  CHECK(lp.lb.unsolicited_posts == b.counters().credit_records_sent);
  CHECK(lp.lb.solicited_posts == 0);
}

TEST_CASE("solicited: a channel is armed for solicited completions only while nobody waits for "
          "room") {
  SolicitedSetting on(true);
  EventLink a, b;
  Channel* ch = client_channel(a, b);
  ch->armed.store(false);

  CHECK(engine::arm_for_news(ch));
  CHECK(a.armed_solicited);
  CHECK_FALSE(engine::arm_for_news(ch)); // armed already

  // A thread that may wait for room to send: the arm is widened at once.
  const uint64_t arms = a.arms;
  {
    RoomWait room;
    room.enter();
    CHECK_FALSE(a.armed_solicited);
    CHECK(a.arms == arms + 1);
    CHECK_FALSE(ch->armed_solicited.load());
    // While it waits, arms are for every completion.
    ch->armed.store(false);
    CHECK(engine::arm_for_news(ch));
    CHECK_FALSE(a.armed_solicited);
  }

  // A corked record leaves with the peer's acknowledgement: every completion.
  ch->armed.store(false);
  ch->held.store(true);
  CHECK(engine::arm_for_news(ch));
  CHECK_FALSE(a.armed_solicited);
  ch->held.store(false);

  // A blocked call that needs every completion widens a solicited arm (and
  // polls: what came before raised no event).
  ch->armed.store(false);
  CHECK(engine::arm_for_news(ch));
  CHECK(a.armed_solicited);
  CHECK(engine::rearm(ch));
  CHECK_FALSE(a.armed_solicited);
  CHECK_FALSE(engine::rearm(ch));

  // The engine re-arms an event it took for solicited completions only.
  a.event();
  engine::take_event(ch);
  CHECK(ch->armed.load());
  CHECK(a.armed_solicited);
  drop(ch);
}

TEST_CASE("solicited: XPRESS_SOLICITED_EVENTS=0, or a version-4 peer: every completion") {
  EventLink a, b;
  Channel* ch = client_channel(a, b);
  {
    SolicitedSetting off(false);
    ch->armed.store(false);
    CHECK(engine::arm_for_news(ch));
    CHECK_FALSE(a.armed_solicited);
    RoomWait room; // counts nothing: nothing to widen
    room.enter();
  }
  {
    SolicitedSetting on(true);
    a.solicits = false; // its data would raise no event
    ch->armed.store(false);
    CHECK(engine::arm_for_news(ch));
    CHECK_FALSE(a.armed_solicited);
  }
  drop(ch);
}

TEST_CASE("solicited: a channel sleeper's arm stays when it leaves; a room waiter widens it") {
  SolicitedSetting on(true);
  bool saved = engine::g().p.sleep_on_channel;
  engine::g().p.sleep_on_channel = true;
  EventLink a, b;
  Channel* ch = client_channel(a, b);
  {
    EngineEpoll engine_ep(ch);
    struct Src final : ReadySource {
      Channel* ch = nullptr;
      uint32_t ready_events() const override { return 0; }
      uint32_t ready_gen(uint32_t) const override { return 0; }
      Channel* sleep_channel() const override { return ch; }
    } src;
    src.ch = ch;
    ch->armed.store(false);
    ChannelSleep s;
    s.add(&src);
    CHECK(s.begin()); // armed now: look again
    CHECK(a.armed_solicited);
    CHECK_FALSE(s.begin()); // asleep on it
    s.end(0); // woken by something else: the engine watches again, armed as it would arm
    CHECK(a.armed_solicited);
    RoomWait room;
    room.enter();
    CHECK_FALSE(a.armed_solicited);
    CHECK_FALSE(ch->armed_solicited.load());
  }
  engine::g().p.sleep_on_channel = saved;
  drop(ch);
}
