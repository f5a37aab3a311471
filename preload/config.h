// Configuration: the settings of common/settings.def, resolved from the
// configuration file, a profile and the environment (common/settings.h),
// stored into this struct through each declaration's field.  An invalid
// value or line produces one clear message naming it and what is accepted,
// and the library then runs as a pure pass-through.
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/settings.h"
#include "preload/log.h"
#include "preload/rules.h"
#include "stream/engine_params.h"

namespace xp {

enum class StatsFormat { off, text, json };

// Each member is set by the setting that names it in common/settings.def;
// the defaults here only serve before the configuration is parsed.
struct Config {
  bool enabled = true;
  char config_file[256] = {};
  char profile[32] = {};
  LogLevel log_level = LogLevel::warn;
  char log_file[256] = {}; // "" = stderr
  StatsFormat stats = StatsFormat::off;
  char stats_file[256] = {}; // "" = stderr
  bool stats_live = false;
  bool backtrace = false;
  bool test_user_mode = false;
  uint32_t test_relay_delay_ms = 0;
  // The hooked allocator resolves these itself (alloc/heap.cc, before any
  // constructor); they are parsed here too so a bad value is reported.
  bool alloc = true;
  size_t alloc_min = 64u << 10;
  bool alloc_hugetlb = false;
  RuleSet rules;
  stream::EngineParams engine;
  bool valid = true; // false: some value was rejected (pass-through)
};

using EnvLookup = settings::EnvLookup;
using ErrorReport = settings::ErrorReport;

// Resolves the settings from src (scratch holds the file and where each
// value came from, for the banner and --print-config) into *cfg.  Every
// problem is reported through src.report (one line each); returns
// cfg->valid.
bool parse_config(const settings::Sources& src, settings::Resolved* scratch, Config* cfg);
// The same from variables only (lookup: getenv in the library, a table in
// tests), without a configuration file.
bool parse_config(EnvLookup lookup, void* lookup_ctx, ErrorReport report, void* report_ctx,
                  Config* cfg);
// The rules check the resolver uses (preload/rules.h).
bool check_rules(const char* text, char* err, size_t errlen);

// A secure-execution process (setuid/setgid, file capabilities: AT_SECURE)
// must not let the invoking user's environment steer it: xpress becomes a
// pass-through (no upgrade, no hooked allocator) and opens no file named by
// a variable (logs go to stderr).  Pure, for the tests.
void apply_secure_execution(Config* cfg);

// The process-wide configuration, parsed on first use (see lifecycle.h).
const Config& config();

} // namespace xp
