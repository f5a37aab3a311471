// A poll or select call's watch of many user-mode fds (preload/poll_watch.h):
// a change of one of its fds lists that fd alone and wakes the sleeping
// thread once; a change of another connection neither lists nor wakes; a
// look after the wake-up visits only what changed.
#include <doctest/doctest.h>

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <vector>

#include "preload/poll_watch.h"
#include "stream/wake.h"

using xp::SocketRef;
using xp::readiness::PollWatch;

namespace {

class FakeSource final : public xp::stream::ReadySource {
public:
  uint32_t ready_events() const override { return ev; }
  uint32_t ready_gen(uint32_t) const override { return gen; }
  void event(uint32_t now) { // as the stream layer does: wake::notify(conn)
    ev = now;
    ++gen;
    xp::stream::wake::notify(this);
  }
  uint32_t ev = 0;
  uint32_t gen = 0;
};

// How many wake-ups efd holds (consumed).
uint64_t wakes(int efd) {
  uint64_t v = 0;
  return read(efd, &v, sizeof v) == sizeof v ? v : 0;
}

} // namespace

TEST_CASE("poll watch: a 1000-fd poll is woken by its own fds and looks only at what changed") {
  constexpr size_t kFds = 1000;
  // Declared before the watch: a source outlives the entries that watch it.
  std::vector<FakeSource> src(kFds + 1);
  int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  REQUIRE(efd >= 0);
  {
    PollWatch w;
    REQUIRE(w.begin(kFds)); // above kInline: on the heap
    for (size_t i = 0; i < kFds; ++i)
      w.watch(i, SocketRef{}, &src[i]);
    CHECK(src[0].watchers() == 1);
    CHECK(src[kFds].watchers() == 0);
    uint32_t changed[PollWatch::kListed];
    CHECK(w.take(changed, efd) == 0); // armed: asleep on efd
    // Another connection (not polled) changes: no wake-up.
    src[kFds].event(EPOLLIN);
    CHECK(wakes(efd) == 0);
    // One of its own: one wake-up however often it changes, and the look
    // after it visits that fd alone.
    src[617].event(EPOLLIN);
    src[617].event(EPOLLIN);
    src[3].event(EPOLLIN);
    CHECK(wakes(efd) == 1);
    int k = w.take(changed);
    REQUIRE(k == 2);
    CHECK(changed[0] == 617);
    CHECK(changed[1] == 3);
    CHECK(w.take(changed) == 0);
    // Disarmed (awake): changes are listed for the next look, nobody woken.
    src[5].event(EPOLLIN);
    CHECK(wakes(efd) == 0);
    CHECK(w.take(changed, efd) == 1);
    CHECK(changed[0] == 5);
    w.disarm();
    // More changes than the watch lists: look at every fd.
    for (size_t i = 0; i < PollWatch::kListed + 1; ++i)
      src[i].event(EPOLLIN);
    CHECK(wakes(efd) == 0);
    CHECK(w.take(changed) == -1);
    CHECK(w.take(changed) == 0);
    w.end();
    CHECK(src[617].watchers() == 0);
    CHECK_FALSE(w.on());
    // Ended: nothing reaches it.
    src[617].event(EPOLLIN);
    CHECK(w.take(changed, efd) == 0);
  }
  close(efd);
}

TEST_CASE("poll watch: up to kInline fds, and a source watched twice") {
  FakeSource a, b;
  PollWatch w;
  REQUIRE(w.begin(PollWatch::kInline));
  w.watch(0, SocketRef{}, &a);
  w.watch(1, SocketRef{}, &a); // the same socket through two fds (a dup)
  w.watch(2, SocketRef{}, &b);
  w.watch(3, SocketRef{}, nullptr); // back with the kernel: not watched
  CHECK(a.watchers() == 2);
  uint32_t changed[PollWatch::kListed];
  a.event(EPOLLIN);
  REQUIRE(w.take(changed) == 2);
  CHECK(changed[0] + changed[1] == 1);
  w.end();
  CHECK(a.watchers() == 0);
  CHECK(b.watchers() == 0);
}
