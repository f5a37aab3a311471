// The negative cache's decisions for servers without xpress
// (stream/negative_cache.h), driven as stream/engine_rendezvous.cc drives
// them: the clock is a number here.
#include <doctest/doctest.h>

#include "stream/negative_cache.h"

using namespace xp::stream;

namespace {

const uint8_t kAddr4[4] = {10, 77, 0, 2};
const xp::recover::IpAddr kAddr = xp::recover::ipv4_addr(kAddr4);
constexpr uint16_t kPort = 8080;
constexpr uint64_t kKeep = 10000;

// One connection's upgrade against a server where nobody ever listens, as
// the engine runs it: cached -> no attempt; held -> attempt at the hold's
// time, which counts as the retry; a first refusal retries once after
// kNoListenerRetryMs if the connection still lives.  Returns the attempts.
struct Client {
  NegativeCache& nc;
  int attempts = 0;
  int answered_by_cache = 0;

  void connection(uint64_t start, uint64_t closes) {
    uint64_t now = start;
    if (nc.cached(kAddr, kPort, now)) {
      ++answered_by_cache;
      return;
    }
    bool retry_counts = false;
    if (uint64_t at = nc.hold_until(kAddr, kPort, now, kKeep)) {
      if (at >= closes) return; // closed while it waited: asked nobody
      now = at;
      retry_counts = true;
      if (nc.cached(kAddr, kPort, now)) {
        ++answered_by_cache;
        return;
      }
    }
    ++attempts; // refused: nobody listens
    if (retry_counts || nc.refused(kAddr, kPort, now, kKeep)) {
      nc.remember(kAddr, kPort, now, kKeep);
      return;
    }
    now += kNoListenerRetryMs;
    if (now >= closes) return; // a short connection does not live to retry
    ++attempts;
    nc.remember(kAddr, kPort, now, kKeep);
  }
};

} // namespace

TEST_CASE(
    "negative cache: short sequential connections ask rdma_cm twice, then the cache answers") {
  // Five fetches of 10 ms each, 2 ms apart (curl against a static busybox
  // httpd in the VM): each closes before its own retry's time.
  for (uint64_t life : {10, 20, 30, 49}) {
    NegativeCache nc;
    Client cl{nc};
    uint64_t t = 1000;
    for (int i = 0; i < 5; ++i) {
      cl.connection(t, t + life);
      t += life + 2;
    }
    // Those that close while held ask nobody (closed_during_upgrade).
    CAPTURE(life);
    CHECK(cl.attempts >= 1);
    CHECK(cl.attempts <= 2);
    if (life >= 20) CHECK(cl.answered_by_cache >= 2);
  }
}

TEST_CASE("negative cache: a connection that lives retries itself; the next one is answered") {
  NegativeCache nc;
  Client cl{nc};
  cl.connection(1000, 5000);
  CHECK(cl.attempts == 2);
  cl.connection(1100, 5000);
  CHECK(cl.attempts == 2);
  CHECK(cl.answered_by_cache == 1);
}

TEST_CASE("negative cache: hold only within the retry's time, and never once somebody listened") {
  NegativeCache nc;
  CHECK(nc.hold_until(kAddr, kPort, 1000, kKeep) == 0);
  CHECK_FALSE(nc.refused(kAddr, kPort, 1000, kKeep)); // first refusal
  CHECK(nc.hold_until(kAddr, kPort, 1010, kKeep) == 1000 + kNoListenerRetryMs + kHoldSlackMs);
  CHECK(nc.hold_until(kAddr, kPort, 1000 + kNoListenerRetryMs, kKeep) == 0);
  const uint8_t other4[4] = {10, 77, 0, 3};
  const auto other = xp::recover::ipv4_addr(other4);
  CHECK(nc.hold_until(other, kPort, 1010, kKeep) == 0);
  CHECK(nc.hold_until(kAddr, kPort + 1, 1010, kKeep) == 0);
  // The server opened its port in the meantime: an attempt got through.
  nc.forget_refused(kAddr, kPort);
  CHECK(nc.hold_until(kAddr, kPort, 1010, kKeep) == 0);
  CHECK_FALSE(nc.cached(kAddr, kPort, 1010));
}

TEST_CASE("negative cache: a second first refusal is conclusive only after the retry's time") {
  NegativeCache nc;
  CHECK_FALSE(nc.refused(kAddr, kPort, 1000, kKeep));
  CHECK_FALSE(nc.refused(kAddr, kPort, 1000 + kNoListenerRetryMs - 1, kKeep));
  CHECK(nc.refused(kAddr, kPort, 1000 + kNoListenerRetryMs, kKeep));
  // Too old to count: starts over.
  CHECK_FALSE(nc.refused(kAddr, kPort, 1000 + kKeep + 1, kKeep));
  nc.remember(kAddr, kPort, 2000, kKeep);
  CHECK(nc.cached(kAddr, kPort, 2000 + kKeep - 1));
  CHECK_FALSE(nc.cached(kAddr, kPort, 2000 + kKeep));
}

TEST_CASE("negative cache: off (XPRESS_NEGATIVE_CACHE_MS=0) holds nothing and learns nothing") {
  NegativeCache nc;
  CHECK_FALSE(nc.refused(kAddr, kPort, 1000, 0));
  CHECK_FALSE(nc.refused(kAddr, kPort, 2000, 0));
  CHECK(nc.hold_until(kAddr, kPort, 1010, 0) == 0);
}

TEST_CASE("negative cache: bounded; expired entries go first") {
  NegativeCache nc(8);
  uint8_t a[4] = {10, 0, 0, 0};
  for (uint8_t i = 0; i < 8; ++i) {
    a[3] = i;
    nc.remember(xp::recover::ipv4_addr(a), kPort, 1000, 100); // expire at 1100
  }
  a[3] = 100;
  nc.remember(xp::recover::ipv4_addr(a), kPort, 5000, kKeep);
  CHECK(nc.size() == 1);
  for (uint8_t i = 0; i < 20; ++i) {
    a[3] = i;
    nc.remember(xp::recover::ipv4_addr(a), kPort, 6000, kKeep);
  }
  CHECK(nc.size() <= 8);
  a[3] = 19;
  CHECK(nc.cached(xp::recover::ipv4_addr(a), kPort, 6001));
}
