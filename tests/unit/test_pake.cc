// The binding's key exchange (recover/pake.h, docs/protocol.md §2): the
// same password gives both ends one key, another password another key, and
// a hostile share gives none.
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "recover/pake.h"

using namespace xp::recover;

namespace {

struct End {
  uint8_t scalar[pake::kScalarBytes], share[pake::kPointBytes];
};

const uint8_t kSid[32] = {1, 2, 3, 4};
const uint8_t kCid[41] = {4, 10, 0, 0, 1};

End make(const std::string& password, uint8_t seed_byte) {
  uint8_t seed[pake::kSeedBytes];
  for (size_t i = 0; i < sizeof seed; ++i)
    seed[i] = static_cast<uint8_t>(seed_byte + i * 13);
  pake::Inputs in{reinterpret_cast<const uint8_t*>(password.data()),
                  password.size(),
                  kCid,
                  sizeof kCid,
                  kSid,
                  sizeof kSid};
  End e;
  REQUIRE(pake::make_share(in, seed, e.scalar, e.share));
  return e;
}

bool key(const End& me, const End& c, const End& s, const End& peer, uint8_t isk[64]) {
  return pake::derive_key(me.scalar, peer.share, c.share, s.share, kSid, sizeof kSid, isk);
}

} // namespace

TEST_CASE("pake: one password, one key; another password, another key") {
  REQUIRE(pake::available());
  const End c = make("GET / HTTP/1.1", 1), s = make("GET / HTTP/1.1", 2);
  uint8_t kc[64], ks[64];
  REQUIRE(key(c, c, s, s, kc));
  REQUIRE(key(s, c, s, c, ks));
  CHECK(memcmp(kc, ks, 64) == 0);
  // A forger's one guess, one byte off: its key differs from the real end's.
  const End f = make("GET / HTTP/1.0", 3);
  uint8_t kf[64], ks2[64];
  REQUIRE(key(f, c, f, c, kf));  // the forger answers the client's share
  REQUIRE(key(c, c, f, f, ks2)); // the client keys with the forger's share
  CHECK(memcmp(kf, ks2, 64) != 0);
  // The share says nothing the password alone decides: the same seed under
  // two passwords gives two unrelated points.
  CHECK(memcmp(make("a", 9).share, make("b", 9).share, pake::kPointBytes) != 0);
}

TEST_CASE("pake: a hostile share (identity, not canonical) gives no key") {
  const End c = make("x", 1);
  End bad = c;
  uint8_t isk[64];
  memset(bad.share, 0, sizeof bad.share); // the identity
  CHECK_FALSE(key(c, c, bad, bad, isk));
  memset(bad.share, 0xff, sizeof bad.share); // no canonical encoding
  CHECK_FALSE(key(c, c, bad, bad, isk));
}
