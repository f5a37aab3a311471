// Configuration from environment variables, parsed once without allocation.
// An invalid value produces one clear message naming the variable and the
// accepted values, and the library then runs as a pure pass-through.
#pragma once
#include <cstddef>
#include <cstdint>

#include "preload/log.h"
#include "preload/rules.h"
#include "stream/engine_params.h"

namespace xp {

enum class StatsFormat { off, text, json };

struct Config {
  bool enabled = true;                  // XPRESS_ENABLE
  LogLevel log_level = LogLevel::warn;  // XPRESS_LOG_LEVEL
  char log_file[256] = {};              // XPRESS_LOG_FILE ("" = stderr)
  StatsFormat stats = StatsFormat::off; // XPRESS_STATS
  char stats_file[256] = {};            // XPRESS_STATS_FILE ("" = stderr)
  bool stats_live = false;              // XPRESS_STATS_LIVE
  bool backtrace = false;               // XPRESS_BACKTRACE
  // The hooked allocator reads these itself (alloc/heap.cc, before any
  // constructor); they are parsed here too so a bad value is reported.
  bool alloc = true;           // XPRESS_ALLOC
  uint32_t alloc_min_kb = 64;  // XPRESS_ALLOC_MIN_KB
  bool alloc_hugetlb = false;  // XPRESS_ALLOC_HUGETLB
  RuleSet rules;               // XPRESS_RULES
  stream::EngineParams engine; // XPRESS_HANDSHAKE_TIMEOUT_MS, XPRESS_SPIN_US, ...
  bool valid = true;           // false: some value was rejected (pass-through)
};

// Reads variables through lookup (getenv in the library, a table in tests).
// Every problem is reported through report (one line each); returns cfg.valid.
using EnvLookup = const char* (*)(const char* name, void* ctx);
using ErrorReport = void (*)(const char* line, void* ctx);
bool parse_config(EnvLookup lookup, void* lookup_ctx, ErrorReport report, void* report_ctx,
                  Config* cfg);

// A secure-execution process (setuid/setgid, file capabilities: AT_SECURE)
// must not let the invoking user's environment steer it: xpress becomes a
// pass-through (no upgrade, no hooked allocator) and opens no file named by
// a variable (logs go to stderr).  Pure, for the tests.
void apply_secure_execution(Config* cfg);

// The process-wide configuration, parsed on first use (see lifecycle.h).
const Config& config();

} // namespace xp
