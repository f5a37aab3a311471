// Sleepers in poll/select/epoll_wait that wait on their connections'
// channels themselves (stream/channel_sleep.h), and who may spin
// (stream/spin_gate.h).
#include <doctest/doctest.h>

#include <mutex>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "fake_link.h"
#include "stream/channel_sleep.h"
#include "stream/engine_internal.h"
#include "stream/spin_gate.h"

using namespace xp;
using namespace xp::stream;

namespace {

struct EventLink : test::FakeLink {
  int efd = static_cast<int>(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  bool armed_ = false;
  EventLink() : FakeLink(64 * 1024, 1024) {}
  ~EventLink() override { close(efd); }
  int wait_fd() const override { return efd; }
  bool ack_event() override {
    uint64_t v;
    return read(efd, &v, sizeof v) == sizeof v;
  }
  void event() {
    uint64_t one = 1;
    REQUIRE(write(efd, &one, sizeof one) == sizeof one);
  }
};

struct Source final : ReadySource {
  Channel* ch = nullptr;
  uint32_t ready_events() const override { return 0; }
  uint32_t ready_gen(uint32_t) const override { return 0; }
  Channel* sleep_channel() const override { return ch; }
};

struct EngineEpoll {
  int saved = engine::g().epfd;
  int ep = epoll_create1(EPOLL_CLOEXEC);
  explicit EngineEpoll(Channel* ch) {
    engine::g().epfd = ep;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = reinterpret_cast<uintptr_t>(ch);
    REQUIRE(epoll_ctl(ep, EPOLL_CTL_ADD, ch->link->wait_fd(), &ev) == 0);
  }
  ~EngineEpoll() {
    engine::g().epfd = saved;
    close(ep);
  }
  int woken() {
    epoll_event ev;
    return epoll_wait(ep, &ev, 1, 0);
  }
};

Channel* client_channel(EventLink& a, EventLink& b) {
  test::FakeLink::connect(a, b);
  std::lock_guard<std::mutex> g(engine::g().mu);
  return engine::make_channel(&a, true);
}

// XPRESS_SLEEP_ON_CHANNEL=1 while it lives.
struct SleepOnChannel {
  bool saved = engine::g().p.sleep_on_channel;
  SleepOnChannel() { engine::g().p.sleep_on_channel = true; }
  ~SleepOnChannel() { engine::g().p.sleep_on_channel = saved; }
};

void drop(Channel* ch) {
  std::lock_guard<std::mutex> g(engine::g().mu);
  auto& v = engine::g().channels;
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] == ch) v.erase(v.begin() + static_cast<long>(i));
  delete ch->mux;
  delete ch;
}

} // namespace

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
