// The spellings of flag and number values, used by the settings resolver
// (common/settings.cc) for the environment and the configuration file
// alike.  Pure; no allocation, usable at any time.
#pragma once
#include <cstdint>
#include <cstring>

namespace xp::env {

// A flag: 1 for 1/on/true/yes, 0 for 0/off/false/no, dflt when unset or
// empty, -1 for anything else.
inline int flag(const char* v, int dflt) {
  static const char* const names[] = {"0", "1", "off", "on", "false", "true", "no", "yes"};
  if (v == nullptr || *v == '\0') return dflt;
  for (int i = 0; i < 8; ++i)
    if (strcmp(v, names[i]) == 0) return i % 2;
  return -1;
}
constexpr const char* kFlagSpellings = "0|1|off|on|false|true|no|yes";

// A decimal integer in [lo, hi] into *out; false (and *out untouched) for
// anything else.  v must be set and non-empty.
inline bool number(const char* v, uint64_t lo, uint64_t hi, uint64_t* out) {
  uint64_t n = 0;
  const char* p = v;
  for (; *p >= '0' && *p <= '9' && n <= hi; ++p)
    n = n * 10 + static_cast<uint64_t>(*p - '0');
  if (*p != '\0' || p == v || n < lo || n > hi) return false;
  *out = n;
  return true;
}

} // namespace xp::env
