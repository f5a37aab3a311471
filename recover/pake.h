// CPace over ristretto255 with SHA-512 (draft-irtf-cfrg-cpace,
// "CPACE-RISTR255-SHA512"): the password-authenticated key exchange that
// binds an RDMA stream to its TCP connection (docs/protocol.md §2).
//
// Problem: a binding tag over the connection's first bytes, sent to a peer
// that has not proven anything, lets that peer test guesses of those bytes
// offline.  Mechanism: each end sends Y = y * G, where the generator G is
// derived from the password (the covered bytes) and the channel identifier;
// Y is a uniformly random point whatever G is, so it says nothing about the
// password.  Both ends derive ISK from y * Y_peer; an end that used another
// password derives another key, and a forger learns from one exchange
// whether its one guess was right, nothing more.
//
// libsodium is loaded on first use (a preloaded process that never upgrades
// does not map it); available() is false when it is missing, and then no
// connection upgrades.  Pure otherwise: the caller passes the randomness.
#pragma once
#include <cstddef>
#include <cstdint>

namespace xp::recover::pake {

constexpr size_t kPointBytes = 32;
constexpr size_t kScalarBytes = 32;
constexpr size_t kSeedBytes = 64; // random bytes a scalar is reduced from
constexpr size_t kKeyBytes = 64;  // ISK

// libsodium is loaded (the first call loads it; any thread).
bool available();

struct Inputs {
  const uint8_t* password;
  size_t password_len;
  const uint8_t* channel_id;
  size_t channel_id_len;
  const uint8_t* sid; // the session id: both ends' nonces
  size_t sid_len;
};

// G = ristretto255_from_hash(SHA-512(DSI | password | channel id | sid)),
// each field preceded by its length; y reduced from the seed; Y = y * G.
// false: libsodium missing, or a degenerate result (retry with another seed).
bool make_share(const Inputs& in, const uint8_t seed[kSeedBytes], uint8_t scalar[kScalarBytes],
                uint8_t share[kPointBytes]);

// ISK = SHA-512(DSI | sid | K | Y_c | Y_s) with K = y * Y_peer.  false when
// Y_peer is not a valid encoding or K is the identity (a hostile share).
bool derive_key(const uint8_t scalar[kScalarBytes], const uint8_t peer_share[kPointBytes],
                const uint8_t share_c[kPointBytes], const uint8_t share_s[kPointBytes],
                const uint8_t* sid, size_t sid_len, uint8_t isk[kKeyBytes]);

} // namespace xp::recover::pake
