#include "stream/upgrade_policy.h"

#include "verbs/device.h"

namespace xp::stream {

Reason upgrade_decision(const UpgradeInputs& in) {
  if (!in.enabled) return Reason::disabled;
  if (!in.rule_allows) return Reason::rule_denied;
  if (!verbs::device_present()) return Reason::no_device;
  if (!kUpgradeBuilt) return Reason::handshake_failed;
  return Reason::none;
}

} // namespace xp::stream
