// An upgrade session's parameters for the unit tests (recover/upgrade.h):
// nonce and key-exchange secret derived from `seed`, so each end of a test
// pair differs, and the message pump between two sessions.
#pragma once
#include <cstddef>
#include <cstdint>

#include "recover/upgrade.h"

namespace xp::recover::test {

inline SessionParams params(Role r, const TcpTuple& t, uint8_t seed) {
  SessionParams p;
  p.role = r;
  p.tuple = t;
  for (size_t i = 0; i < kNonceBytes; ++i)
    p.nonce.b[i] = static_cast<uint8_t>(seed * 16 + i);
  for (size_t i = 0; i < sizeof p.seed; ++i) // the key exchange secret
    p.seed[i] = static_cast<uint8_t>(seed * 31 + i * 7 + 1);
  p.timeout_ms = 1000;
  p.wait_ms = 5000;
  return p;
}

inline Status deliver(UpgradeSession& to, const Message& m) {
  return to.on_message(m.type, m.stream, m.seq, m.payload, m.len);
}

} // namespace xp::recover::test
