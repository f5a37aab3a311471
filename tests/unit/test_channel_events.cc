// Who is woken by a channel's completion events (stream/channel_events.cc):
// a blocked call sleeping on the completion fd itself takes the engine's
// watch off that fd, so one event wakes one thread, and an event it did
// not take still reaches the engine once it leaves.  And a sleeper that
// polls the channel itself does not write its own eventfd.  Sleepers in
// poll/select/epoll_wait that wait on their connections' channels
// themselves (stream/channel_sleep.h), and who may spin (stream/spin_gate.h).
#include <doctest/doctest.h>

#include <atomic>
#include <mutex>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "channel_fixture.h"
#include "stream/channel_sleep.h"
#include "stream/engine_internal.h"
#include "stream/spin_gate.h"
#include "stream/wake.h"

using namespace xp;
using namespace xp::stream;
using namespace xp::test;

namespace {

// An event taken right after a spinner left ch: ch stays unarmed.
void take_event_after_spin(EventLink& a, Channel* ch, uint64_t now) {
  ch->last_spin_ns.store(now);
  a.event();
  engine::take_event(ch);
}

struct Source final : ReadySource {
  Channel* ch = nullptr;
  uint32_t ready_events() const override { return 0; }
  uint32_t ready_gen(uint32_t) const override { return 0; }
  Channel* sleep_channel() const override { return ch; }
};

// XPRESS_SLEEP_ON_CHANNEL=1 while it lives.
struct SleepOnChannel {
  bool saved = engine::g().p.sleep_on_channel;
  SleepOnChannel() { engine::g().p.sleep_on_channel = true; }
  ~SleepOnChannel() { engine::g().p.sleep_on_channel = saved; }
};

} // namespace

TEST_CASE("channel events: the engine is not woken for an event a sleeping caller takes") {
  EventLink a, b;
  Channel* ch = client_channel(a, b);
  {
    EngineEpoll engine_ep(ch);
    a.event();
    CHECK(engine_ep.woken() == 1); // nobody sleeps on it: the engine's
    CHECK(a.ack_event());

    // A blocked call sleeps on the fd: the event wakes it alone; it takes
    // the event before the engine watches again.
    engine::sleep_enter(ch);
    a.event();
    CHECK(engine_ep.woken() == 0);
    engine::take_event(ch);
    engine::sleep_leave(ch);
    CHECK(engine_ep.woken() == 0);

    // Two sleepers: the watch comes back with the last one only.  An event
    // neither took (they woke for something else) then reaches the engine.
    engine::sleep_enter(ch);
    engine::sleep_enter(ch);
    a.event();
    engine::sleep_leave(ch);
    CHECK(engine_ep.woken() == 0);
    engine::sleep_leave(ch);
    CHECK(engine_ep.woken() == 1);
    CHECK(a.ack_event());
  }
  drop(ch);
}

TEST_CASE("channel events: an event taken while a thread sends leaves the channel unarmed") {
  EventLink a, b;
  Channel* ch = client_channel(a, b);
  // "Sent lately" is kSentLatelyNs of the clock: a try that took longer
  // (this thread descheduled on a loaded host) says nothing and is made
  // again.
  bool timely = false;
  for (int tries = 0; tries < 100 && !timely; ++tries) {
    const uint64_t now = engine::mono_ns();
    ch->last_send_ns.store(now); // a send() just left it: that thread polls it
    a.event();
    engine::take_event(ch);
    const bool unarmed_after_event = !ch->armed.load();
    const bool noted = engine::maybe_unarmed();
    engine::arm_idle_channels(); // still sending lately: left alone
    const bool unarmed_after_tick = !ch->armed.load();
    // Left unarmed because it is in use: the engine looks again only every
    // kBusyUnarmedTickMs (each look is a wake-up on a busy CPU).
    const bool in_use = engine::unarmed_in_use();
    const int wait = engine::wait_ms();
    if (engine::mono_ns() - now >= engine::kSentLatelyNs) continue;
    timely = true;
    CHECK(unarmed_after_event);
    CHECK(noted);
    CHECK(unarmed_after_tick);
    CHECK(in_use);
    CHECK(wait == engine::kBusyUnarmedTickMs);
  }
  REQUIRE(timely);
  ch->last_send_ns.store(0); // the sender went away: the engine's tick re-arms
  engine::arm_idle_channels();
  CHECK(ch->armed.load());
  CHECK_FALSE(engine::unarmed_in_use());
  // Nobody sends or spins: an event is re-armed at once.
  a.event();
  engine::take_event(ch);
  CHECK(ch->armed.load());
  drop(ch);
}

TEST_CASE("channel events: a thread asleep waiting for anything keeps an idle channel armed") {
  // poll/epoll_wait/select over RDMA streams sleep on their eventfd and
  // learn of their bytes only from whoever polls the channel.  A channel
  // left unarmed because its spinner or sender "is back within
  // microseconds" had nobody polling it for such a sleeper until the
  // engine's busy tick (4 threads of 64 B request/response over one
  // channel on Soft-RoCE: max 100-116 ms, memcslap's 5 s poll timeouts
  // under load).
  EventLink a, b;
  Channel* ch = client_channel(a, b);
  const uint64_t now = engine::mono_ns();
  int efd = static_cast<int>(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  REQUIRE(efd >= 0);
  REQUIRE(stream::wake::add(efd)); // a poll sleeper (waits for anything)
  CHECK(stream::wake::any_sleepers());

  // The event is taken right after a spinner left: re-armed all the same.
  take_event_after_spin(a, ch, now);
  CHECK(ch->armed.load());
  // Sent on lately: the same.
  ch->last_spin_ns.store(0);
  ch->last_send_ns.store(now);
  a.event();
  engine::take_event(ch);
  CHECK(ch->armed.load());
  ch->last_send_ns.store(0);

  // The engine's tick finds it unarmed and spun on lately: it arms it.
  ch->armed.store(false);
  ch->last_spin_ns.store(now);
  engine::left_enter(ch); // not uncovered (within kLeftUncoveredNs): the sleeper decides
  engine::arm_idle_channels();
  CHECK(ch->armed.load());
  engine::left_leave(ch);

  // Someone spins on it now: it stays unarmed (the spinner polls it) until
  // the last spinner leaves while the sleeper still sleeps.
  engine::spin_enter(ch);
  a.event();
  engine::take_event(ch);
  CHECK_FALSE(ch->armed.load());
  engine::spin_leave(ch);
  CHECK(ch->armed.load());

  // No sleeper any more: the bet on the spinner's return stands.
  stream::wake::remove(efd);
  CHECK_FALSE(stream::wake::any_sleepers());
  take_event_after_spin(a, ch, engine::mono_ns());
  CHECK_FALSE(ch->armed.load());
  engine::spin_enter(ch);
  engine::spin_leave(ch);
  CHECK_FALSE(ch->armed.load());
  close(efd);
  engine::arm_idle_channels();
  drop(ch);
}

TEST_CASE("wake: a registered sleeper that polls itself does not write its own eventfd") {
  int efd = wake::thread_fd();
  REQUIRE(efd >= 0);
  wake::drain(efd);
  int key = 0;
  REQUIRE(wake::add(efd, &key));
  pollfd p{efd, POLLIN, 0};
  {
    wake::SelfAwake awake;
    wake::notify_set(&key); // not started: the thread may be someone else's sleeper
    CHECK(poll(&p, 1, 0) == 1);
    wake::drain(efd);
    awake.start();
    wake::notify_set(&key);
    CHECK(poll(&p, 1, 0) == 0);
  }
  wake::notify_set(&key); // after the call: written again
  CHECK(poll(&p, 1, 0) == 1);
  wake::remove(efd);
  wake::drain(efd);
}

TEST_CASE("wake: notify takes no lock when nobody waits for its key or for anything") {
  // Two threads' eventfds: this test's sleepers are registered from here,
  // as other threads' would be.
  int a = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), b = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  REQUIRE(a >= 0);
  REQUIRE(b >= 0);
  alignas(64) static char keys[64 * 1024];
  char* mine = &keys[0];
  // A key in another bucket (keys are hashed by address; 256 buckets).
  char* other = nullptr;
  for (size_t off = 64; off < sizeof keys && other == nullptr; off += 64) {
    REQUIRE(wake::add(b, &keys[off]));
    uint64_t before = wake::scans_for_tests();
    wake::notify_set(mine);
    if (wake::scans_for_tests() == before)
      other = &keys[off];
    else
      wake::remove(b);
  }
  REQUIRE(other != nullptr);
  pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
  // Only a sleeper for another connection: no scan, no write.
  uint64_t s0 = wake::scans_for_tests();
  for (int i = 0; i < 100; ++i)
    wake::notify_set(mine);
  CHECK(wake::scans_for_tests() == s0);
  CHECK(poll(p, 2, 0) == 0);
  // Its own key still wakes it, and a sleeper for this key is woken.
  wake::notify_set(other);
  CHECK(poll(&p[1], 1, 0) == 1);
  wake::drain(b);
  REQUIRE(wake::add(a, mine));
  wake::notify_set(mine);
  CHECK(poll(&p[0], 1, 0) == 1);
  CHECK(poll(&p[1], 1, 0) == 0); // the other connection's sleeper slept on
  wake::drain(a);
  wake::remove(a);
  // A sleeper for anything (poll, select, epoll) is woken by every key.
  REQUIRE(wake::add(a));
  wake::notify_set(mine);
  CHECK(poll(&p[0], 1, 0) == 1);
  wake::drain(a);
  wake::remove(a);
  // Removed: back to no scan.
  s0 = wake::scans_for_tests();
  wake::notify_set(mine);
  CHECK(wake::scans_for_tests() == s0);
  // notify() without a key wakes every sleeper.
  wake::notify();
  CHECK(poll(&p[1], 1, 0) == 1);
  wake::remove(b);
  close(a);
  close(b);
}

namespace {
// drain_inbox's order test: the first record's handling blocks until the
// test lets it go; every handled record's seq is logged in order.
std::mutex g_log_mu;
std::vector<uint64_t> g_handled;
std::atomic<int> g_blocking{0}; // 1: the next record blocks; 2: blocked now
std::atomic<bool> g_release{false};

void ordered_handler(Channel*, const ControlRecord& r) {
  int one = 1;
  if (g_blocking.compare_exchange_strong(one, 2)) {
    while (!g_release.load())
      usleep(100);
  }
  std::lock_guard<std::mutex> l(g_log_mu);
  g_handled.push_back(r.h.seq);
}

void push_record(Channel& ch, uint64_t seq) {
  std::lock_guard<std::mutex> l(ch.mu);
  ControlRecord r{};
  r.h.type = static_cast<uint8_t>(flow::RecordType::proof);
  r.h.seq = seq;
  ch.inbox.push_back(r);
  ch.inbox_pending.store(true);
}
} // namespace

TEST_CASE("channel inbox: records are handled in arrival order by one drainer at a time") {
  // Regression: two threads that had polled a channel each handed out a
  // batch of its control records at once; a stream's ATTACH_ACK (first
  // batch) was handled after its PROOF (second batch): "PROOF/SWITCH before
  // binding" (memcslap on Soft-RoCE, four connections attaching at once).
  Channel ch;
  g_handled.clear();
  g_release = false;
  g_blocking = 1;
  engine::set_record_handler_for_tests(ordered_handler);
  push_record(ch, 1);
  std::thread first([&] { engine::drain_inbox(&ch); }); // handles 1, blocked in it
  while (g_blocking.load() != 2)
    usleep(100);
  push_record(ch, 2);       // polled by another thread meanwhile
  engine::drain_inbox(&ch); // must leave record 2 to the drainer at work
  {
    std::lock_guard<std::mutex> l(g_log_mu);
    CHECK(g_handled.empty());
  }
  g_release = true;
  first.join();
  engine::set_record_handler_for_tests(nullptr);
  REQUIRE(g_handled.size() == 2);
  CHECK(g_handled[0] == 1);
  CHECK(g_handled[1] == 2);
  CHECK(ch.inbox.empty());
  CHECK_FALSE(ch.inbox_pending.load());
}

TEST_CASE("wake: with no waker left (a fork child of an RDMA process) sleepers are refused") {
  // Regression: an accept-then-fork server's child inherited a moved
  // stream still in user mode (bytes buffered at the fork); its poll()
  // registered a wake-up only the parent's engine thread would have sent
  // and slept 60 s with the peer's bytes in the kernel.  Refused, the
  // sleeper sleeps in short slices and looks again.
  int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  REQUIRE(efd >= 0);
  stream::wake::set_no_waker(true);
  CHECK_FALSE(stream::wake::add(efd));
  stream::wake::set_no_waker(false);
  CHECK(stream::wake::add(efd));
  stream::wake::remove(efd);
  close(efd);
}

TEST_CASE("spin budget: the whole ceiling while waits average within it, the minimum beyond") {
  // Regression: the budget was twice the average wait, so a ping-pong's
  // answers slower than twice its typical round trip slept and paid a
  // wake-up each (Soft-RoCE 64 B: p99 1150 us; 780 us spinning the ceiling).
  uint32_t max = engine::params().spin_us;
  REQUIRE(max > 40);
  CHECK(engine::spin_budget_ns(0) == uint64_t{max} * 1000);
  CHECK(engine::spin_budget_ns(max / 8) == uint64_t{max} * 1000);
  CHECK(engine::spin_budget_ns(max) == uint64_t{max} * 1000);
  CHECK(engine::spin_budget_ns(max + 1) == 20 * 1000); // an idle server: sleeps at once
  CHECK(engine::spin_budget_ns(1000000) == 20 * 1000);
  // The average follows the waits with weight 1/4: a few slow answers do
  // not end the spinning, a run of them does.
  uint32_t avg = max / 10;
  avg = engine::wait_avg(avg, uint64_t{2} * max * 1000);
  CHECK(engine::spin_budget_ns(avg) == uint64_t{max} * 1000);
  for (int i = 0; i < 8; ++i)
    avg = engine::wait_avg(avg, uint64_t{4} * max * 1000);
  CHECK(engine::spin_budget_ns(avg) == 20 * 1000);
}

TEST_CASE("spin budget: one stall, however long, does not end the spinning; three in a row do") {
  // Regression: one 10 ms stall among 100 us answers lifted the average
  // over the ceiling, and the next round trips slept and paid a wake-up
  // each (Soft-RoCE 64 B ping-pong: a p999 stall became part of the p99).
  uint32_t max = engine::params().spin_us;
  REQUIRE(max > 40);
  uint32_t avg = max / 10;
  avg = engine::wait_avg(avg, 10'000'000); // 10 ms
  CHECK(engine::spin_budget_ns(avg) == uint64_t{max} * 1000);
  avg = engine::wait_avg(avg, uint64_t{max} * 100); // back to the usual answers
  CHECK(engine::spin_budget_ns(avg) == uint64_t{max} * 1000);
  // An idle connection: long waits in a row end the spinning after three.
  avg = max / 10;
  avg = engine::wait_avg(avg, 5'000'000'000ull);
  avg = engine::wait_avg(avg, 5'000'000'000ull);
  CHECK(engine::spin_budget_ns(avg) == uint64_t{max} * 1000);
  avg = engine::wait_avg(avg, 5'000'000'000ull);
  CHECK(engine::spin_budget_ns(avg) == 20 * 1000);
}

TEST_CASE("channel events: a call left to a spinner that went away is covered by the engine") {
  // The parameter-server scenario's threads all left their channel to each
  // other's spinning; the last spinner went on without arming, and nothing
  // polled the channel until the engine's 100 ms busy tick (fetch p99
  // 69 -> 115 ms once the left calls stopped looking every 10 ms).
  EventLink a, b;
  Channel* ch = client_channel(a, b);
  const uint64_t now = engine::mono_ns();
  take_event_after_spin(a, ch, now); // a spinner just left: the channel stays unarmed
  CHECK_FALSE(ch->armed.load());
  engine::left_enter(ch); // a blocked call leaves the channel to it
  engine::arm_idle_channels();
  CHECK_FALSE(ch->armed.load()); // within kLeftUncoveredNs: still covered
  // The engine looks again within kLeftTickMs, not kBusyUnarmedTickMs.
  CHECK(engine::engine_wait_ms(engine::kBusyUnarmedTickMs) == engine::kLeftTickMs);
  engine::engine_waited();
  CHECK(engine::engine_wait_ms(-1) == engine::kLeftTickMs);
  engine::engine_waited();
  // Nobody spun or sent since: uncovered, although within kIdleRearmNs.
  ch->last_spin_ns.store(now - engine::kLeftUncoveredNs - 1000000);
  static_assert(engine::kLeftUncoveredNs + 1000000 < engine::kIdleRearmNs);
  engine::arm_idle_channels();
  CHECK(ch->armed.load());
  engine::left_leave(ch);
  // Without left sleepers the engine's long waits are its own.
  CHECK(engine::engine_wait_ms(engine::kBusyUnarmedTickMs) == engine::kBusyUnarmedTickMs);
  engine::engine_waited();
  drop(ch);
}

TEST_CASE("channel events: left sleepers set the engine's look; one unarmed later kicks it") {
  EventLink a, b;
  Channel* ch = client_channel(a, b);
  const int saved_cmd = engine::g().cmdfd;
  const int cmd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  engine::g().cmdfd = cmd;
  auto kicked = [&] {
    uint64_t v;
    return read(cmd, &v, sizeof v) == sizeof v;
  };
  const uint64_t now = engine::mono_ns();
  take_event_after_spin(a, ch, now); // spun on lately: left unarmed
  REQUIRE_FALSE(ch->armed.load());
  // An idle connection's call (xpress-bench's control connection beside a
  // ping-pong) adds no look to the busy unarmed channel's tick; an active
  // one asks for one every kLeftTickMs.
  engine::left_enter(ch, true);
  CHECK(engine::engine_wait_ms(engine::kBusyUnarmedTickMs) == engine::kBusyUnarmedTickMs);
  engine::left_enter(ch, false); // waits kIdleLeftTickMs > kLeftTickMs: kicked
  CHECK(kicked());
  engine::engine_waited();
  CHECK(engine::engine_wait_ms(engine::kBusyUnarmedTickMs) == engine::kLeftTickMs);
  engine::engine_waited();
  engine::left_leave(ch, false);
  engine::left_leave(ch, true);
  // The channel armed again, the engine in a long wait: a call left to a
  // spinner then, and the channel unarmed afterwards (an event taken while
  // someone spins), kicks the engine, whose next look is kLeftTickMs.
  ch->last_spin_ns.store(0);
  engine::arm_idle_channels();
  REQUIRE(ch->armed.load());
  CHECK_FALSE(engine::maybe_unarmed());
  CHECK(engine::engine_wait_ms(1000) == 1000);
  engine::left_enter(ch);
  CHECK_FALSE(kicked()); // armed: an event reaches the engine anyway
  take_event_after_spin(a, ch, now);
  CHECK_FALSE(ch->armed.load());
  CHECK(kicked());
  engine::engine_waited();
  CHECK(engine::engine_wait_ms(1000) == engine::kLeftTickMs);
  engine::engine_waited();
  engine::left_leave(ch);
  engine::g().cmdfd = saved_cmd;
  close(cmd);
  drop(ch);
}

TEST_CASE("autocork: the engine posts a record held on a channel nobody sends on any more") {
  EventLink a, b;
  const size_t saved = engine::g().p.autocork_max;
  engine::g().p.autocork_max = 64 * 1024; // opted in (XPRESS_AUTOCORK_KB)
  Channel* ch = client_channel(a, b);
  engine::g().p.autocork_max = saved;
  std::vector<uint8_t> buf(100, 7);
  flow::RecordChannel& rc = ch->mux->channel();
  REQUIRE(rc.send(1, 0, buf.data(), buf.size(), true) == Status::ok);
  REQUIRE(rc.corked());
  const uint64_t posts = a.posts;
  ch->last_write_ns.store(engine::mono_ns()); // its writer is at work
  engine::note_held(ch);
  CHECK(engine::maybe_held());
  // The engine looks every kHeldTickMs while a record may be held.
  CHECK(engine::engine_wait_ms(1000) == engine::kHeldTickMs);
  engine::engine_waited();
  engine::post_idle_held();
  CHECK(rc.corked()); // the writer's next write or its ACK posts it
  CHECK(engine::maybe_held());
  ch->last_write_ns.store(0); // the writer went away (or only retries on EAGAIN)
  engine::post_idle_held();
  CHECK_FALSE(rc.corked());
  CHECK(a.posts == posts + 1);
  CHECK_FALSE(ch->held.load());
  CHECK_FALSE(engine::maybe_held());
  CHECK(engine::engine_wait_ms(1000) == 1000);
  engine::engine_waited();
  drop(ch);
}

TEST_CASE("channel sleep: one sleeper per channel takes its events, the engine none meanwhile") {
  SleepOnChannel on;
  EventLink a, b;
  Channel* ch = client_channel(a, b);
  {
    EngineEpoll engine_ep(ch);
    Source s1, s2, none;
    s1.ch = s2.ch = ch;
    ChannelSleep first, second;
    first.add(&s1);
    first.add(&s2); // the same channel: once
    first.add(&none);
    REQUIRE(first.size() == 1);
    CHECK(first.fd(0) == a.efd);
    CHECK(ch->sleep_refs.load() == 1);

    // Unarmed (a spinner's bet): what arrived raised no event, so begin()
    // polls and the caller looks again.
    ch->armed.store(false);
    CHECK(first.begin());
    CHECK(ch->armed.load());
    // Armed: the sleep takes the channel's events from the engine.
    CHECK_FALSE(first.begin());
    second.add(&s2);
    CHECK_FALSE(second.begin());
    CHECK(second.size() == 0); // another thread sleeps on it already: it passes the news on
    a.event();
    CHECK(engine_ep.woken() == 0);
    first.end(1u);
    CHECK_FALSE(a.ack_event()); // taken
    CHECK(engine_ep.woken() == 0);
    first.clear();
    second.clear();
    CHECK(ch->sleep_refs.load() == 0);
    // An event now reaches the engine again.
    a.event();
    CHECK(engine_ep.woken() == 1);
    CHECK(a.ack_event());

    // Someone spins on the channel: left to that spinner.
    ChannelSleep third;
    third.add(&s1);
    engine::spin_enter(ch);
    CHECK_FALSE(third.begin());
    CHECK(third.size() == 0);
    engine::spin_leave(ch);
  }
  drop(ch);
}

TEST_CASE("channel sleep: a failed channel is not slept on") {
  SleepOnChannel on;
  EventLink a, b;
  Channel* ch = client_channel(a, b);
  Source s;
  s.ch = ch;
  ChannelSleep cs;
  cs.add(&s);
  ch->failed.store(true);
  CHECK_FALSE(cs.begin());
  CHECK(cs.size() == 0);
  CHECK(ch->sleep_refs.load() == 0);
  drop(ch);
}

TEST_CASE("channel sleep: off by default (XPRESS_SLEEP_ON_CHANNEL=0)") {
  EventLink a, b;
  Channel* ch = client_channel(a, b);
  Source s;
  s.ch = ch;
  ChannelSleep cs;
  cs.add(&s);
  CHECK(cs.size() == 0);
  drop(ch);
}

TEST_CASE("spin gate: no more spinners than the limit, descheduled spinners stop") {
  spin_gate::set_limit_for_tests(2);
  const uint64_t t = 1'000'000'000'000ull;
  {
    spin_gate::Ticket a, b, c;
    CHECK(a.acquire(t));
    CHECK(b.acquire(t));
    CHECK_FALSE(c.acquire(t)); // the CPUs are taken: sleep at once
    b.release();
    CHECK(c.acquire(t + 1000));
    // Rounds close together keep spinning; a gap means descheduled.
    CHECK(a.keep(t + 50'000));
    CHECK(a.keep(t + 100'000));
    CHECK_FALSE(a.keep(t + 2'000'000));
    a.release();
    // A ticket whose holder vanished goes stale and is taken over.
    spin_gate::Ticket d, e;
    CHECK(d.acquire(t + 2'000'000));
    CHECK_FALSE(e.acquire(t + 2'000'000)); // c and d hold both
    CHECK(e.acquire(t + 20'000'000));      // both stale now
    // The stale holder learns it lost its ticket at its next beat.
    CHECK_FALSE(c.keep(t + 20'100'000));
  }
  spin_gate::set_limit_for_tests(0);
}

TEST_CASE("wake: notify looks only at the sleepers of its key, however many sleep") {
  // 16 threads, each a sleeper registered under 64 connections (1,024
  // registrations): a change of one connection looks at the registrations
  // that share its key's bucket, not at all of them.
  constexpr int kThreads = 16, kKeys = 64;
  alignas(64) static char keys[kThreads * kKeys * 64];
  std::atomic<int> ready{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> ts;
  int efds[kThreads];
  for (int t = 0; t < kThreads; ++t) {
    efds[t] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    REQUIRE(efds[t] >= 0);
  }
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      bool ok = true;
      for (int k = 0; k < kKeys; ++k)
        ok = ok && wake::add(efds[t], &keys[(t * kKeys + k) * 64]);
      ready.fetch_add(ok ? 1 : 1000);
      while (!done.load())
        std::this_thread::yield();
      wake::remove(efds[t]);
    });
  }
  while (ready.load() < kThreads)
    std::this_thread::yield();
  CHECK(ready.load() == kThreads); // every registration fitted
  const void* one = &keys[(5 * kKeys + 7) * 64];
  uint64_t v0 = wake::visited_for_tests();
  wake::notify_set(one);
  uint64_t visited = wake::visited_for_tests() - v0;
  pollfd p{efds[5], POLLIN, 0};
  CHECK(poll(&p, 1, 0) == 1); // its sleeper was woken
  pollfd q{efds[6], POLLIN, 0};
  CHECK(poll(&q, 1, 0) == 0); // another's was not
  CHECK(visited >= 1);
  CHECK(visited <= 32); // 1,024 before: every registration
  done.store(true);
  for (auto& t : ts)
    t.join();
  for (int t = 0; t < kThreads; ++t)
    close(efds[t]);
}

TEST_CASE("wake: a sleeper's remove leaves another thread's registration of the same eventfd") {
  // Two threads sleeping on one epoll set both register the set's wake
  // eventfd; the first to wake unregisters.  The other still sleeps in the
  // kernel and must still be woken by its members' changes.
  int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  REQUIRE(efd >= 0);
  alignas(64) static char key[64];
  std::atomic<int> step{0};
  std::thread other([&] {
    bool ok = wake::add(efd, key);
    step.store(ok ? 1 : -1);
    while (step.load() != 2)
      std::this_thread::yield();
    wake::remove(efd);
    step.store(3);
  });
  while (step.load() == 0)
    std::this_thread::yield();
  REQUIRE(step.load() == 1);
  REQUIRE(wake::add(efd, key));
  wake::remove(efd); // this thread woke and left
  wake::notify_set(key);
  pollfd p{efd, POLLIN, 0};
  CHECK(poll(&p, 1, 0) == 1); // the other thread's registration wrote it
  step.store(2);
  while (step.load() != 3)
    std::this_thread::yield();
  wake::drain(efd);
  wake::notify_set(key); // both gone now
  CHECK(poll(&p, 1, 0) == 0);
  other.join();
  close(efd);
}
