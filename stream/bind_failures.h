// Failed bindings per requester address (docs/protocol.md §8, "Bounded
// state").  The key exchange gives a forger one guess per connection
// (§2); this bounds how many connections' worth of guesses one address
// gets: past kLimit failed bindings within kWindowMs, its new binding
// requests (rdma_cm requests and ATTACHes) are refused busy until the
// window ends, so its clients stay on TCP meanwhile.  A fixed table: an
// address that collides with another takes its slot (no allocation, no
// growth under a flood).
#pragma once
#include <cstdint>
#include <mutex>

namespace xp::stream {

class BindFailures {
public:
  static constexpr uint32_t kLimit = 16;
  static constexpr uint64_t kWindowMs = 10000;

  // A binding with a peer at `addr` (IPv4, network order) failed its proof.
  void note(const uint8_t addr[4], uint64_t now_ms);
  // Whether `addr` used up its failures for the current window.
  bool blocked(const uint8_t addr[4], uint64_t now_ms) const;

private:
  static constexpr uint32_t kSlots = 256;
  struct Slot {
    uint32_t addr = 0;
    uint32_t count = 0;
    uint64_t start_ms = 0;
  };
  static uint32_t index(uint32_t addr) { return (addr * 2654435761u) >> 24; }
  mutable std::mutex mu_; // a leaf: taken under the engine's or a connection's lock
  Slot slots_[kSlots];
};

} // namespace xp::stream
