// The MOVE record's payload (docs/protocol.md §7 "Moving a stream"): a pure
// parser of peer-controlled bytes (tests/fuzz/fuzz_upgrade.cc).
//   flags (1: bit 0 the sender's direction switched, bit 1 gone) | 7 zero
//   bytes | S of the sender's direction (8 LE; 0 on TCP) | what it received
//   of ours (8 LE)
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace xp::recover {

constexpr size_t kMoveBytes = 24;
constexpr uint8_t kMoveTxSwitched = 1; // the sender's direction had switched
constexpr uint8_t kMoveGone = 2;       // the sender holds no such stream: no reply

struct MoveInfo {
  uint8_t flags = 0;
  uint64_t start = 0;
  uint64_t received = 0;
};

void encode_move(const MoveInfo& m, uint8_t out[kMoveBytes]);
// Exact length, known flags, zero reserved bytes; invalid otherwise.
Status parse_move(const uint8_t* p, size_t len, MoveInfo* out);

} // namespace xp::recover
