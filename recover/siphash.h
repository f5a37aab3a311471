// SipHash-2-4 (Aumasson & Bernstein, "SipHash: a fast short-input PRF",
// 2012), with the 64-bit tag of the paper and the 128-bit tag variant of the
// reference implementation.  Used by the upgrade binding proof
// (docs/protocol.md §2); no allocation, no state between calls.
#pragma once
#include <cstddef>
#include <cstdint>

namespace xp::recover {

constexpr size_t kSipKeyBytes = 16;

// The tag as the reference implementation writes it: the 64-bit word of the
// output, i.e. bytes 0..7 of its little-endian output.
uint64_t siphash24_64(const uint8_t key[kSipKeyBytes], const void* data, size_t len);

// 16 output bytes, in the byte order of the reference implementation.
void siphash24_128(const uint8_t key[kSipKeyBytes], const void* data, size_t len, uint8_t out[16]);

// siphash24_64 over bytes that come in pieces (pieces cut anywhere give
// the tag of their concatenation).
class SipStream {
public:
  void start(const uint8_t key[kSipKeyBytes]);
  void add(const void* data, size_t len);
  uint64_t tag() const; // of the bytes added so far

private:
  uint64_t v_[4] = {0, 0, 0, 0};
  uint64_t tail_ = 0; // the bytes of the word not complete yet
  uint64_t len_ = 0;
};

} // namespace xp::recover
