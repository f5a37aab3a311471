// Payload patterns; see pattern.h for the layout and why it is cheap for senders.
#include "pattern.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>

namespace xb {

static_assert(std::endian::native == std::endian::little, "patterns assume little-endian words");

namespace {
constexpr uint64_t kBaseSalt = 0x2545F4914F6CDD1Dull;

inline uint64_t base_word(uint64_t w) {
  return mix64(w + kBaseSalt);
}
inline uint8_t base_byte(size_t off) {
  return static_cast<uint8_t>(base_word(off / 8) >> (8 * (off % 8)));
}
inline uint64_t stamp_value(uint64_t key, size_t off) {
  return mix64(key ^ (static_cast<uint64_t>(off) * 0xD6E8FEB86659FD93ull));
}

void put_base(uint8_t* p, size_t off, size_t len) {
  for (size_t i = 0; i < len; ++i)
    p[off + i] = base_byte(off + i);
}

void fill_base(uint8_t* p, size_t n) {
  size_t w = 0;
  for (; (w + 1) * 8 <= n; ++w) {
    uint64_t v = base_word(w);
    std::memcpy(p + 8 * w, &v, 8);
  }
  put_base(p, 8 * w, n - 8 * w);
}

// Stamp offsets of an n-byte message: every kStampStride bytes while a whole stamp fits
// before the tail stamp, then the tail (the last 8 bytes, which catch truncation).
template <typename F> void for_each_stamp(size_t n, F&& f) {
  if (n >= 16) {
    for (size_t o = 0; o + 16 <= n; o += kStampStride)
      f(o);
  }
  if (n >= 8) f(n - 8);
}
} // namespace

void PatternBuffer::reserve(size_t n) {
  if (n <= buf_.size()) return;
  buf_.assign(n, 0);
  fill_base(buf_.data(), n);
  tail_ = SIZE_MAX;
}

uint8_t* PatternBuffer::stamp(size_t n, uint64_t key) {
  reserve(n);
  uint8_t* p = buf_.data();
  // Stamps left by earlier messages of other sizes must not survive where this message has
  // base bytes: the previous tail, and the stride slot that is too close to this end.
  if (tail_ != SIZE_MAX) put_base(p, tail_, 8);
  if (n > 0) {
    size_t last = ((n - 1) / kStampStride) * kStampStride;
    if (last + 16 > n) put_base(p, last, std::min<size_t>(8, buf_.size() - last));
  }
  for_each_stamp(n, [&](size_t o) {
    uint64_t v = stamp_value(key, o);
    std::memcpy(p + o, &v, 8);
  });
  tail_ = n >= 8 ? n - 8 : SIZE_MAX;
  return p;
}

uint64_t corrupt_every() {
  static const uint64_t every = [] {
    const char* e = std::getenv("XB_CORRUPT_EVERY");
    return e ? std::strtoull(e, nullptr, 10) : 0;
  }();
  return every;
}

void fill_message(uint8_t* p, size_t n, uint64_t key) {
  fill_base(p, n);
  for_each_stamp(n, [&](size_t o) {
    uint64_t v = stamp_value(key, o);
    std::memcpy(p + o, &v, 8);
  });
}

bool verify_message(const uint8_t* msg, size_t n, uint64_t key, Verify mode,
                    PatternBuffer* scratch) {
  if (mode == Verify::kNone) return true;
  if (mode == Verify::kFull) return std::memcmp(msg, scratch->stamp(n, key), n) == 0;
  bool ok = true;
  for_each_stamp(n, [&](size_t o) {
    uint64_t v;
    std::memcpy(&v, msg + o, 8);
    ok = ok && v == stamp_value(key, o);
  });
  return ok;
}

} // namespace xb
