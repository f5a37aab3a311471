// Compile-time switches and fixed limits, in one place (eRPC's config.h idea).
#pragma once
#include <cstddef>
#include <cstdint>

namespace xp::sw {

// Highest fd number the fd table can describe (three-level radix, lazily
// allocated: memory follows the fds in use, never RLIMIT_NOFILE).
constexpr uint32_t kFdBits = 31;
constexpr uint32_t kFdLeafBits = 10; // 1024 entries (8 KiB) per leaf page
constexpr uint32_t kFdMidBits = 10;  // 1024 leaf pointers per middle page
constexpr uint32_t kFdTopBits = kFdBits - kFdLeafBits - kFdMidBits;

// Socket records live in chunks that are never unmapped (type-stable memory),
// so a lock-free reader may touch a record that a racing close() recycled.
constexpr uint32_t kSocketChunkRecords = 1024;
constexpr uint32_t kSocketMaxChunks = 4096;

// Per-connection slots published in the live statistics file.
constexpr uint32_t kStatsConnSlots = 1024;

// Maximum log line (stack buffer; logging never allocates).
constexpr size_t kLogLineMax = 1024;

// Rules: fixed upper bound so parsing never allocates without limit.
constexpr size_t kMaxRules = 64;

// exit/_exit with connections on RDMA: how long the process may wait for its
// channels to send their last records (stream/exit.cc).  Normally well under
// a millisecond; the bound is for a peer that stopped taking records.
constexpr uint32_t kExitLingerMs = 1000;

// Receive work requests an RC link posts beyond one per 64-byte slot of its
// ring (the most records the peer's credit lets it have there).  The record
// channel may owe that many back to the receive queue: it gives them back
// in one batch, or at the next poll that finds nothing (a waiting thread),
// instead of one provider call per record on the way from a completion to
// the caller (a provider call costs as much as the rest of a small
// record's receive path).
constexpr uint32_t kRecvSpare = 32;

// Each channel's receive ring (XPRESS_RING_KB's range).  The maximum also
// bounds the ring a peer may announce (verbs/wire_ring.h): this end maps and
// registers a staging mirror of the peer's ring, pinned memory the peer
// must not choose beyond what we would use ourselves.
constexpr size_t kRingMinBytes = 64u << 10;
constexpr size_t kRingMaxBytes = 1024u << 10;

} // namespace xp::sw
