// Who is woken by a channel's completion events (stream/channel_events.cc):
// a blocked call sleeping on the completion fd itself takes the engine's
// watch off that fd, so one event wakes one thread, and an event it did
// not take still reaches the engine once it leaves.  And a sleeper that
// polls the channel itself does not write its own eventfd.
#include <doctest/doctest.h>

#include <mutex>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "fake_link.h"
#include "stream/engine_internal.h"
#include "stream/wake.h"

using namespace xp;
using namespace xp::stream;

namespace {

// A fake link whose completion channel is an eventfd: "an event" is a
// write to it, ack_event() reads it.
struct EventLink : test::FakeLink {
  int efd = static_cast<int>(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
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

// The engine's epoll set, with the channel's completion fd in it as the
// engine thread registers it (watch_channel).
struct EngineEpoll {
  int saved = engine::g().epfd;
  int ep = epoll_create1(EPOLL_CLOEXEC);
  EngineEpoll(Channel* ch) {
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

void drop(Channel* ch) {
  std::lock_guard<std::mutex> g(engine::g().mu);
  auto& v = engine::g().channels;
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] == ch) v.erase(v.begin() + static_cast<long>(i));
  delete ch->mux;
  delete ch;
}

} // namespace

TEST_CASE("channel events: the engine is not woken for an event a sleeping caller takes") {
  EventLink a, b;
  test::FakeLink::connect(a, b);
  Channel* ch;
  {
    std::lock_guard<std::mutex> g(engine::g().mu);
    ch = engine::make_channel(&a, true);
  }
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

TEST_CASE("wake: a registered sleeper that polls itself does not write its own eventfd") {
  int efd = wake::thread_fd();
  REQUIRE(efd >= 0);
  wake::drain(efd);
  int key = 0;
  REQUIRE(wake::add(efd, &key));
  pollfd p{efd, POLLIN, 0};
  {
    wake::SelfAwake awake;
    wake::notify(&key); // not started: the thread may be someone else's sleeper
    CHECK(poll(&p, 1, 0) == 1);
    wake::drain(efd);
    awake.start();
    wake::notify(&key);
    CHECK(poll(&p, 1, 0) == 0);
  }
  wake::notify(&key); // after the call: written again
  CHECK(poll(&p, 1, 0) == 1);
  wake::remove(efd);
  wake::drain(efd);
}
