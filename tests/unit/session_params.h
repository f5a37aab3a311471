// An upgrade session's parameters for the unit tests (recover/upgrade.h):
// the 4-tuple from addresses, nonce and key-exchange secret derived from
// `seed` (so each end of a test pair differs), and the message pump
// between two sessions.
#pragma once
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstddef>
#include <cstdint>

#include "recover/upgrade.h"

namespace xp::recover::test {

// The 4-tuple from socket addresses, as the preload layer builds it.
inline TcpTuple tuple(int af, const char* ca, uint16_t cp, const char* sa, uint16_t sp) {
  sockaddr_in6 c6{}, s6{};
  sockaddr_in c4{}, s4{};
  c6.sin6_family = s6.sin6_family = AF_INET6;
  c4.sin_family = s4.sin_family = AF_INET;
  c6.sin6_port = c4.sin_port = htons(cp);
  s6.sin6_port = s4.sin_port = htons(sp);
  const bool v6 = af == AF_INET6;
  REQUIRE(inet_pton(af, ca, v6 ? static_cast<void*>(&c6.sin6_addr) : &c4.sin_addr) == 1);
  REQUIRE(inet_pton(af, sa, v6 ? static_cast<void*>(&s6.sin6_addr) : &s4.sin_addr) == 1);
  TcpTuple t;
  const sockaddr* c = v6 ? reinterpret_cast<sockaddr*>(&c6) : reinterpret_cast<sockaddr*>(&c4);
  const sockaddr* s = v6 ? reinterpret_cast<sockaddr*>(&s6) : reinterpret_cast<sockaddr*>(&s4);
  REQUIRE(tuple_from_sockaddrs(c, s, &t) == Status::ok);
  return t;
}

// wait_ms: SessionParams::wait_ms (0: timeout_ms).
inline SessionParams params(Role r, const TcpTuple& t, uint8_t seed, uint32_t wait_ms = 5000) {
  SessionParams p;
  p.role = r;
  p.tuple = t;
  for (size_t i = 0; i < kNonceBytes; ++i)
    p.nonce.b[i] = static_cast<uint8_t>(seed * 16 + i);
  for (size_t i = 0; i < sizeof p.seed; ++i) // the key exchange secret
    p.seed[i] = static_cast<uint8_t>(seed * 31 + i * 7 + 1);
  p.timeout_ms = 1000;
  p.wait_ms = wait_ms;
  return p;
}

inline Status deliver(UpgradeSession& to, const Message& m) {
  return to.on_message(m.type, m.stream, m.seq, m.payload, m.len);
}

} // namespace xp::recover::test
