// Which connections may be accelerated: an ordered list of rules, first match
// wins (libvma's rule file idea, in one environment variable).
//
//   XPRESS_RULES="deny server *:22; allow client 10.0.0.0/8:5000-5100; allow * *"
//   rule   := action role address[:ports]
//   action := allow | deny
//   role   := client | server | *      (client: we called connect; server: we accepted)
//   address:= * | A.B.C.D[/N] | [IPv6][/N]
//   ports  := * | N | N-M
// A client rule matches the remote address and port (where we connect to); a
// server rule matches the local address and port (where we listen).  When no
// rule matches, the connection stays on TCP.
#pragma once
#include <cstddef>
#include <cstdint>
#include <sys/socket.h>

#include "common/switches.h"

namespace xp {

enum class Role : uint8_t { any = 0, client = 1, server = 2 };

struct Rule {
  bool allow = false;
  Role role = Role::any;
  uint8_t family = 0; // 0 any, 4 IPv4, 6 IPv6
  uint8_t prefix = 0; // bits of addr that must match
  uint8_t addr[16] = {};
  uint16_t port_lo = 0, port_hi = 65535;
};

struct RuleSet {
  Rule rules[sw::kMaxRules];
  size_t count = 0;
};

// The default when XPRESS_RULES is unset: everything except loopback (which
// has no RDMA path and gains nothing from one).
extern const char* const kDefaultRules;

// Parses text into out.  On error returns false and writes a message naming
// the offending rule into err.
bool parse_rules(const char* text, RuleSet* out, char* err, size_t errlen);

// First matching rule decides; no match means deny.  addr is the address the
// role's rule looks at (see above).
bool rules_allow(const RuleSet& rs, Role role, const struct sockaddr* addr, socklen_t len);

} // namespace xp
