#include "recover/pake.h"

#include <cstring>
#include <dlfcn.h>
#include <sodium.h>

#include "common/load_once.h"
#include "common/logsink.h"

namespace xp::recover::pake {
namespace {

// libsodium's entries this file calls: sodium().name(...) is name(...).
#define XP_SODIUM_FUNCTIONS(F)                                                                     \
  F(sodium_init)                                                                                   \
  F(crypto_hash_sha512_init)                                                                       \
  F(crypto_hash_sha512_update)                                                                     \
  F(crypto_hash_sha512_final)                                                                      \
  F(crypto_core_ristretto255_from_hash)                                                            \
  F(crypto_core_ristretto255_scalar_reduce)                                                        \
  F(crypto_scalarmult_ristretto255)

struct Sodium {
#define XP_FIELD(name) decltype(&::name) name;
  XP_SODIUM_FUNCTIONS(XP_FIELD)
#undef XP_FIELD
};

Sodium g_na;
LoadOnce g_load;

bool load() {
  void* h = dlopen("libsodium.so.23", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    XP_SLOG(XP_SLOG_WARN, "libsodium: %s: connections stay on TCP (handshake_failed)", dlerror());
    return false;
  }
  bool ok = true;
#define XP_RESOLVE(name)                                                                           \
  g_na.name = reinterpret_cast<decltype(&::name)>(dlsym(h, #name));                                \
  ok = ok && g_na.name != nullptr;
  XP_SODIUM_FUNCTIONS(XP_RESOLVE)
#undef XP_RESOLVE
  if (!ok || g_na.sodium_init() < 0) {
    XP_SLOG(XP_SLOG_WARN, "libsodium: unusable: connections stay on TCP (handshake_failed)");
    return false;
  }
  return true;
}

// SHA-512 over length-prefixed fields (2 bytes, little-endian), so that no
// two different field lists hash the same bytes.
class Hash {
public:
  explicit Hash(const char* dsi) {
    g_na.crypto_hash_sha512_init(&st_);
    field(reinterpret_cast<const uint8_t*>(dsi), strlen(dsi));
  }
  void field(const uint8_t* p, size_t n) {
    const uint8_t len[2] = {static_cast<uint8_t>(n), static_cast<uint8_t>(n >> 8)};
    g_na.crypto_hash_sha512_update(&st_, len, 2);
    if (n > 0) g_na.crypto_hash_sha512_update(&st_, p, n);
  }
  void final(uint8_t out[64]) { g_na.crypto_hash_sha512_final(&st_, out); }

private:
  crypto_hash_sha512_state st_;
};

} // namespace

bool available() {
  return g_load.get(load);
}

bool make_share(const Inputs& in, const uint8_t seed[kSeedBytes], uint8_t scalar[kScalarBytes],
                uint8_t share[kPointBytes]) {
  if (!available()) return false;
  uint8_t h[64], g[kPointBytes];
  Hash gen("xpress-CPace-ristretto255-generator");
  gen.field(in.password, in.password_len);
  gen.field(in.channel_id, in.channel_id_len);
  gen.field(in.sid, in.sid_len);
  gen.final(h);
  g_na.crypto_core_ristretto255_from_hash(g, h);
  uint8_t wide[kSeedBytes];
  memcpy(wide, seed, kSeedBytes); // scalar_reduce may not alias its input
  g_na.crypto_core_ristretto255_scalar_reduce(scalar, wide);
  // -1 when y * G is the identity (y == 0): never for a random seed.
  return g_na.crypto_scalarmult_ristretto255(share, scalar, g) == 0;
}

bool derive_key(const uint8_t scalar[kScalarBytes], const uint8_t peer_share[kPointBytes],
                const uint8_t share_c[kPointBytes], const uint8_t share_s[kPointBytes],
                const uint8_t* sid, size_t sid_len, uint8_t isk[kKeyBytes]) {
  if (!available()) return false;
  uint8_t k[kPointBytes];
  // -1 for a non-canonical encoding or an identity result (a peer that
  // sends a low-order or invalid point learns nothing and binds nothing).
  if (g_na.crypto_scalarmult_ristretto255(k, scalar, peer_share) != 0) return false;
  Hash h("xpress-CPace-ristretto255-ISK");
  h.field(sid, sid_len);
  h.field(k, sizeof k);
  h.field(share_c, kPointBytes);
  h.field(share_s, kPointBytes);
  h.final(isk);
  return true;
}

} // namespace xp::recover::pake
