// The ring descriptor each end of an RC link tells the other in the rdma_cm
// private data (request, accept): its receive ring's address, rkey and
// size, and up to kAppPrivateMax bytes of the caller's own.  Peer-controlled
// bytes: parse_wire_ring() is the one place they are checked (a pure
// function, fuzzed by tests/fuzz).  No rdma-core header here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/status.h"
#include "common/switches.h"
#include "verbs/rc_link.h"

namespace xp::verbs {

constexpr uint32_t kWireMagic = 0x4c525058;   // "XPRL"
constexpr uint32_t kRejectMagic = 0x4a525058; // "XPRJ": a reject from xpress, not rdma_cm
constexpr int kRejConsumerDefined = 28;       // IB_CM_REJ_CONSUMER_DEFINED: a program rejected
// 2: bare data records; 3: stream ids never reused (stream/mux.h); 4: each
// end's per-stream receive window (window_log2); 5: every record but credit
// and ack is solicited (docs/protocol.md §4), so a sleeper may arm for those.
// A version-4 peer is served (its channels are armed for every completion).
constexpr uint16_t kWireVersion = 5;
constexpr uint16_t kWireVersionMin = 4;

struct WireRing {
  uint32_t magic;
  uint16_t version;
  uint8_t app_len;
  uint8_t window_log2; // RcLinkParams::stream_window, rounded down to a power of two
  uint64_t addr;
  uint32_t rkey;
  uint32_t size;
  uint8_t app[kAppPrivateMax];
};
static_assert(sizeof(WireRing) <= 56, "must fit rdma_cm's REQ private data");

// The largest per-stream window a peer may announce (2^30: 1 GiB; ours is at
// most XPRESS_STREAM_WINDOW_KB's maximum).  A stream sends at most the
// smaller of the two, so a larger one only wastes nothing but is nonsense.
constexpr uint8_t kMaxPeerWindowLog2 = 30;

// Checks a peer's descriptor of len bytes (the private data as received)
// and copies it to *out.  invalid unless: the magic is ours, the version one
// we speak (kWireVersionMin to kWireVersion);
// the ring is 4 KiB to sw::kRingMaxBytes (the most XPRESS_RING_KB allows
// here: the staging mirror this end maps and registers for it is as large,
// so a peer must not choose it beyond what we would use ourselves) and a
// multiple of 64; app_len fits; the window is sane.  Bytes past len read
// as zero.
inline Status parse_wire_ring(const void* priv, size_t len, WireRing* out) {
  WireRing w{};
  if (priv == nullptr || len < offsetof(WireRing, app)) return Status::invalid;
  memcpy(&w, priv, len < sizeof w ? len : sizeof w);
  if (w.magic != kWireMagic || w.version < kWireVersionMin || w.version > kWireVersion)
    return Status::invalid;
  if (w.size < 4096 || w.size % 64 != 0 || w.size > sw::kRingMaxBytes) return Status::invalid;
  if (w.app_len > kAppPrivateMax || len < offsetof(WireRing, app) + w.app_len)
    return Status::invalid;
  if (w.window_log2 > kMaxPeerWindowLog2) return Status::invalid;
  *out = w;
  return Status::ok;
}

} // namespace xp::verbs
