// Configuration parsing: defaults, every variable, malformed values.
#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "common/env_value.h"
#include "preload/config.h"

using namespace xp;

namespace {
struct Env {
  std::map<std::string, std::string> vars;
  std::vector<std::string> errors;
  Config cfg;
  bool parse() {
    return parse_config(
        [](const char* name, void* ctx) -> const char* {
          auto* e = static_cast<Env*>(ctx);
          auto it = e->vars.find(name);
          return it == e->vars.end() ? nullptr : it->second.c_str();
        },
        this, [](const char* line, void* ctx) { static_cast<Env*>(ctx)->errors.push_back(line); },
        this, &cfg);
  }
};
} // namespace

TEST_CASE("config: defaults") {
  Env e;
  CHECK(e.parse());
  CHECK(e.cfg.enabled);
  CHECK(e.cfg.log_level == LogLevel::warn);
  CHECK(e.cfg.stats == StatsFormat::off);
  CHECK(!e.cfg.stats_live); // every connection's addresses: published only when asked
  CHECK(!e.cfg.backtrace);
  CHECK(e.cfg.rules.count == 3); // the default rules
  CHECK(e.cfg.alloc);
  CHECK(e.cfg.alloc_min == 64u << 10);
  CHECK(!e.cfg.alloc_hugetlb);
  CHECK(e.cfg.engine.zerocopy);
  CHECK(e.cfg.engine.zerocopy_min == stream::EngineParams{}.zerocopy_min);
  CHECK(e.errors.empty());
}

TEST_CASE("config: a secure-execution process passes through and names no file") {
  Env e;
  e.vars = {{"XPRESS_LOG_FILE", "/etc/x"},
            {"XPRESS_STATS", "1"},
            {"XPRESS_STATS_FILE", "/etc/y"},
            {"XPRESS_STATS_LIVE", "1"}};
  CHECK(e.parse());
  CHECK(e.cfg.stats_live);
  apply_secure_execution(&e.cfg);
  CHECK(!e.cfg.enabled);
  CHECK(!e.cfg.alloc);
  CHECK(!e.cfg.stats_live);
  CHECK(e.cfg.log_file[0] == '\0');
  CHECK(e.cfg.stats_file[0] == '\0');
}

TEST_CASE("config: zero-copy switch and threshold") {
  Env e;
  e.vars = {{"XPRESS_ZEROCOPY", "off"}, {"XPRESS_ZEROCOPY_MIN_KB", "1024"}};
  CHECK(e.parse());
  CHECK(!e.cfg.engine.zerocopy);
  CHECK(e.cfg.engine.zerocopy_min == 1024u << 10);
  CHECK(e.errors.empty());
}

TEST_CASE("config: autocorking size, and 0 turns it off") {
  Env d;
  CHECK(d.parse());
  CHECK(d.cfg.engine.autocork_max == 64u << 10); // on (engine_params.h)
  Env e;
  e.vars = {{"XPRESS_AUTOCORK_KB", "0"}};
  CHECK(e.parse());
  CHECK(e.cfg.engine.autocork_max == 0);
  Env f;
  f.vars = {{"XPRESS_AUTOCORK_KB", "128"}};
  CHECK(f.parse());
  CHECK(f.cfg.engine.autocork_max == 128u << 10);
}

TEST_CASE("config: payload copy routine") {
  Env d;
  CHECK(d.parse());
  CHECK(d.cfg.engine.copy == CopyMode::automatic);
  const std::pair<const char*, CopyMode> ok[] = {
      {"auto", CopyMode::automatic}, {"libc", CopyMode::libc}, {"vector", CopyMode::vector}};
  for (const auto& [val, mode] : ok) {
    Env e;
    e.vars = {{"XPRESS_COPY", val}};
    CHECK(e.parse());
    CHECK(e.cfg.engine.copy == mode);
    CHECK(e.errors.empty());
  }
}

TEST_CASE("config: every variable accepts its documented values") {
  Env e;
  e.vars = {{"XPRESS_ENABLE", "0"},
            {"XPRESS_LOG_LEVEL", "debug"},
            {"XPRESS_LOG_FILE", "/tmp/x-%p.log"},
            {"XPRESS_STATS", "json"},
            {"XPRESS_STATS_FILE", "/tmp/s"},
            {"XPRESS_STATS_LIVE", "off"},
            {"XPRESS_BACKTRACE", "yes"},
            {"XPRESS_RULES", "allow client 10.0.0.0/8:5000-5100"}};
  CHECK(e.parse());
  CHECK(!e.cfg.enabled);
  CHECK(e.cfg.log_level == LogLevel::debug);
  CHECK(std::string(e.cfg.log_file) == "/tmp/x-%p.log");
  CHECK(e.cfg.stats == StatsFormat::json);
  CHECK(std::string(e.cfg.stats_file) == "/tmp/s");
  CHECK(!e.cfg.stats_live);
  CHECK(e.cfg.backtrace);
  CHECK(e.cfg.rules.count == 1);
  for (auto [v, want] :
       std::vector<std::pair<const char*, StatsFormat>>{{"1", StatsFormat::text},
                                                        {"text", StatsFormat::text},
                                                        {"0", StatsFormat::off},
                                                        {"off", StatsFormat::off}}) {
    Env f;
    f.vars = {{"XPRESS_STATS", v}};
    CHECK(f.parse());
    CHECK(f.cfg.stats == want);
  }
  Env g;
  g.vars = {{"XPRESS_LOG_LEVEL", "4"}};
  CHECK(g.parse());
  CHECK(g.cfg.log_level == LogLevel::trace);
}

TEST_CASE("config: a malformed value names the variable and the accepted values, and disables") {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"XPRESS_ENABLE", "2"},
      {"XPRESS_ENABLE", "enabled"},
      {"XPRESS_LOG_LEVEL", "verbose"},
      {"XPRESS_LOG_LEVEL", "5"},
      {"XPRESS_STATS", "yaml"},
      {"XPRESS_STATS_LIVE", "maybe"},
      {"XPRESS_BACKTRACE", "-1"},
      {"XPRESS_RULES", "permit * *"},
      {"XPRESS_RULES", "allow client 10.0.0.0/33"},
      {"XPRESS_RULES", "allow client 10.0.0.1:70000"},
      {"XPRESS_RULES", "allow client 10.0.0.1:9-5"},
      {"XPRESS_RULES", "allow nobody *"},
      {"XPRESS_RULES", "allow client"},
      {"XPRESS_RULES", "allow client [::1"},
      {"XPRESS_RULES", "allow * * extra"},
      {"XPRESS_LOG_FILE", std::string(300, 'a')},
      {"XPRESS_ALLOC", "malloc"},
      {"XPRESS_ALLOC_MIN_KB", "8"},
      {"XPRESS_ALLOC_MIN_KB", "65537"},
      {"XPRESS_ALLOC_MIN_KB", "64k"},
      {"XPRESS_ALLOC_HUGETLB", "2"},
      {"XPRESS_ZEROCOPY", "sometimes"},
      {"XPRESS_ZEROCOPY_MIN_KB", "2"},
      {"XPRESS_ZEROCOPY_MIN_KB", "65537"},
      {"XPRESS_ZEROCOPY_MIN_KB", "1M"},
      {"XPRESS_AUTOCORK_KB", "1025"},
      {"XPRESS_AUTOCORK_KB", "-1"},
      {"XPRESS_AUTOCORK_KB", "64k"},
      {"XPRESS_COPY", "avx2"},
      {"XPRESS_COPY", "AUTO"},
      {"XPRESS_COPY", "1"},
  };
  for (const auto& [var, val] : bad) {
    CAPTURE(var);
    CAPTURE(val);
    Env e;
    e.vars = {{var, val}};
    CHECK(!e.parse());
    CHECK(!e.cfg.enabled);
    REQUIRE(e.errors.size() == 1);
    CHECK(e.errors[0].find(var) != std::string::npos);
    CHECK(e.errors[0].find("accepted") != std::string::npos);
    CHECK(e.errors[0].find("plain TCP") != std::string::npos);
  }
}

TEST_CASE("config: several bad values give one line each") {
  Env e;
  e.vars = {{"XPRESS_ENABLE", "x"}, {"XPRESS_STATS", "y"}};
  CHECK(!e.parse());
  CHECK(e.errors.size() == 2);
}

TEST_CASE("config: empty values mean the default") {
  Env e;
  e.vars = {{"XPRESS_ENABLE", ""}, {"XPRESS_RULES", ""}, {"XPRESS_LOG_LEVEL", ""}};
  CHECK(e.parse());
  CHECK(e.cfg.enabled);
  CHECK(e.cfg.rules.count == 3);
}

TEST_CASE("log: %p expands to the pid") {
  char out[64];
  CHECK(log::expand_path("/tmp/xpress-%p.log", 42, out, sizeof out));
  CHECK(std::string(out) == "/tmp/xpress-42.log");
  CHECK(log::expand_path("plain", 1, out, sizeof out));
  CHECK(std::string(out) == "plain");
  CHECK(!log::expand_path("/a/very/long/path/%p", 123456, out, 12));
}

TEST_CASE("config: back to RDMA after a resume (XPRESS_REUPGRADE_MS, _MAX_MS)") {
  Env d;
  CHECK(d.parse());
  CHECK(d.cfg.engine.reupgrade_ms == 1000);
  CHECK(d.cfg.engine.reupgrade_max_ms == 60000);
  Env e;
  e.vars = {{"XPRESS_REUPGRADE_MS", "0"}, {"XPRESS_REUPGRADE_MAX_MS", "5000"}};
  CHECK(e.parse());
  CHECK(e.cfg.engine.reupgrade_ms == 0); // never
  CHECK(e.cfg.engine.reupgrade_max_ms == 5000);
  CHECK(e.errors.empty());
  for (const char* bad : {"-1", "1s", "3600001", ""}) {
    Env b;
    b.vars = {{"XPRESS_REUPGRADE_MS", bad}};
    bool ok = b.parse();
    if (*bad == '\0') { // unset: the default
      CHECK(ok);
      continue;
    }
    CHECK(!ok);
    REQUIRE(b.errors.size() == 1);
    CHECK(b.errors[0].find("XPRESS_REUPGRADE_MS") != std::string::npos);
    CHECK(b.cfg.engine.reupgrade_ms == 1000);
  }
  Env m;
  m.vars = {{"XPRESS_REUPGRADE_MAX_MS", "0"}};
  CHECK(!m.parse());
  REQUIRE(m.errors.size() == 1);
  CHECK(m.errors[0].find("XPRESS_REUPGRADE_MAX_MS") != std::string::npos);
  CHECK(m.cfg.engine.reupgrade_max_ms == 60000);
}

// The allocator reads its variables with the same functions (alloc/heap.cc).
TEST_CASE("env values: flag spellings and bounded numbers") {
  for (const char* on : {"1", "on", "true", "yes"})
    CHECK(env::flag(on, 0) == 1);
  for (const char* off : {"0", "off", "false", "no"})
    CHECK(env::flag(off, 1) == 0);
  CHECK(env::flag(nullptr, 1) == 1);
  CHECK(env::flag("", 0) == 0);
  CHECK(env::flag("ON", 0) == -1);
  CHECK(env::flag("2", 0) == -1);
  uint64_t n = 7;
  CHECK(env::number("64", 16, 65536, &n));
  CHECK(n == 64);
  CHECK(!env::number("8", 16, 65536, &n));
  CHECK(!env::number("99999999999999999999999", 16, 65536, &n));
  CHECK(!env::number("64k", 16, 65536, &n));
  CHECK(!env::number("-1", 0, 10, &n));
  CHECK(n == 64);
}
