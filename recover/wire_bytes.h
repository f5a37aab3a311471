// Little-endian fields and tag checks of the wire formats (recover/*_wire.cc).
#pragma once
#include <cstddef>
#include <cstdint>

namespace xp::recover {

inline void put_le(uint8_t* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i)
    p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint64_t get_le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}

// Constant time: a tag is a secret until it verified.
inline bool same_bytes(const uint8_t* a, const uint8_t* b, size_t n) {
  uint8_t d = 0;
  for (size_t i = 0; i < n; ++i)
    d |= static_cast<uint8_t>(a[i] ^ b[i]);
  return d == 0;
}

} // namespace xp::recover
