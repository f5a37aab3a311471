// Failed bindings per requester address (docs/protocol.md §8, "Bounded
// state").  The key exchange gives a forger one guess per connection
// (§2); this bounds how many connections' worth of guesses one address
// gets: past kLimit failed bindings within kWindowMs, its new binding
// requests (rdma_cm requests and ATTACHes) are refused busy until the
// window ends, so its clients stay on TCP meanwhile.  A fixed table (no
// allocation, no growth under a flood), indexed by a keyed hash (the
// addresses are the peers' choice): each address has two candidate slots,
// and a slot that counts within its window is never taken over.
//
// The trade-off (docs/protocol.md §8): a process on a client host that
// fails its own bindings on purpose keeps that host's address blocked,
// and so the host's other clients on TCP, for as long as it goes on.
#pragma once
#include <cstdint>
#include <mutex>

#include "recover/upgrade_wire.h"

namespace xp::stream {

class BindFailures {
public:
  static constexpr uint32_t kLimit = 16;
  static constexpr uint64_t kWindowMs = 10000;

  // A binding with a peer at `addr` failed its proof.  IPv6 addresses
  // count per /64 (one host may hold all of its prefix's addresses).
  void note(const recover::IpAddr& addr, uint64_t now_ms);
  // Whether `addr` used up its failures for the current window.
  bool blocked(const recover::IpAddr& addr, uint64_t now_ms) const;

private:
  static constexpr uint32_t kSlots = 256;
  struct Slot {
    recover::IpAddr addr;
    uint32_t count = 0;
    uint64_t start_ms = 0;
  };
  // The slot that holds addr, or null.
  const Slot* find(const recover::IpAddr& addr, uint64_t now_ms) const;
  uint32_t index(const recover::IpAddr& addr) const;
  mutable std::mutex mu_; // a leaf: taken under the engine's or a connection's lock
  uint8_t key_[16];
  Slot slots_[kSlots];

public:
  BindFailures();
};

} // namespace xp::stream
