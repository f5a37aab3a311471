// Little-endian fields of the wire formats (recover/*_wire.cc).
#pragma once
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

} // namespace xp::recover
