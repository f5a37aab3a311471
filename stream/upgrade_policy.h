// Decides, when a TCP connection is established, whether it may try the RDMA
// upgrade, or why it stays on TCP.  The preload layer supplies what it knows
// (configuration, rules); the device question goes to the verbs layer.
#pragma once
#include "common/reasons.h"

namespace xp::stream {

struct UpgradeInputs {
  bool enabled;     // XPRESS_ENABLE and a valid configuration
  bool rule_allows; // XPRESS_RULES verdict for this connection
};

// Reason::none means: try the upgrade (stream/engine.h).
Reason upgrade_decision(const UpgradeInputs& in);

// Whether this build contains the RDMA upgrade (the data path issue adds it).
constexpr bool kUpgradeBuilt = true;

} // namespace xp::stream
