// The listening socket's table of published connections (stream/listen_share.h,
// docs/protocol.md §1): an open-addressed hash table in MAP_SHARED memory,
// O(1) per connection (issue 28: it was 4096 slots, each publication and
// lookup a scan of them, and every accept walked all connections).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "resume_pair.h"
#include "stream/engine_internal.h"
#include "stream/listen_share.h"

using namespace xp;
using namespace xp::stream;

namespace {

using Key = std::array<uint8_t, recover::kTupleIdBytes>;

Key key_of(uint64_t n) {
  Key k{};
  k[0] = 4;
  memcpy(k.data() + 1, &n, sizeof n);
  return k;
}

// A zero-filled share in MAP_SHARED memory, as engine::on_listen makes.
struct Share {
  ListenShare* s;
  Share() {
    void* m = mmap(nullptr, sizeof(ListenShare), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                   -1, 0);
    REQUIRE(m != MAP_FAILED);
    s = static_cast<ListenShare*>(m);
    share_init(s);
  }
  ~Share() { munmap(s, sizeof(ListenShare)); }
};

// n keys (from *next on) whose probes all start at slot h.
std::vector<Key> same_home(const ListenShare* s, uint32_t h, size_t n, uint64_t* next) {
  std::vector<Key> v;
  while (v.size() < n) {
    Key k = key_of((*next)++);
    if (share_home(s, k.data()) == h) v.push_back(k);
  }
  return v;
}

uint32_t slot_of(const ListenShare* s, const Key& k, int32_t pid) {
  for (uint32_t i = 0; i < ListenShare::kSlots; ++i) {
    const auto& sl = s->slots[i];
    if ((sl.state.load() & 3) == ListenShare::kValid && sl.pid == pid &&
        memcmp(sl.tuple, k.data(), k.size()) == 0)
      return i;
  }
  return ~0u;
}

} // namespace

TEST_CASE("listen share: publish, look up, remove") {
  Share sh;
  const Key a = key_of(1);
  const uint32_t gen = sh.s->slots_gen.load();
  REQUIRE(share_publish(sh.s, a.data(), 100, 5555));
  CHECK(sh.s->slots_gen.load() == gen + 1);
  uint16_t port = 0;
  CHECK(share_find(sh.s, a.data(), 200, &port)); // a sibling's lookup
  CHECK(port == 5555);
  CHECK_FALSE(share_find(sh.s, a.data(), 100, &port)); // our own: not a sibling's
  CHECK_FALSE(share_find(sh.s, key_of(2).data(), 200, &port));
  CHECK_FALSE(share_remove(sh.s, a.data(), 200)); // only its publisher removes it
  CHECK(share_find(sh.s, a.data(), 200, &port));
  CHECK(share_remove(sh.s, a.data(), 100));
  CHECK(sh.s->slots_gen.load() == gen + 2);
  CHECK_FALSE(share_find(sh.s, a.data(), 200, &port));
  CHECK_FALSE(share_remove(sh.s, a.data(), 100));
  // The same connection published by two processes (a parent and the fork
  // child that claims it): each finds the other's.
  REQUIRE(share_publish(sh.s, a.data(), 100, 1));
  REQUIRE(share_publish(sh.s, a.data(), 200, 2));
  CHECK(share_find(sh.s, a.data(), 100, &port));
  CHECK(port == 2);
  CHECK(share_find(sh.s, a.data(), 200, &port));
  CHECK(port == 1);
}

TEST_CASE("listen share: probes go on past removed entries, and publishing reuses them") {
  Share sh;
  uint64_t next = 0;
  const uint32_t h = 77;
  const auto k = same_home(sh.s, h, 4, &next);
  for (int i = 0; i < 3; ++i)
    REQUIRE(share_publish(sh.s, k[i].data(), 100, static_cast<uint16_t>(i)));
  CHECK(slot_of(sh.s, k[0], 100) == h);
  CHECK(slot_of(sh.s, k[1], 100) == h + 1);
  CHECK(slot_of(sh.s, k[2], 100) == h + 2);
  // k[1] removed: k[2], behind it on the same probe, is still found.
  REQUIRE(share_remove(sh.s, k[1].data(), 100));
  CHECK((sh.s->slots[h + 1].state.load() & 3) == ListenShare::kDeleted);
  uint16_t port = 0;
  CHECK(share_find(sh.s, k[2].data(), 200, &port));
  CHECK(port == 2);
  CHECK(share_remove(sh.s, k[2].data(), 100));
  CHECK_FALSE(share_find(sh.s, k[2].data(), 200, &port));
  // A new entry takes the first removed slot of its probe.
  REQUIRE(share_publish(sh.s, k[3].data(), 100, 3));
  CHECK(slot_of(sh.s, k[3], 100) == h + 1);
  CHECK(share_find(sh.s, k[0].data(), 200, &port));
  CHECK(port == 0);
  CHECK(share_find(sh.s, k[3].data(), 200, &port));
  CHECK(port == 3);
}

TEST_CASE("listen share: full where a key's probe goes, publishing fails; room again after a "
          "removal") {
  Share sh;
  uint64_t next = 0;
  const uint32_t h = ListenShare::kSlots - 5; // its probe wraps around the end
  const auto k = same_home(sh.s, h, ListenShare::kWindow + 1, &next);
  for (uint32_t i = 0; i < ListenShare::kWindow; ++i)
    REQUIRE(share_publish(sh.s, k[i].data(), 100, static_cast<uint16_t>(i)));
  CHECK(slot_of(sh.s, k[ListenShare::kWindow - 1], 100) ==
        (h + ListenShare::kWindow - 1) % ListenShare::kSlots);
  const Key& late = k[ListenShare::kWindow];
  CHECK_FALSE(share_publish(sh.s, late.data(), 100, 999));
  CHECK_FALSE(share_find(sh.s, late.data(), 200, nullptr));
  for (uint32_t i = 0; i < ListenShare::kWindow; ++i) {
    uint16_t port = 0;
    REQUIRE(share_find(sh.s, k[i].data(), 200, &port));
    CHECK(port == i);
  }
  REQUIRE(share_remove(sh.s, k[60].data(), 100));
  REQUIRE(share_publish(sh.s, late.data(), 100, 999));
  uint16_t port = 0;
  CHECK(share_find(sh.s, late.data(), 200, &port));
  CHECK(port == 999);
  CHECK(share_find(sh.s, k[ListenShare::kWindow - 1].data(), 200, &port));
}

TEST_CASE("listen share: 10,000 publications, each a few probes") {
  // Was: 4096 slots, the 4097th publication failing silently, and each a
  // scan from the first slot (the nth cost n probes).
  Share sh;
  constexpr uint64_t kN = 10000;
  uint64_t before = share_probes(), most = 0;
  for (uint64_t i = 0; i < kN; ++i) {
    const uint64_t b = share_probes();
    REQUIRE(share_publish(sh.s, key_of(i).data(), 100, 1));
    most = std::max(most, share_probes() - b);
  }
  const uint64_t publish = share_probes() - before;
  MESSAGE("publish: ", publish, " probes for ", kN, ", longest ", most);
  CHECK(publish < 2 * kN);
  CHECK(most <= ListenShare::kWindow);
  before = share_probes();
  for (uint64_t i = 0; i < kN; ++i)
    REQUIRE(share_find(sh.s, key_of(i).data(), 200, nullptr));
  for (uint64_t i = kN; i < 2 * kN; ++i)
    REQUIRE_FALSE(share_find(sh.s, key_of(i).data(), 200, nullptr));
  const uint64_t lookup = share_probes() - before;
  MESSAGE("lookup: ", lookup, " probes for ", 2 * kN);
  CHECK(lookup < 2 * 2 * kN);
  // All removed (10,000 tombstones), then 10,000 others: still a few
  // probes each, and a miss never more than the window.
  before = share_probes();
  for (uint64_t i = 0; i < kN; ++i)
    REQUIRE(share_remove(sh.s, key_of(i).data(), 100));
  for (uint64_t i = kN; i < 2 * kN; ++i)
    REQUIRE(share_publish(sh.s, key_of(i).data(), 100, 2));
  most = 0;
  for (uint64_t i = 0; i < kN; ++i) {
    const uint64_t b = share_probes();
    REQUIRE_FALSE(share_find(sh.s, key_of(i).data(), 200, nullptr));
    most = std::max(most, share_probes() - b);
  }
  const uint64_t churn = share_probes() - before;
  MESSAGE("remove + publish + missing lookups: ", churn, " probes for ", 3 * kN, ", longest miss ",
          most);
  CHECK(churn < 3 * 3 * kN);
  CHECK(most <= ListenShare::kWindow);
}

TEST_CASE("listen share: two processes publish, look up and remove at once in one shared table") {
  Share sh;
  // Both processes' keys land in one small region of the table, so that
  // their probes run into each other's claims.
  constexpr uint64_t kN = 1500;
  std::vector<Key> mine, theirs;
  {
    uint64_t next = 0;
    while (mine.size() < kN || theirs.size() < kN) {
      Key k = key_of(next++);
      if (share_home(sh.s, k.data()) >= 4096) continue;
      (next % 2 ? mine : theirs).push_back(k);
    }
    mine.resize(kN);
    theirs.resize(kN);
  }
  auto* go = static_cast<std::atomic<int>*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  REQUIRE(go != MAP_FAILED);
  // Each publishes its keys (removing every third again at once), then
  // waits until it sees all of the other's that stay.
  auto run = [&](const std::vector<Key>& own, const std::vector<Key>& other, int32_t pid,
                 int32_t other_pid) -> bool {
    go->fetch_add(1);
    while (go->load() < 2) {
    }
    for (uint64_t i = 0; i < kN; ++i) {
      if (!share_publish(sh.s, own[i].data(), pid, static_cast<uint16_t>(pid))) return false;
      if (i % 3 == 0 && !share_remove(sh.s, own[i].data(), pid)) return false;
    }
    for (int round = 0; round < 100000; ++round) {
      uint64_t seen = 0;
      for (uint64_t i = 0; i < kN; ++i) {
        uint16_t port = 0;
        if (i % 3 != 0 && share_find(sh.s, other[i].data(), pid, &port) &&
            port == static_cast<uint16_t>(other_pid))
          ++seen;
      }
      if (seen == kN - (kN + 2) / 3) return true;
      usleep(100);
    }
    return false;
  };
  const int32_t parent = getpid();
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    alarm(20);
    _exit(run(theirs, mine, getpid(), parent) ? 0 : 1);
  }
  const bool ok = run(mine, theirs, parent, child);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(ok);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  // Every key that stays is in the table exactly once, none that was removed.
  std::vector<int> count(2 * kN, 0);
  for (uint32_t s = 0; s < ListenShare::kSlots; ++s) {
    const auto& sl = sh.s->slots[s];
    const uint32_t w = sl.state.load();
    CHECK((w & 3) != ListenShare::kWriting);
    if ((w & 3) != ListenShare::kValid) continue;
    for (uint64_t i = 0; i < kN; ++i) {
      if (memcmp(sl.tuple, mine[i].data(), mine[i].size()) == 0) {
        CHECK(sl.pid == parent);
        ++count[i];
      }
      if (memcmp(sl.tuple, theirs[i].data(), theirs[i].size()) == 0) {
        CHECK(sl.pid == child);
        ++count[kN + i];
      }
    }
  }
  int wrong = 0;
  for (uint64_t i = 0; i < 2 * kN; ++i)
    wrong += count[i] != ((i % kN) % 3 == 0 ? 0 : 1);
  CHECK(wrong == 0);
  munmap(go, 4096);
}

TEST_CASE("engine: each accept publishes its connection, O(1) however many there are") {
  // Was: serve_share, at every accept, walked all the process's
  // connections and published each unpublished one with a scan of 4096
  // slots; past 4096 none could be, so every accept scanned them all again.
  ListenShare* sh = new ListenShare{};
  share_init(sh);
  sh->owner_pid.store(getpid()); // the rendezvous owner: publishing asks no rdma_cm
  constexpr int kN = 10000;
  std::vector<Conn*> cs;
  uint64_t most = 0;
  const uint64_t before = share_probes();
  for (int i = 0; i < kN; ++i) {
    auto p = test::rparams(recover::Role::server, 9);
    p.tuple.client_port = static_cast<uint16_t>(1024 + i % 60000);
    p.tuple.client_addr[3] = static_cast<uint8_t>(i / 60000 + 1);
    Conn* c = new Conn(-1, p);
    c->rv.share = sh;
    std::lock_guard<std::mutex> l(engine::g().mu);
    c->ref();
    engine::g().conns.add(c);
    const uint64_t b = share_probes();
    engine::serve_share(engine::g(), sh, c); // as on_accept
    most = std::max(most, share_probes() - b);
    REQUIRE(c->rv.slot_written);
    cs.push_back(c);
  }
  MESSAGE("accepts: ", share_probes() - before, " probes for ", kN, ", longest ", most);
  CHECK(share_probes() - before < 2 * kN);
  CHECK(most <= ListenShare::kWindow);
  for (Conn* c : cs) {
    uint8_t key[recover::kTupleIdBytes];
    recover::tuple_id(c->tuple, key);
    uint16_t port = 1;
    REQUIRE(share_find(sh, key, getpid() + 1, &port)); // as a sibling sees it
  }
  for (Conn* c : cs) {
    engine::on_close(c); // removes it
    c->unref();
  }
  int valid = 0;
  for (auto& sl : sh->slots)
    valid += (sl.state.load() & 3) == ListenShare::kValid;
  CHECK(valid == 0);
  std::lock_guard<std::mutex> l(engine::g().mu);
  auto& v = engine::g().shares; // serve_share's: no later test looks at it
  v.erase(std::remove(v.begin(), v.end(), sh), v.end());
  delete sh;
}
