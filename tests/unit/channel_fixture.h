// A client channel over a fake link whose completion channel is an eventfd,
// in the engine's table, for tests of completion events
// (test_channel_events.cc, test_solicited.cc).
#pragma once
#include <doctest/doctest.h>

#include <mutex>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "fake_link.h"
#include "stream/engine_internal.h"

namespace xp::test {

// A fake link whose completion channel is an eventfd: "an event" is a
// write to it, ack_event() reads it.
struct EventLink : FakeLink {
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
  int saved = stream::engine::g().epfd;
  int ep = epoll_create1(EPOLL_CLOEXEC);
  EngineEpoll(stream::Channel* ch) {
    stream::engine::g().epfd = ep;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = reinterpret_cast<uintptr_t>(ch);
    REQUIRE(epoll_ctl(ep, EPOLL_CTL_ADD, ch->link->wait_fd(), &ev) == 0);
  }
  ~EngineEpoll() {
    stream::engine::g().epfd = saved;
    close(ep);
  }
  int woken() {
    epoll_event ev;
    return epoll_wait(ep, &ev, 1, 0);
  }
};

// a's client-side channel to b, in the engine's table.
inline stream::Channel* client_channel(EventLink& a, EventLink& b) {
  FakeLink::connect(a, b);
  std::lock_guard<std::mutex> g(stream::engine::g().mu);
  return stream::engine::make_channel(stream::engine::g(), &a, true);
}

inline void drop(stream::Channel* ch) {
  std::lock_guard<std::mutex> g(stream::engine::g().mu);
  stream::engine::g().chans.free_now(ch);
}

} // namespace xp::test
