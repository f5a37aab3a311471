// The ring descriptor of the rdma_cm private data (verbs/wire_ring.h), as a
// hostile peer may write it: a ring larger than this end would use itself
// is refused (the staging mirror mapped and registered for it is as large),
// and so is anything malformed.
#include <doctest/doctest.h>

#include <cstring>

#include "verbs/wire_ring.h"

using namespace xp;
using namespace xp::verbs;

namespace {
WireRing good() {
  WireRing w{};
  w.magic = kWireMagic;
  w.version = kWireVersion;
  w.app_len = 4;
  w.window_log2 = 18;
  w.addr = 0x7f0000001000;
  w.rkey = 0x1234;
  w.size = 512u << 10;
  memcpy(w.app, "abcd", 4);
  return w;
}
Status parse(const WireRing& w, size_t len = sizeof(WireRing)) {
  WireRing out{};
  return parse_wire_ring(&w, len, &out);
}
} // namespace

TEST_CASE("ring descriptor: a peer's ring is capped at the local maximum") {
  WireRing w = good();
  CHECK(parse(w) == Status::ok);
  w.size = static_cast<uint32_t>(sw::kRingMaxBytes);
  CHECK(parse(w) == Status::ok); // the largest XPRESS_RING_KB allows
  w.size = static_cast<uint32_t>(sw::kRingMaxBytes) + 64;
  CHECK(parse(w) == Status::invalid);
  w.size = 1u << 30; // 1 GiB of pinned staging memory, at accept time
  CHECK(parse(w) == Status::invalid);
  w.size = 0xffffffc0u;
  CHECK(parse(w) == Status::invalid);
}

TEST_CASE("ring descriptor: malformed ones are refused, a good one is copied whole") {
  WireRing w = good();
  WireRing out{};
  REQUIRE(parse_wire_ring(&w, sizeof w, &out) == Status::ok);
  CHECK(memcmp(&out, &w, sizeof w) == 0);
  CHECK(parse_wire_ring(nullptr, sizeof w, &out) == Status::invalid);
  CHECK(parse(w, offsetof(WireRing, app) - 1) == Status::invalid); // short
  CHECK(parse(w, offsetof(WireRing, app) + 3) == Status::invalid); // app bytes cut off
  w = good();
  w.magic ^= 1;
  CHECK(parse(w) == Status::invalid);
  w = good();
  w.version = kWireVersion + 1;
  CHECK(parse(w) == Status::invalid);
  w.version = kWireVersionMin - 1;
  CHECK(parse(w) == Status::invalid);
  w.version = kWireVersionMin; // served: its records are not solicited
  CHECK(parse(w) == Status::ok);
  w = good();
  w.size = 4096 - 64;
  CHECK(parse(w) == Status::invalid);
  w.size = 4096 + 32; // not a multiple of 64
  CHECK(parse(w) == Status::invalid);
  w = good();
  w.app_len = kAppPrivateMax + 1;
  CHECK(parse(w) == Status::invalid);
  w = good();
  w.window_log2 = kMaxPeerWindowLog2 + 1;
  CHECK(parse(w) == Status::invalid);
}
