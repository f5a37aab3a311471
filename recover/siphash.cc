// Written from the SipHash paper (§2: initialization, compression with
// c = 2 SipRounds per 8-byte word, the final word carrying len mod 256 in
// its top byte, finalization with d = 4 SipRounds); the 128-bit variant
// differs only in the constants 0xee (v1 at init, v2 at finalization) and a
// second output word after v1 ^= 0xdd.
#include "recover/siphash.h"

namespace xp::recover {
namespace {

inline uint64_t rotl(uint64_t x, int b) {
  return (x << b) | (x >> (64 - b));
}

inline uint64_t load_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}

inline void store_le64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    p[i] = static_cast<uint8_t>(v >> (8 * i));
}

struct Sip {
  uint64_t v0, v1, v2, v3;

  void round() {
    v0 += v1;
    v1 = rotl(v1, 13);
    v1 ^= v0;
    v0 = rotl(v0, 32);
    v2 += v3;
    v3 = rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = rotl(v1, 17);
    v1 ^= v2;
    v2 = rotl(v2, 32);
  }
  void compress(uint64_t m) {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
  uint64_t finish_word() {
    for (int i = 0; i < 4; ++i)
      round();
    return v0 ^ v1 ^ v2 ^ v3;
  }
};

Sip init(const uint8_t* key, bool wide) {
  const uint64_t k0 = load_le64(key), k1 = load_le64(key + 8);
  // "somepseudorandomlygeneratedbytes"
  Sip s{k0 ^ 0x736f6d6570736575ULL, k1 ^ 0x646f72616e646f6dULL, k0 ^ 0x6c7967656e657261ULL,
        k1 ^ 0x7465646279746573ULL};
  if (wide) s.v1 ^= 0xee;
  return s;
}

// Initialization and compression of every message word; the caller runs the
// finalization for the tag width it wants.
Sip absorb(const uint8_t* key, const void* data, size_t len, bool wide) {
  Sip s = init(key, wide);
  const uint8_t* p = static_cast<const uint8_t*>(data);
  const size_t whole = len & ~size_t{7};
  for (size_t i = 0; i < whole; i += 8)
    s.compress(load_le64(p + i));
  uint64_t last = static_cast<uint64_t>(len & 0xff) << 56;
  for (size_t i = whole; i < len; ++i)
    last |= static_cast<uint64_t>(p[i]) << (8 * (i - whole));
  s.compress(last);
  return s;
}

} // namespace

void SipStream::start(const uint8_t key[kSipKeyBytes]) {
  Sip s = init(key, false);
  v_[0] = s.v0;
  v_[1] = s.v1;
  v_[2] = s.v2;
  v_[3] = s.v3;
  tail_ = 0;
  len_ = 0;
}

void SipStream::add(const void* data, size_t len) {
  Sip s{v_[0], v_[1], v_[2], v_[3]};
  const uint8_t* p = static_cast<const uint8_t*>(data);
  size_t i = 0;
  while (i < len && (len_ & 7) != 0) { // complete the word under way
    tail_ |= static_cast<uint64_t>(p[i++]) << (8 * (len_ & 7));
    if ((++len_ & 7) == 0) {
      s.compress(tail_);
      tail_ = 0;
    }
  }
  for (; i + 8 <= len; i += 8, len_ += 8)
    s.compress(load_le64(p + i));
  for (; i < len; ++i, ++len_)
    tail_ |= static_cast<uint64_t>(p[i]) << (8 * (len_ & 7));
  v_[0] = s.v0;
  v_[1] = s.v1;
  v_[2] = s.v2;
  v_[3] = s.v3;
}

uint64_t SipStream::tag() const {
  Sip s{v_[0], v_[1], v_[2], v_[3]};
  s.compress(tail_ | (static_cast<uint64_t>(len_ & 0xff) << 56));
  s.v2 ^= 0xff;
  return s.finish_word();
}

uint64_t siphash24_64(const uint8_t key[kSipKeyBytes], const void* data, size_t len) {
  Sip s = absorb(key, data, len, false);
  s.v2 ^= 0xff;
  return s.finish_word();
}

void siphash24_128(const uint8_t key[kSipKeyBytes], const void* data, size_t len, uint8_t out[16]) {
  Sip s = absorb(key, data, len, true);
  s.v2 ^= 0xee;
  store_le64(out, s.finish_word());
  s.v1 ^= 0xdd;
  store_le64(out + 8, s.finish_word());
}

} // namespace xp::recover
