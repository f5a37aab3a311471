// Deterministic payload patterns, so every receiver can detect corrupted, stale, shifted or
// truncated data without the sender shipping a checksum.
//
// A message of n bytes under key K is a fixed base pattern (a function of the byte offset
// only) overwritten with 8-byte stamps mix(K, offset) every kStampStride bytes and in the
// last 8 bytes.  Senders keep one buffer with the base pattern and only rewrite the stamps
// per message (n/1024 stores), so producing data costs almost nothing and the sender's CPU
// stays the transport's.  Receivers check the stamps ("sample", as cheap) or every byte
// ("full", a memcmp against a locally built copy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "wire.h"

namespace xb {

constexpr size_t kStampStride = 1024;

inline uint64_t mix64(uint64_t x) { // splitmix64 finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Key of message `seq` on logical stream `stream` (connection, shard, ...) of a run.
inline uint64_t message_key(uint64_t seed, uint64_t stream, uint64_t seq) {
  return mix64(seed ^ mix64(stream * 0x100000001B3ull + seq + 1));
}

// A reusable message buffer holding the base pattern.
class PatternBuffer {
public:
  explicit PatternBuffer(size_t capacity = 0) { reserve(capacity); }
  // Grows to at least n bytes (refilling the base pattern).
  void reserve(size_t n);
  // Turns the first n bytes into message `key` and returns them.
  uint8_t* stamp(size_t n, uint64_t key);
  uint8_t* data() { return buf_.data(); }
  size_t capacity() const { return buf_.size(); }

private:
  std::vector<uint8_t> buf_;
  size_t tail_ = SIZE_MAX; // where the previous message's tail stamp is
};

// Fills p[0..n) with a complete message (base + stamps) in place.
void fill_message(uint8_t* p, size_t n, uint64_t key);

// Self-test hook: with XB_CORRUPT_EVERY=N in the environment, senders flip the last byte
// (part of the tail stamp) of every Nth message, so the self-test can prove the checks
// fire.  The next stamp() of the buffer rewrites that byte.  0 (unset) in normal runs.
uint64_t corrupt_every();
inline void maybe_corrupt(uint8_t* msg, size_t n, uint64_t seq) {
  uint64_t every = corrupt_every();
  if (every && n >= 8 && seq % every == every - 1) msg[n - 1] ^= 0xFF;
}

// Checks a received message.  kFull uses *scratch (grown as needed).
bool verify_message(const uint8_t* msg, size_t n, uint64_t key, Verify mode,
                    PatternBuffer* scratch);

} // namespace xb
