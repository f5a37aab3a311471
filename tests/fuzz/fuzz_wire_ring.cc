// libFuzzer target: the ring descriptor of the rdma_cm private data
// (verbs/wire_ring.h), bytes a peer chooses.  Whatever they are, a
// descriptor that parses names a ring this end is willing to mirror.
#include <cstdint>
#include <cstdlib>

#include "verbs/wire_ring.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  xp::verbs::WireRing w;
  if (xp::verbs::parse_wire_ring(data, size, &w) != xp::Status::ok) return 0;
  if (w.size < 4096 || w.size > xp::sw::kRingMaxBytes || w.size % 64 != 0 ||
      w.app_len > xp::verbs::kAppPrivateMax || w.window_log2 > xp::verbs::kMaxPeerWindowLog2)
    abort();
  return 0;
}
