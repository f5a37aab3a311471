#include "preload/rules.h"

#include <arpa/inet.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <netinet/in.h>

namespace xp {

const char* const kDefaultRules = "deny * 127.0.0.0/8; deny * [::1]; allow * *";

namespace {

// Tokenizer over a fixed copy: rules are parsed once, with no allocation.
struct Cursor {
  const char* p;
  void skip_space() {
    while (*p == ' ' || *p == '\t')
      ++p;
  }
  // Next whitespace-delimited word within the current rule; empty at the end.
  size_t word(char* out, size_t n) {
    skip_space();
    size_t i = 0;
    while (*p && *p != ' ' && *p != '\t' && *p != ';' && *p != '\n') {
      if (i + 1 < n) out[i++] = *p;
      ++p;
    }
    out[i] = '\0';
    return i;
  }
};

bool parse_u16(const char* s, const char* end, uint16_t* v) {
  if (s == end || end - s > 5) return false;
  unsigned long x = 0;
  for (const char* q = s; q < end; ++q) {
    if (*q < '0' || *q > '9') return false;
    x = x * 10 + static_cast<unsigned long>(*q - '0');
  }
  if (x > 65535) return false;
  *v = static_cast<uint16_t>(x);
  return true;
}

bool parse_ports(const char* s, Rule* r) {
  if (strcmp(s, "*") == 0) return true;
  const char* dash = strchr(s, '-');
  const char* end = s + strlen(s);
  if (dash == nullptr) {
    if (!parse_u16(s, end, &r->port_lo)) return false;
    r->port_hi = r->port_lo;
    return true;
  }
  return parse_u16(s, dash, &r->port_lo) && parse_u16(dash + 1, end, &r->port_hi) &&
         r->port_lo <= r->port_hi;
}

bool parse_prefix(const char* s, unsigned max, uint8_t* out) {
  uint16_t v = 0;
  if (!parse_u16(s, s + strlen(s), &v) || v > max) return false;
  *out = static_cast<uint8_t>(v);
  return true;
}

// "addr[/N][:ports]" with IPv6 in brackets.
bool parse_endpoint(char* s, Rule* r) {
  char* ports = nullptr;
  char* host = s;
  if (s[0] == '[') {
    char* close = strchr(s, ']');
    if (close == nullptr) return false;
    *close = '\0';
    host = s + 1;
    char* rest = close + 1;
    char* pfx = nullptr;
    if (*rest == '/') {
      pfx = rest + 1;
      char* colon = strchr(pfx, ':');
      if (colon) {
        *colon = '\0';
        ports = colon + 1;
      }
    } else if (*rest == ':') {
      ports = rest + 1;
    } else if (*rest != '\0') {
      return false;
    }
    if (inet_pton(AF_INET6, host, r->addr) != 1) return false;
    r->family = 6;
    r->prefix = 128;
    if (pfx && !parse_prefix(pfx, 128, &r->prefix)) return false;
  } else {
    char* colon = strchr(s, ':');
    if (colon) {
      *colon = '\0';
      ports = colon + 1;
    }
    char* slash = strchr(host, '/');
    if (slash) *slash = '\0';
    if (strcmp(host, "*") == 0) {
      if (slash) return false;
      r->family = 0;
    } else {
      if (inet_pton(AF_INET, host, r->addr) != 1) return false;
      r->family = 4;
      r->prefix = 32;
      if (slash && !parse_prefix(slash + 1, 32, &r->prefix)) return false;
    }
  }
  if (ports && !parse_ports(ports, r)) return false;
  return true;
}

bool prefix_match(const uint8_t* a, const uint8_t* b, unsigned bits) {
  unsigned full = bits / 8, rem = bits % 8;
  if (memcmp(a, b, full) != 0) return false;
  if (rem == 0) return true;
  uint8_t mask = static_cast<uint8_t>(0xff << (8 - rem));
  return (a[full] & mask) == (b[full] & mask);
}

} // namespace

bool parse_rules(const char* text, RuleSet* out, char* err, size_t errlen) {
  out->count = 0;
  Cursor c{text};
  unsigned index = 0;
  while (true) {
    c.skip_space();
    while (*c.p == ';' || *c.p == '\n' || *c.p == ' ' || *c.p == '\t')
      ++c.p;
    if (*c.p == '\0') break;
    ++index;
    const char* start = c.p;
    char action[16], role[16], endpoint[128], extra[8];
    c.word(action, sizeof action);
    c.word(role, sizeof role);
    c.word(endpoint, sizeof endpoint);
    size_t more = c.word(extra, sizeof extra);
    // Show the offending rule as written.
    auto fail = [&](const char* why) {
      const char* end = start;
      while (*end && *end != ';' && *end != '\n')
        ++end;
      snprintf(err, errlen, "rule %u '%.*s': %s", index, static_cast<int>(end - start), start, why);
      return false;
    };
    if (more != 0)
      return fail("too many words (expected: allow|deny client|server|* address[:ports])");
    Rule r;
    if (strcmp(action, "allow") == 0)
      r.allow = true;
    else if (strcmp(action, "deny") == 0)
      r.allow = false;
    else
      return fail("action must be allow or deny");
    if (strcmp(role, "client") == 0)
      r.role = Role::client;
    else if (strcmp(role, "server") == 0)
      r.role = Role::server;
    else if (strcmp(role, "*") == 0)
      r.role = Role::any;
    else
      return fail("role must be client, server or *");
    if (endpoint[0] == '\0') return fail("missing address (use * for any)");
    if (!parse_endpoint(endpoint, &r))
      return fail(
          "bad address (expected *, A.B.C.D[/N] or [IPv6][/N], then optional :PORT, :LO-HI or :*)");
    if (out->count == sw::kMaxRules) return fail("too many rules");
    out->rules[out->count++] = r;
  }
  return true;
}

bool rules_allow(const RuleSet& rs, Role role, const struct sockaddr* addr, socklen_t len) {
  uint8_t bytes[16] = {};
  uint8_t family = 0;
  uint16_t port = 0;
  if (addr && addr->sa_family == AF_INET && len >= sizeof(sockaddr_in)) {
    auto* in = reinterpret_cast<const sockaddr_in*>(addr);
    memcpy(bytes, &in->sin_addr, 4);
    port = ntohs(in->sin_port);
    family = 4;
  } else if (addr && addr->sa_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(addr);
    port = ntohs(in6->sin6_port);
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) { // ::ffff:a.b.c.d is an IPv4 peer
      memcpy(bytes, in6->sin6_addr.s6_addr + 12, 4);
      family = 4;
    } else {
      memcpy(bytes, &in6->sin6_addr, 16);
      family = 6;
    }
  } else {
    return false;
  }
  for (size_t i = 0; i < rs.count; ++i) {
    const Rule& r = rs.rules[i];
    if (r.role != Role::any && r.role != role) continue;
    if (r.family != 0 && (r.family != family || !prefix_match(bytes, r.addr, r.prefix))) continue;
    if (port < r.port_lo || port > r.port_hi) continue;
    return r.allow;
  }
  return false;
}

} // namespace xp
