// The epoll registration logic of the readiness layer (preload/epoll_regs.h)
// with fake readiness sources: level- and edge-triggered reports, one-shot
// disarm and re-arm, the requested mask, maxevents and round robin,
// EPOLLEXCLUSIVE across two sets, the (fd, socket) index, and the filtering
// and merging of the kernel's events.
#include <doctest/doctest.h>

#include <map>
#include <random>
#include <vector>

#include "preload/epoll_regs.h"
#include "stream/wake.h"

using namespace xp;
using namespace xp::epoll;

namespace {

// Declared before the sets (Regs) that watch it: a set unwatches its
// members' sources when it is destroyed, so a source must outlive them.
class FakeSource final : public stream::ReadySource {
public:
  uint32_t ready_events() const override {
    const uint32_t now = ev;
    if (edge_after_level != 0) { // an edge counted right after a look read the level
      auto* self = const_cast<FakeSource*>(this);
      const uint32_t lvl = edge_after_level;
      self->edge_after_level = 0;
      self->event(lvl);
    }
    return now;
  }
  uint32_t ready_gen(uint32_t) const override { return gen; }
  // As Conn's while its receive direction reads TCP: bytes the kernel holds
  // and nobody took get their edge now, once (take_tcp_bytes).
  void catch_up() override {
    if (arrive_in_catch_up) { // the byte lands between a look's level and its catch_up
      arrive_in_catch_up = false;
      arrive(EPOLLIN);
    }
    take();
  }
  // A new readiness event: level `now`, new generation, told to the
  // watchers as the stream layer does (wake::notify(conn)).
  void event(uint32_t now) {
    ev = now;
    ++gen;
    tell_watchers();
  }
  // Bytes in the kernel: readable at once, their edge not counted yet (the
  // engine's relay, relay(), has not run).
  void arrive(uint32_t now) {
    ev = now;
    ++bytes;
  }
  // The engine's relay (engine::tcp_event): takes the bytes nobody took,
  // then wakes everyone (wake::notify() without a key).
  void relay() {
    take();
    stream::wake::notify();
  }
  uint32_t ev = 0;
  uint32_t gen = 0;
  uint64_t bytes = 0, taken = 0;
  bool arrive_in_catch_up = false;
  uint32_t edge_after_level = 0;

private:
  void take() {
    if (bytes <= taken) return;
    taken = bytes;
    ++gen;
  }
};

// Two keys standing for two sockets (their records, in the library).
int sock_a, sock_b, sock_c;

Reg* add(Regs& regs, int fd, const void* key, uint32_t events, uint64_t data,
         stream::ReadySource* src) {
  Reg r;
  r.fd = fd;
  r.key = key;
  Reg* in = regs.insert(r);
  regs.rearm(in, events, data);
  in->shadow = src != nullptr;
  regs.set_src(in, src);
  return in;
}

std::vector<epoll_event> wait(Regs& regs, int room, bool* residual = nullptr) {
  std::vector<epoll_event> out(static_cast<size_t>(room > 0 ? room : 1));
  bool res = false;
  int n = regs.harvest(out.data(), room, &res);
  if (residual) *residual = res;
  out.resize(static_cast<size_t>(n));
  return out;
}

uint32_t events_of(const epoll_event& e) {
  return e.events;
}
uint64_t data_of(const epoll_event& e) {
  return e.data.u64;
}

} // namespace

TEST_CASE("epoll regs: level-triggered reports while ready, within the mask") {
  FakeSource s;
  ClaimTable claims;
  Regs regs(&claims);
  add(regs, 5, &sock_a, EPOLLIN, 11, &s);
  CHECK(wait(regs, 4).empty());
  CHECK_FALSE(regs.reportable());
  s.event(EPOLLIN | EPOLLOUT);
  CHECK(regs.reportable());
  for (int i = 0; i < 3; ++i) { // reported again and again while readable
    bool residual = false;
    auto ev = wait(regs, 4, &residual);
    REQUIRE(ev.size() == 1);
    CHECK(events_of(ev[0]) == EPOLLIN); // EPOLLOUT and EPOLLRDNORM were not asked for
    CHECK(data_of(ev[0]) == 11);
    CHECK(residual); // other waiters may be told too
  }
  s.event(EPOLLOUT);
  CHECK(wait(regs, 4).empty());
  // EPOLLHUP and EPOLLERR come unasked; EPOLLRDNORM comes with EPOLLIN when asked.
  s.event(EPOLLHUP | EPOLLERR | EPOLLIN);
  Reg* r = regs.find(5, &sock_a);
  REQUIRE(r);
  regs.rearm(r, EPOLLRDNORM, 12);
  auto ev = wait(regs, 4);
  REQUIRE(ev.size() == 1);
  CHECK(events_of(ev[0]) == (EPOLLRDNORM | EPOLLHUP | EPOLLERR));
  CHECK(data_of(ev[0]) == 12);
}

TEST_CASE("epoll regs: edge-triggered reports each new event once") {
  FakeSource s;
  ClaimTable claims;
  Regs regs(&claims);
  s.event(EPOLLOUT);
  add(regs, 7, &sock_a, EPOLLIN | EPOLLOUT | EPOLLET, 1, &s);
  auto ev = wait(regs, 4); // ADD: the current level once
  REQUIRE(ev.size() == 1);
  CHECK(events_of(ev[0]) == EPOLLOUT);
  bool residual = true;
  CHECK(wait(regs, 4, &residual).empty()); // no new edge
  CHECK_FALSE(residual);
  s.event(EPOLLIN | EPOLLOUT);
  CHECK(regs.reportable());
  ev = wait(regs, 4);
  REQUIRE(ev.size() == 1);
  CHECK(events_of(ev[0]) == (EPOLLIN | EPOLLOUT));
  CHECK(wait(regs, 4).empty()); // data still there, no new edge
  // An edge whose level matches nothing in the mask is consumed.
  Reg* r = regs.find(7, &sock_a);
  regs.rearm(r, EPOLLIN | EPOLLET, 2);
  s.event(EPOLLOUT);
  CHECK(wait(regs, 4).empty());
  s.ev = EPOLLIN; // level changes without an event: no edge
  CHECK(wait(regs, 4).empty());
  // MOD reports the current level once more
  regs.rearm(r, EPOLLIN | EPOLLET, 3);
  ev = wait(regs, 4);
  REQUIRE(ev.size() == 1);
  CHECK(data_of(ev[0]) == 3);
  CHECK(wait(regs, 4).empty());
}

TEST_CASE("epoll regs: EPOLLONESHOT disarms after a report until re-armed") {
  FakeSource s;
  ClaimTable claims;
  Regs regs(&claims);
  Reg* r = add(regs, 3, &sock_a, EPOLLIN | EPOLLONESHOT, 3, &s);
  CHECK(wait(regs, 1).empty()); // not ready: stays armed
  s.event(EPOLLIN);
  bool residual = true;
  auto ev = wait(regs, 1, &residual);
  REQUIRE(ev.size() == 1);
  CHECK_FALSE(residual); // nobody else may get it
  s.event(EPOLLIN);
  CHECK(wait(regs, 1).empty()); // disarmed despite new data
  CHECK_FALSE(regs.reportable());
  regs.rearm(r, EPOLLIN | EPOLLONESHOT, 4);
  ev = wait(regs, 1);
  REQUIRE(ev.size() == 1);
  CHECK(data_of(ev[0]) == 4);
  CHECK(wait(regs, 1).empty());
}

TEST_CASE("epoll regs: maxevents, round robin and kernel-mode registrations") {
  FakeSource s[5];
  FakeSource x, y;
  ClaimTable claims;
  Regs regs(&claims);
  for (int i = 0; i < 5; ++i) {
    s[i].event(EPOLLOUT);
    add(regs, 10 + i, &s[i], EPOLLOUT, static_cast<uint64_t>(100 + i), &s[i]);
  }
  add(regs, 20, &sock_c, EPOLLOUT, 999, nullptr); // the kernel answers this one
  CHECK(regs.user_count() == 5);
  std::map<uint64_t, int> seen;
  for (int round = 0; round < 5; ++round) {
    bool residual = false;
    auto ev = wait(regs, 2, &residual);
    REQUIRE(ev.size() == 2);
    CHECK(residual);
    for (auto& e : ev)
      ++seen[data_of(e)];
  }
  // Each of the five got its turn twice: none starved behind the first ones.
  REQUIRE(seen.size() == 5);
  for (auto& [data, n] : seen) {
    CHECK(data >= 100);
    CHECK(data <= 104);
    CHECK(n == 2);
  }
  // One that did not fit counts as residual even for one-shot ones.
  Regs one(&claims);
  x.event(EPOLLIN);
  y.event(EPOLLIN);
  add(one, 1, &x, EPOLLIN | EPOLLONESHOT, 1, &x);
  add(one, 2, &y, EPOLLIN | EPOLLONESHOT, 2, &y);
  bool residual = false;
  CHECK(wait(one, 1, &residual).size() == 1);
  CHECK(residual);
  CHECK(wait(one, 1, &residual).size() == 1);
  CHECK_FALSE(residual);
}

TEST_CASE("epoll regs: leaving and entering user mode") {
  FakeSource s, t;
  ClaimTable claims;
  Regs regs(&claims);
  s.event(EPOLLIN);
  Reg* r = add(regs, 4, &sock_a, EPOLLIN | EPOLLET, 1, &s);
  CHECK(wait(regs, 2).size() == 1);
  regs.set_src(r, nullptr);
  CHECK(regs.user_count() == 0);
  CHECK(wait(regs, 2).empty());
  t.ev = EPOLLIN; // a new source: its current level is reported once
  regs.set_src(r, &t);
  CHECK(regs.user_count() == 1);
  CHECK(wait(regs, 2).size() == 1);
  CHECK(wait(regs, 2).empty());
}

// Two epoll sets, each with an exclusive registration of sock_a on one
// source, both past their first look (nothing to report yet).
struct TwoSets {
  FakeSource s;
  ClaimTable claims;
  Regs one{&claims}, two{&claims};
  explicit TwoSets(uint32_t events) {
    add(one, 5, &sock_a, events, 1, &s);
    add(two, 5, &sock_a, events, 2, &s);
    CHECK(wait(one, 1).empty());
    CHECK(wait(two, 1).empty());
  }
};
struct ExclIn : TwoSets {
  ExclIn() : TwoSets(EPOLLIN | EPOLLEXCLUSIVE) {}
};
struct ExclInEt : TwoSets {
  ExclInEt() : TwoSets(EPOLLIN | EPOLLET | EPOLLEXCLUSIVE) {}
};
struct ExclOut : TwoSets {
  ExclOut() : TwoSets(EPOLLOUT | EPOLLEXCLUSIVE) {}
};

TEST_CASE_FIXTURE(ExclIn, "epoll regs: EPOLLEXCLUSIVE gives each event to one set") {
  s.event(EPOLLIN);
  CHECK(one.reportable());
  CHECK(two.reportable());
  CHECK(wait(two, 1).size() == 1); // the first to look wins
  CHECK_FALSE(one.reportable());
  CHECK(wait(one, 1).empty());
  CHECK(wait(two, 1).size() == 1); // level-triggered in the winning set
  s.event(EPOLLIN);
  CHECK(wait(one, 1).size() == 1); // the next event: the other set may win
  CHECK(wait(two, 1).empty());
  claims.forget(&sock_a);
  CHECK(claims.claimable(&sock_a, s.gen));
}

TEST_CASE_FIXTURE(ExclIn,
                  "epoll regs: EPOLLEXCLUSIVE: bytes readable before the relay go to one set") {
  // Both sets own the generation of their first look; a byte is readable
  // in the kernel before the engine's relay counts its edge, and a wake-up
  // without a key has both look.
  s.arrive(EPOLLIN);
  stream::wake::notify();
  CHECK(one.reportable()); // a peek claims nothing
  CHECK(wait(one, 1).size() == 1);
  CHECK_FALSE(two.reportable());
  CHECK(wait(two, 1).empty());
  s.relay(); // finds the byte taken: no second edge
  CHECK(wait(two, 1).empty());
  CHECK(wait(one, 1).size() == 1); // level-triggered in the winning set
  // The next byte: a new edge, which the other set may win.
  s.arrive(EPOLLIN);
  s.relay();
  CHECK(wait(two, 1).size() == 1);
  CHECK(wait(one, 1).empty());
  CHECK(wait(two, 1).size() == 1);
}

TEST_CASE_FIXTURE(
    ExclIn, "epoll regs: EPOLLEXCLUSIVE: a byte after a look's level is reported by its claimer") {
  s.arrive_in_catch_up = true;
  stream::wake::notify();
  // The level was read before the byte; its catch_up counted the byte's
  // edge, so the look reads the level again and the claimer reports it.
  CHECK(wait(one, 1).size() == 1);
  CHECK(wait(two, 1).empty()); // claimed by one
  s.relay();                   // nothing new, but everyone looks again
  CHECK(wait(two, 1).empty());
  CHECK(wait(one, 1).size() == 1); // level-triggered: still reported by the claimer
}

TEST_CASE_FIXTURE(ExclInEt,
                  "epoll regs: EPOLLET|EPOLLEXCLUSIVE: a byte after a look's level is not lost") {
  // The look that claims the byte's generation has read the level before
  // it: it must report the byte (or leave the generation to a later look),
  // not take the generation with nothing reported.
  s.arrive_in_catch_up = true;
  stream::wake::notify();
  size_t told = wait(one, 1).size();
  told += wait(two, 1).size();
  s.relay(); // nothing new, but everyone looks again
  told += wait(one, 1).size();
  told += wait(two, 1).size();
  CHECK(told == 1);
}

TEST_CASE("epoll regs: EPOLLEXCLUSIVE: an edge between a look's level and its generation") {
  // The engine's relay, room to write, a hang-up: an edge counted while a
  // look is between the level and the generation it claims is reported,
  // edge-triggered or not, writer or reader.
  for (uint32_t want : {EPOLLIN, EPOLLOUT}) {
    for (uint32_t et : {0u, static_cast<uint32_t>(EPOLLET)}) {
      CAPTURE(want);
      CAPTURE(et);
      FakeSource s;
      ClaimTable claims;
      Regs one(&claims), two(&claims);
      add(one, 5, &sock_a, want | et | EPOLLEXCLUSIVE, 1, &s);
      add(two, 5, &sock_a, want | et | EPOLLEXCLUSIVE, 2, &s);
      CHECK(wait(one, 1).empty());
      CHECK(wait(two, 1).empty());
      s.edge_after_level = want;
      stream::wake::notify();
      size_t told = wait(one, 1).size();
      told += wait(two, 1).size();
      if (et) {
        told += wait(one, 1).size();
        told += wait(two, 1).size();
        CHECK(told == 1);
      } else {
        CHECK(told >= 1);
      }
    }
  }
}

TEST_CASE_FIXTURE(ExclOut, "epoll regs: EPOLLEXCLUSIVE owners keep what catch_up does not count") {
  // Room to write appears without an edge (as note_ready when its last look
  // held EPOLLOUT already): a set that owns the generation of an empty
  // look still reports it (no lost wake-up), and reports while it lasts.
  s.ev = EPOLLOUT;
  stream::wake::notify();
  auto ev = wait(one, 1);
  REQUIRE(ev.size() == 1);
  CHECK(events_of(ev[0]) == EPOLLOUT);
  CHECK(wait(one, 1).size() == 1); // not drained: reported again
  // A real edge still reaches someone: the first set to look.
  s.event(EPOLLOUT);
  CHECK(wait(two, 1).size() == 1);
  CHECK(wait(one, 1).empty());
  CHECK(wait(two, 1).size() == 1);
  // Level-triggered without EPOLLEXCLUSIVE: catch_up is not asked, and
  // every set reports.
  FakeSource t;
  Regs three(&claims), four(&claims);
  add(three, 6, &sock_b, EPOLLIN, 3, &t);
  add(four, 6, &sock_b, EPOLLIN, 4, &t);
  t.arrive(EPOLLIN);
  stream::wake::notify();
  CHECK(wait(three, 1).size() == 1);
  CHECK(wait(four, 1).size() == 1);
  CHECK(t.gen == 0);
}

TEST_CASE("epoll regs: the (fd, socket) index survives inserts and erases") {
  ClaimTable claims;
  Regs regs(&claims);
  std::mt19937 rng(7);
  std::map<std::pair<int, int>, uint64_t> model; // (fd, key index) -> data
  int keys[8];
  for (int step = 0; step < 20000; ++step) {
    int fd = static_cast<int>(rng() % 300);
    int k = static_cast<int>(rng() % 8);
    Reg* r = regs.find(fd, &keys[k]);
    auto it = model.find({fd, k});
    REQUIRE((r != nullptr) == (it != model.end()));
    if (r) {
      CHECK(r->data == it->second);
      if (rng() % 2) {
        regs.erase(r);
        model.erase(it);
      }
    } else {
      uint64_t data = rng();
      add(regs, fd, &keys[k], EPOLLIN, data, nullptr);
      model[{fd, k}] = data;
    }
    REQUIRE(regs.size() == model.size());
  }
  for (auto& [key, data] : model) {
    Reg* r = regs.find(key.first, &keys[key.second]);
    REQUIRE(r);
    CHECK(r->data == data);
  }
  // The same number with another socket is another registration (the
  // kernel keys by fd and open file).
  Regs two(&claims);
  add(two, 9, &sock_a, EPOLLIN, 1, nullptr);
  add(two, 9, &sock_b, EPOLLIN, 2, nullptr);
  CHECK(two.find(9, &sock_a)->data == 1);
  CHECK(two.find(9, &sock_b)->data == 2);
  two.erase(two.find(9, &sock_a));
  CHECK(two.find(9, &sock_a) == nullptr);
  CHECK(two.find(9, &sock_b)->data == 2);
}

TEST_CASE("epoll regs: xpress's own kernel entries are dropped, same data is merged") {
  epoll_event ev[5];
  ev[0].events = EPOLLIN;
  ev[0].data.u64 = 1;
  ev[1].events = EPOLLIN;
  ev[1].data.u64 = kWakeData;
  ev[2].events = EPOLLHUP;
  ev[2].data.u64 = kShadowData;
  ev[3].events = EPOLLOUT;
  ev[3].data.u64 = 3;
  bool saw = false;
  int n = drop_reserved(ev, 4, &saw);
  CHECK(saw);
  REQUIRE(n == 2);
  CHECK(data_of(ev[0]) == 1);
  CHECK(data_of(ev[1]) == 3);
  saw = false;
  CHECK(drop_reserved(ev, 2, &saw) == 2);
  CHECK_FALSE(saw);

  // user events [0, 2), kernel events [2, 5)
  epoll_event m[5];
  m[0].events = EPOLLIN;
  m[0].data.u64 = 10;
  m[1].events = EPOLLIN;
  m[1].data.u64 = 20;
  m[2].events = EPOLLOUT;
  m[2].data.u64 = 20;
  m[3].events = EPOLLOUT;
  m[3].data.u64 = 30;
  m[4].events = EPOLLRDHUP;
  m[4].data.u64 = 10;
  n = fold_same_data(m, 2, 3);
  REQUIRE(n == 3);
  CHECK(events_of(m[0]) == (EPOLLIN | EPOLLRDHUP));
  CHECK(events_of(m[1]) == (EPOLLIN | EPOLLOUT));
  CHECK(data_of(m[2]) == 30);
}

namespace {
struct WakeCount {
  int wakes = 0;
  bool sleepers = true;
  static bool wake(void* ctx) {
    auto* w = static_cast<WakeCount*>(ctx);
    if (!w->sleepers) return false;
    ++w->wakes;
    return true;
  }
};
} // namespace

TEST_CASE("epoll regs: a wait looks at what changed, not at every member") {
  constexpr int kMembers = 1000;
  std::vector<FakeSource> src(kMembers);
  ClaimTable claims;
  Regs regs(&claims);
  WakeCount wc;
  regs.set_waker(WakeCount::wake, &wc);
  std::vector<int> keys(kMembers);
  for (int i = 0; i < kMembers; ++i)
    add(regs, 100 + i, &keys[static_cast<size_t>(i)], EPOLLIN, static_cast<uint64_t>(i),
        &src[static_cast<size_t>(i)]);
  CHECK(wait(regs, 16).empty()); // ADD looks at each once
  CHECK(regs.ready_len() == 0);
  CHECK(wc.wakes == 0); // ADD and MOD wake through the kernel (raise_level), not the waker
  src[617].event(EPOLLIN);
  CHECK(wc.wakes == 1); // the set's sleepers, once
  CHECK(regs.ready_len() == 1);
  uint64_t before = regs.visits();
  auto ev = wait(regs, 16);
  REQUIRE(ev.size() == 1);
  CHECK(data_of(ev[0]) == 617);
  CHECK(regs.visits() - before <= 2);
  // Level-triggered: stays listed while ready; leaves once consumed.
  src[617].ev = 0;
  before = regs.visits();
  CHECK(wait(regs, 16).empty());
  CHECK(regs.visits() - before <= 2);
  CHECK(regs.ready_len() == 0);
  // Erased members leave the source's list and the ready list.
  src[5].event(EPOLLIN);
  CHECK(regs.ready_len() == 1);
  regs.erase(regs.find(105, &keys[5]));
  CHECK(regs.ready_len() == 0);
  CHECK(src[5].watchers() == 0);
  CHECK(src[6].watchers() == 1);
  regs.clear();
  CHECK(src[6].watchers() == 0);
}

TEST_CASE("epoll regs: EPOLLEXCLUSIVE wakes one set's sleepers, queues on all") {
  FakeSource s;
  FakeSource t;
  ClaimTable claims;
  Regs one(&claims), two(&claims);
  WakeCount w1, w2;
  one.set_waker(WakeCount::wake, &w1);
  two.set_waker(WakeCount::wake, &w2);
  add(one, 5, &sock_a, EPOLLIN | EPOLLEXCLUSIVE, 1, &s);
  add(two, 5, &sock_a, EPOLLIN | EPOLLEXCLUSIVE, 2, &s);
  CHECK(wait(one, 1).empty());
  CHECK(wait(two, 1).empty());
  s.event(EPOLLIN);
  CHECK(w1.wakes + w2.wakes == 1);
  CHECK(one.ready_len() == 1);
  CHECK(two.ready_len() == 1);
  // A set nobody sleeps on is passed over for one with sleepers.
  w1.sleepers = false;
  s.event(EPOLLIN);
  CHECK(w2.wakes == (w1.wakes == 1 ? 1 : 2));
  // Not exclusive: every watching set is woken.
  Regs three(&claims);
  WakeCount w3;
  three.set_waker(WakeCount::wake, &w3);
  add(one, 6, &sock_b, EPOLLIN, 1, &t);
  add(three, 6, &sock_b, EPOLLIN, 3, &t);
  int before = w3.wakes;
  t.event(EPOLLIN);
  CHECK(w3.wakes == before + 1);
}

TEST_CASE("epoll regs: a change announced without a source relists every member") {
  FakeSource s, t;
  ClaimTable claims;
  Regs regs(&claims);
  add(regs, 5, &sock_a, EPOLLIN, 1, &s);
  add(regs, 6, &sock_b, EPOLLIN, 2, &t);
  CHECK(wait(regs, 4).empty());
  t.ev = EPOLLIN; // changed, nobody told its watchers
  CHECK(wait(regs, 4).empty());
  stream::wake::notify(); // a change of any connection (a mode change, a failure)
  auto ev = wait(regs, 4);
  REQUIRE(ev.size() == 1);
  CHECK(data_of(ev[0]) == 2);
}

TEST_CASE("epoll regs: EPOLLEXCLUSIVE: a keyed wake-up of the other set during a look") {
  // Level-triggered.  The edge's keyed wake-up (wake::notify(conn)) wakes
  // only the first exclusive set with sleepers, here two; one, which was
  // looking, claims the edge's generation.  Then one must report, or be
  // woken again: otherwise both sleep with the byte unread.
  FakeSource s;
  ClaimTable claims;
  Regs one(&claims), two(&claims);
  WakeCount w1, w2;
  one.set_waker(WakeCount::wake, &w1);
  two.set_waker(WakeCount::wake, &w2);
  add(two, 5, &sock_a, EPOLLIN | EPOLLEXCLUSIVE, 2, &s); // first in the source's list
  add(one, 5, &sock_a, EPOLLIN | EPOLLEXCLUSIVE, 1, &s);
  CHECK(wait(one, 1).empty());
  CHECK(wait(two, 1).empty());
  w1.sleepers = false; // one's thread is looking (woken by another member)
  s.edge_after_level = EPOLLIN;
  stream::wake::notify();
  const size_t by_one = wait(one, 1).size();
  CHECK(w2.wakes == 1); // the edge woke two
  const size_t by_two = wait(two, 1).size();
  w1.sleepers = true; // one sleeps
  CHECK(by_one + by_two + static_cast<size_t>(w1.wakes) >= 1);
  CHECK(by_one + by_two == 1);
}
