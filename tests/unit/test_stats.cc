// Statistics: rows, counters and both dump formats; the upgrade decision.
#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "preload/stats.h"
#include "preload/track.h"
#include "stream/upgrade_policy.h"
#include "verbs/device.h"

using namespace xp;

namespace {
std::string dump_to_string(const StatsBlock& b, bool json) {
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  stats::dump(f, b, json);
  fclose(f);
  std::string s(buf, len);
  free(buf);
  return s;
}
} // namespace

TEST_CASE("stats: claim and release connection rows") {
  ConnSlot* a = stats::claim_slot(7);
  ConnSlot* b = stats::claim_slot(8);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a != b);
  CHECK(a->fd == 7);
  stats::release_slot(a);
  stats::release_slot(b);
  CHECK(a->in_use.load() == 0);
}

// A call in flight when its connection's row is released (a thread
// cancelled in a blocking read never counts itself done) leaves the row's
// next connection balanced: no call of its own in flight.
TEST_CASE("stats: a row's next connection starts with no call in flight") {
  ConnSlot* a = stats::claim_slot(9);
  REQUIRE(a);
  SocketRecord r;
  r.slot = a;
  auto call = std::make_unique<track::CallInFlight>(&r);
  CHECK(a->calls_begun.load() == a->calls_done.load() + 1);
  stats::release_slot(a);
  ConnSlot* again = nullptr;
  std::vector<ConnSlot*> others;
  for (uint32_t i = 0; i < sw::kStatsConnSlots && again == nullptr; ++i) {
    ConnSlot* s = stats::claim_slot(10);
    REQUIRE(s);
    if (s == a)
      again = s;
    else
      others.push_back(s);
  }
  REQUIRE(again == a);
  CHECK(a->calls_begun.load() == a->calls_done.load());
  call.reset(); // the old connection's call ends: nothing of the new one
  CHECK(a->calls_begun.load() == a->calls_done.load());
  {
    track::CallInFlight own(&r);
    CHECK(a->calls_begun.load() == a->calls_done.load() + 1);
  }
  CHECK(a->calls_begun.load() == a->calls_done.load());
  stats::release_slot(a);
  for (ConnSlot* s : others)
    stats::release_slot(s);
}

TEST_CASE("stats: rows run out gracefully") {
  std::vector<ConnSlot*> got;
  for (uint32_t i = 0; i < sw::kStatsConnSlots + 5; ++i) {
    ConnSlot* s = stats::claim_slot(static_cast<int>(i));
    if (s) got.push_back(s);
  }
  CHECK(got.size() == sw::kStatsConnSlots);
  CHECK(stats::c().conn_slots_full.load() >= 5);
  for (ConnSlot* s : got)
    stats::release_slot(s);
}

TEST_CASE("stats: text and JSON dumps carry modes, reasons, bytes and open rows") {
  auto b = std::make_unique<StatsBlock>();
  memset(static_cast<void*>(b.get()), 0, sizeof *b);
  b->pid = 99;
  strcpy(b->comm, "prog");
  b->c.connections[static_cast<int>(Mode::tcp)] = 3;
  b->c.connections[static_cast<int>(Mode::rdma)] = 2;
  b->c.fallbacks[static_cast<int>(Reason::no_device)] = 2;
  b->c.fallbacks[static_cast<int>(Reason::rule_denied)] = 1;
  b->c.bytes_tx[static_cast<int>(Mode::rdma)] = 1000;
  ConnSlot& s = b->slots[3];
  s.in_use = 1;
  s.fd = 12;
  s.mode = static_cast<uint8_t>(Mode::tcp);
  s.reason = static_cast<uint8_t>(Reason::no_device);
  s.role = 1;
  s.family = 4;
  uint8_t ip[4] = {10, 77, 0, 2};
  memcpy(s.peer, ip, 4);
  s.peer_port = 5201;
  s.bytes_tx = 77;

  std::string text = dump_to_string(*b, false);
  CHECK(text.find("pid 99 (prog)") != std::string::npos);
  CHECK(text.find("no_device=2") != std::string::npos);
  CHECK(text.find("rule_denied=1") != std::string::npos);
  CHECK(text.find("10.77.0.2:5201") != std::string::npos);
  CHECK(text.find("client") != std::string::npos);

  std::string json = dump_to_string(*b, true);
  CHECK(json.find("\"connections\":{\"rdma\":2,\"tcp\":3}") != std::string::npos);
  CHECK(json.find("\"no_device\":2") != std::string::npos);
  CHECK(json.find("\"rdma\":{\"tx\":1000,\"rx\":0}") != std::string::npos);
  CHECK(json.find("\"peer\":\"10.77.0.2:5201\"") != std::string::npos);
  CHECK(json.find("\"bytes_tx\":77") != std::string::npos);
  CHECK(json.back() == '\n');
}

TEST_CASE("reasons: every reason has a stable, distinct name") {
  for (int i = 0; i < static_cast<int>(Reason::count); ++i)
    for (int j = i + 1; j < static_cast<int>(Reason::count); ++j)
      CHECK(strcmp(reason_name(static_cast<Reason>(i)), reason_name(static_cast<Reason>(j))) != 0);
  CHECK(std::string(reason_name(Reason::peer_not_accelerated)) == "peer_not_accelerated");
}

TEST_CASE("upgrade decision: disabled, then rules, then device") {
  CHECK(stream::upgrade_decision({false, true}) == Reason::disabled);
  CHECK(stream::upgrade_decision({true, false}) == Reason::rule_denied);
  Reason r = stream::upgrade_decision({true, true});
  if (verbs::device_present()) {
    CHECK(r != Reason::no_device);
  } else {
    CHECK(r == Reason::no_device);
  }
}

TEST_CASE("stats: per-connection counts reach the totals while open and after close") {
  stats::Totals before, t;
  stats::totals(stats::block(), &before);
  ConnSlot* s = stats::claim_slot(5);
  REQUIRE(s);
  s->mode = static_cast<uint8_t>(Mode::tcp);
  s->bytes_tx += 100;
  s->msgs_tx += 2;
  s->bytes_rx += 40;
  stats::totals(stats::block(), &t);
  CHECK(t.bytes_tx[0] - before.bytes_tx[0] == 100);
  CHECK(t.msgs_tx[0] - before.msgs_tx[0] == 2);
  CHECK(t.bytes_rx[0] - before.bytes_rx[0] == 40);
  stats::release_slot(s); // folded into the totals, row freed
  stats::totals(stats::block(), &t);
  CHECK(t.bytes_tx[0] - before.bytes_tx[0] == 100);
  CHECK(t.bytes_rx[0] - before.bytes_rx[0] == 40);
  ConnSlot* again = stats::claim_slot(6);
  REQUIRE(again);
  CHECK(again->bytes_tx.load() == 0); // a reused row starts at zero
  stats::release_slot(again);
  CHECK(alignof(ConnSlot) == 64); // rows never share a cache line
}

TEST_CASE("stats: an upgraded connection's bytes before each switch count as tcp before it") {
  stats::Totals before, t;
  stats::totals(stats::block(), &before);
  ConnSlot* s = stats::claim_slot(9);
  REQUIRE(s);
  s->mode = static_cast<uint8_t>(Mode::rdma);
  s->bytes_tx += 1000;
  s->bytes_rx += 50;
  s->tx_switch_at = 300; // its first 300 bytes went on TCP
  s->rx_switch_at = 80;  // more than the application read so far: all 50 on TCP
  stats::totals(stats::block(), &t);
  const int r = static_cast<int>(Mode::rdma), k = static_cast<int>(Mode::tcp);
  CHECK(t.bytes_tx[r] - before.bytes_tx[r] == 700);
  CHECK(t.tx_before_switch - before.tx_before_switch == 300);
  CHECK(t.bytes_rx[r] - before.bytes_rx[r] == 0);
  CHECK(t.rx_before_switch - before.rx_before_switch == 50);
  CHECK(t.bytes_tx[k] == before.bytes_tx[k]); // not a connection on TCP
  stats::release_slot(s);                     // the same split once folded
  stats::totals(stats::block(), &t);
  CHECK(t.bytes_tx[r] - before.bytes_tx[r] == 700);
  CHECK(t.tx_before_switch - before.tx_before_switch == 300);
  CHECK(t.rx_before_switch - before.rx_before_switch == 50);
  ConnSlot* again = stats::claim_slot(10);
  REQUIRE(again);
  CHECK(again->tx_switch_at.load() == 0); // a reused row has not switched
  stats::release_slot(again);

  auto b = std::make_unique<StatsBlock>();
  memset(static_cast<void*>(b.get()), 0, sizeof *b);
  b->c.tx_before_switch = 300;
  b->c.rx_before_switch = 50;
  CHECK(dump_to_string(*b, true).find("\"tcp_before_switch\":{\"tx\":300,\"rx\":50}") !=
        std::string::npos);
  CHECK(dump_to_string(*b, false).find("tcp before the switch 300/50") != std::string::npos);
}

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "preload/lifecycle.h"
#include "preload/track.h"

TEST_CASE("track: sockets opened inside an internal call are not the application's") {
  int fd = socket(AF_INET, SOCK_STREAM, 0); // unit tests are not preloaded: track by hand
  REQUIRE(fd >= 0);
  {
    InternalCall guard;
    track::on_socket(fd, AF_INET, SOCK_STREAM);
  }
  CHECK(!track::lookup(fd));
  track::on_socket(fd, AF_INET, SOCK_STREAM);
  CHECK(track::lookup(fd));
  {
    InternalCall guard; // a stale record for a number reused internally goes
    track::on_socket(fd, AF_INET, SOCK_STREAM);
  }
  CHECK(!track::lookup(fd));
  track::on_close(fd);
  close(fd);
}

TEST_CASE("stats: the registered-memory counters appear in both dumps when given") {
  auto b = std::make_unique<StatsBlock>();
  auto mem = std::make_unique<alloc::MemStats>();
  mem->arena_committed_bytes = 8 << 20;
  mem->arena_dirty_bytes = 4096;
  mem->arena_purged_bytes = 8192;
  mem->cache_hits = 42;
  mem->tx_zero_copy_bytes = 1234;
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  stats::dump(f, *b, false, mem.get());
  stats::dump(f, *b, true, mem.get());
  fclose(f);
  std::string out(buf, len);
  free(buf);
  CHECK(out.find("arena bytes            committed 8388608") != std::string::npos);
  CHECK(out.find("hits 42") != std::string::npos);
  CHECK(out.find("dirty 4096, purged 8192, decommits 0") != std::string::npos);
  CHECK(out.find("\"dirty\":4096,\"purged\":8192,\"decommits\":0") != std::string::npos);
  CHECK(out.find("zero-copy 1234/0") != std::string::npos);
  CHECK(out.find("\"memory\":{\"arena\":{\"committed\":8388608") != std::string::npos);
  CHECK(out.find("\"zero_copy\":{\"tx\":1234") != std::string::npos);
  CHECK(dump_to_string(*b, false).find("arena") == std::string::npos); // not asked for
}

TEST_CASE("stats: the exit hint warns only for an upgrade that failed on a host with a device") {
  auto b = std::make_unique<StatsBlock>();
  auto fall = [&](Reason r, uint64_t n) {
    b->c.fallbacks[static_cast<int>(r)].store(n, std::memory_order_relaxed);
  };
  b->c.connections[static_cast<int>(Mode::tcp)].store(3, std::memory_order_relaxed);
  fall(Reason::peer_not_accelerated, 2);
  fall(Reason::rule_denied, 1);
  // Peers without xpress and the rules' choices are no fault: info only.
  CHECK(!stats::exit_hint_warns(*b, true));
  fall(Reason::handshake_timeout, 1);
  CHECK(stats::exit_hint_warns(*b, true));
  // A plain host (no device found) stays silent.
  CHECK(!stats::exit_hint_warns(*b, false));
  // One connection over RDMA: nothing to hint.
  b->c.connections[static_cast<int>(Mode::rdma)].store(1, std::memory_order_relaxed);
  CHECK(!stats::exit_hint_warns(*b, true));
  b->c.connections[static_cast<int>(Mode::rdma)].store(0, std::memory_order_relaxed);
  fall(Reason::handshake_timeout, 0);
  for (Reason r :
       {Reason::handshake_failed, Reason::resources_exhausted, Reason::rdma_error_fallback}) {
    fall(r, 1);
    CHECK(stats::exit_hint_warns(*b, true));
    fall(r, 0);
  }
  for (Reason r : {Reason::no_device, Reason::disabled, Reason::kernel_tls, Reason::io_uring,
                   Reason::closed_during_upgrade, Reason::too_few_bytes}) {
    fall(r, 1);
    CHECK(!stats::exit_hint_warns(*b, true));
    fall(r, 0);
  }
}
