#include "preload/config.h"

#include "common/switches.h"

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "common/env_value.h"

namespace xp {
namespace {

struct Parser {
  EnvLookup lookup;
  void* lookup_ctx;
  ErrorReport report;
  void* report_ctx;
  Config* cfg;

  void reject(const char* var, const char* value, const char* accepted) {
    char line[1024];
    snprintf(
        line, sizeof line,
        "xpress: invalid %s='%.200s' (accepted: %.500s); xpress disabled, running as plain TCP",
        var, value, accepted);
    report(line, report_ctx);
    cfg->valid = false;
  }

  // Value from a fixed list; returns the index or -1 (and reports).
  template <size_t N>
  int choice(const char* var, const char* const (&names)[N], const char* accepted, int dflt) {
    const char* v = lookup(var, lookup_ctx);
    if (v == nullptr || *v == '\0') return dflt;
    for (size_t i = 0; i < N; ++i)
      if (strcmp(v, names[i]) == 0) return static_cast<int>(i);
    reject(var, v, accepted);
    return dflt;
  }

  bool flag(const char* var, bool dflt) {
    const char* v = lookup(var, lookup_ctx);
    int f = env::flag(v, dflt ? 1 : 0);
    if (f >= 0) return f == 1;
    reject(var, v, env::kFlagSpellings);
    return dflt;
  }

  // A decimal integer in [lo, hi]; dflt when unset.
  uint64_t number(const char* var, uint64_t lo, uint64_t hi, uint64_t dflt) {
    const char* v = lookup(var, lookup_ctx);
    if (v == nullptr || *v == '\0') return dflt;
    uint64_t n = 0;
    if (!env::number(v, lo, hi, &n)) {
      char acc[96];
      snprintf(acc, sizeof acc, "an integer from %llu to %llu", static_cast<unsigned long long>(lo),
               static_cast<unsigned long long>(hi));
      reject(var, v, acc);
      return dflt;
    }
    return n;
  }

  void path(const char* var, char* out, size_t n) {
    const char* v = lookup(var, lookup_ctx);
    if (v == nullptr || *v == '\0') return;
    if (strlen(v) >= n) {
      reject(var, v, "a path shorter than 256 bytes; %p is replaced by the pid");
      return;
    }
    snprintf(out, n, "%s", v);
  }
};

} // namespace

bool parse_config(EnvLookup lookup, void* lookup_ctx, ErrorReport report, void* report_ctx,
                  Config* cfg) {
  *cfg = Config{};
  Parser p{lookup, lookup_ctx, report, report_ctx, cfg};
  cfg->enabled = p.flag("XPRESS_ENABLE", true);

  static const char* const levels[] = {"error", "warn", "info", "debug", "trace",
                                       "0",     "1",    "2",    "3",     "4"};
  int lvl = p.choice("XPRESS_LOG_LEVEL", levels, "error|warn|info|debug|trace or 0-4", 1);
  cfg->log_level = static_cast<LogLevel>(lvl % 5);
  p.path("XPRESS_LOG_FILE", cfg->log_file, sizeof cfg->log_file);

  static const char* const stats[] = {"0", "off", "1", "text", "json"};
  int s = p.choice("XPRESS_STATS", stats, "0|off|1|text|json", 0);
  cfg->stats = s <= 1 ? StatsFormat::off : (s == 4 ? StatsFormat::json : StatsFormat::text);
  p.path("XPRESS_STATS_FILE", cfg->stats_file, sizeof cfg->stats_file);
  cfg->stats_live = p.flag("XPRESS_STATS_LIVE", false);
  cfg->backtrace = p.flag("XPRESS_BACKTRACE", false);
  cfg->alloc = p.flag("XPRESS_ALLOC", true);
  cfg->alloc_min_kb =
      static_cast<uint32_t>(p.number("XPRESS_ALLOC_MIN_KB", 16, 65536, cfg->alloc_min_kb));
  cfg->alloc_hugetlb = p.flag("XPRESS_ALLOC_HUGETLB", false);

  stream::EngineParams& e = cfg->engine;
  e.handshake_timeout_ms = static_cast<uint32_t>(
      p.number("XPRESS_HANDSHAKE_TIMEOUT_MS", 10, 600000, e.handshake_timeout_ms));
  e.spin_us = static_cast<uint32_t>(p.number("XPRESS_SPIN_US", 0, 1000000, e.spin_us));
  e.streams_per_channel =
      static_cast<uint32_t>(p.number("XPRESS_STREAMS_PER_CHANNEL", 1, 4096, e.streams_per_channel));
  e.server_channels =
      static_cast<uint32_t>(p.number("XPRESS_SERVER_CHANNELS", 1, 65536, e.server_channels));
  e.server_channels_per_peer = static_cast<uint32_t>(
      p.number("XPRESS_SERVER_CHANNELS_PER_PEER", 1, 65536, e.server_channels_per_peer));
  e.channels_per_peer =
      static_cast<uint32_t>(p.number("XPRESS_CHANNELS_PER_PEER", 1, 64, e.channels_per_peer));
  e.ring_bytes = p.number("XPRESS_RING_KB", sw::kRingMinBytes >> 10, sw::kRingMaxBytes >> 10,
                          e.ring_bytes >> 10)
                 << 10;
  e.stream_window = p.number("XPRESS_STREAM_WINDOW_KB", 16, 65536, e.stream_window >> 10) << 10;
  e.negative_cache_ms =
      static_cast<uint32_t>(p.number("XPRESS_NEGATIVE_CACHE_MS", 0, 3600000, e.negative_cache_ms));
  e.keepalive_ms =
      static_cast<uint32_t>(p.number("XPRESS_KEEPALIVE_MS", 0, 600000, e.keepalive_ms));
  e.reupgrade_ms =
      static_cast<uint32_t>(p.number("XPRESS_REUPGRADE_MS", 0, 3600000, e.reupgrade_ms));
  e.reupgrade_max_ms =
      static_cast<uint32_t>(p.number("XPRESS_REUPGRADE_MAX_MS", 1, 3600000, e.reupgrade_max_ms));
  e.autocork_max = p.number("XPRESS_AUTOCORK_KB", 0, 1024, e.autocork_max >> 10) << 10;
  e.zerocopy = p.flag("XPRESS_ZEROCOPY", e.zerocopy);
  e.zerocopy_min = p.number("XPRESS_ZEROCOPY_MIN_KB", 4, 65536, e.zerocopy_min >> 10) << 10;
  static const char* const copies[] = {"auto", "libc", "vector"};
  e.copy = static_cast<CopyMode>(p.choice("XPRESS_COPY", copies, "auto|libc|vector", 0));
  e.fault_qp_error_at = p.number("XPRESS_FAULT_QP_ERROR_AT", 0, 1ull << 50, 0); // test only

  const char* rules = lookup("XPRESS_RULES", lookup_ctx);
  char err[300];
  if (rules == nullptr || *rules == '\0') {
    parse_rules(kDefaultRules, &cfg->rules, err, sizeof err);
  } else if (!parse_rules(rules, &cfg->rules, err, sizeof err)) {
    char why[400];
    snprintf(why, sizeof why,
             "'allow|deny client|server|* ADDR[/N][:PORT|:LO-HI]' separated by ';' (%s)", err);
    p.reject("XPRESS_RULES", rules, why);
  }
  if (!cfg->valid) cfg->enabled = false;
  return cfg->valid;
}

void apply_secure_execution(Config* cfg) {
  cfg->enabled = false;
  cfg->alloc = false;
  cfg->log_file[0] = '\0';
  cfg->stats_file[0] = '\0';
  cfg->stats_live = false;
}

} // namespace xp
