// The settings table (common/settings.def) and its resolver: defaults,
// the configuration file, [program] sections, profiles, precedence and bad
// input (common/settings.h, preload/config.h).
#include <doctest/doctest.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/switches.h"
#include "preload/config.h"
#include "preload/rules.h"

using namespace xp;
using settings::Origin;

namespace {

struct World {
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> files;
  std::string program = "redis-server";
  bool secure = false;
  std::vector<std::string> errors;
  std::unique_ptr<settings::Resolved> r = std::make_unique<settings::Resolved>();
  Config cfg;

  // A replacement for the file reads below (null: the files map).
  static settings::ReadFile& current_read() {
    static settings::ReadFile f = nullptr;
    return f;
  }
  static World*& current() {
    static World* w = nullptr;
    return w;
  }
  bool parse() {
    current() = this;
    settings::Sources src;
    src.env = [](const char* name, void*) -> const char* {
      auto it = current()->env.find(name);
      return it == current()->env.end() ? nullptr : it->second.c_str();
    };
    src.read = [](const char* path, char* buf, size_t cap) -> long {
      if (current_read() != nullptr) return current_read()(path, buf, cap);
      auto it = current()->files.find(path);
      if (it == current()->files.end()) return -ENOENT;
      if (it->second.size() > cap) return -EFBIG;
      memcpy(buf, it->second.data(), it->second.size());
      return static_cast<long>(it->second.size());
    };
    src.program = program.c_str();
    src.secure = secure;
    src.check_rules = check_rules;
    src.report = [](const char* line, void*) { current()->errors.push_back(line); };
    return parse_config(src, r.get(), &cfg);
  }
  const settings::Slot& slot(settings::Id id) const { return r->slot[id]; }
  std::string printed() {
    char path[] = "/tmp/xpress-settings-XXXXXX";
    int fd = mkstemp(path);
    settings::print(*r, fd);
    std::string out(16384, '\0');
    out.resize(static_cast<size_t>(pread(fd, out.data(), out.size(), 0)));
    close(fd);
    unlink(path);
    return out;
  }
};

// XPRESS_SPIN_US as `program` gets it from w's files.
uint32_t spin_us_of(const World& w, const char* program) {
  World o;
  o.files = w.files;
  o.program = program;
  REQUIRE(o.parse());
  return o.cfg.engine.spin_us;
}

} // namespace

TEST_CASE("settings: every declared default and profile value parses") {
  for (int i = 0; i < settings::kCount; ++i) {
    const settings::Decl& d = settings::kDecls[i];
    CAPTURE(d.name);
    settings::Slot s;
    char why[600];
    CHECK(settings::parse_value(static_cast<settings::Id>(i), d.dflt, &s, why, sizeof why));
    CHECK(strncmp(d.name, "XPRESS_", 7) == 0);
    CHECK(strlen(d.help) > 0);
    CHECK(settings::find(d.name) == i);
  }
  for (size_t i = 0; i < settings::kProfileCount; ++i) {
    const settings::Profile& p = settings::kProfiles[i];
    CAPTURE(p.name);
    std::string all = p.settings;
    size_t pos = 0;
    while (pos < all.size()) {
      size_t sp = all.find(' ', pos);
      std::string kv = all.substr(pos, sp == std::string::npos ? std::string::npos : sp - pos);
      pos = sp == std::string::npos ? all.size() : sp + 1;
      size_t eq = kv.find('=');
      REQUIRE(eq != std::string::npos);
      settings::Id id = settings::find(kv.substr(0, eq).c_str());
      CAPTURE(kv);
      REQUIRE(id != settings::kCount);
      settings::Slot s;
      char why[600];
      CHECK(settings::parse_value(id, kv.substr(eq + 1).c_str(), &s, why, sizeof why));
    }
  }
}

// The table's defaults are the ones the code was written for.
TEST_CASE("settings: the table's defaults match the structs and the fixed limits") {
  World w;
  REQUIRE(w.parse());
  const stream::EngineParams e{};
  const stream::EngineParams& got = w.cfg.engine;
  CHECK(got.handshake_timeout_ms == e.handshake_timeout_ms);
  CHECK(got.spin_us == e.spin_us);
  CHECK(got.streams_per_channel == e.streams_per_channel);
  CHECK(got.channels_per_peer == e.channels_per_peer);
  CHECK(got.server_channels == e.server_channels);
  CHECK(got.server_channels_per_peer == e.server_channels_per_peer);
  CHECK(got.server_unproven_per_peer == e.server_unproven_per_peer);
  CHECK(got.ring_bytes == e.ring_bytes);
  CHECK(got.stream_window == e.stream_window);
  CHECK(got.negative_cache_ms == e.negative_cache_ms);
  CHECK(got.keepalive_ms == e.keepalive_ms);
  CHECK(got.fault_qp_error_at == e.fault_qp_error_at);
  CHECK(got.reupgrade_ms == e.reupgrade_ms);
  CHECK(got.reupgrade_max_ms == e.reupgrade_max_ms);
  CHECK(got.autocork_max == e.autocork_max);
  CHECK(got.zerocopy == e.zerocopy);
  CHECK(got.zerocopy_min == e.zerocopy_min);
  CHECK(got.copy == e.copy);
  const Config c{};
  CHECK(w.cfg.enabled == c.enabled);
  CHECK(w.cfg.log_level == c.log_level);
  CHECK(w.cfg.stats == c.stats);
  CHECK(w.cfg.alloc == c.alloc);
  CHECK(w.cfg.alloc_min == c.alloc_min);
  CHECK(w.cfg.alloc_hugetlb == c.alloc_hugetlb);
  CHECK(w.cfg.test_user_mode == c.test_user_mode);
  CHECK(std::string(settings::kDecls[settings::kRULES].dflt) == kDefaultRules);
  CHECK((settings::kDecls[settings::kRING_KB].lo << 10) == sw::kRingMinBytes);
  CHECK((settings::kDecls[settings::kRING_KB].hi << 10) == sw::kRingMaxBytes);
  for (int i = 0; i < settings::kCount; ++i)
    CHECK(w.slot(static_cast<settings::Id>(i)).origin == Origin::dflt);
  CHECK(w.r->file[0] == '\0'); // no /etc/xpress.conf: no file, no error
  CHECK(w.errors.empty());
}

TEST_CASE("settings: the file's global lines, then the program's sections, then the environment") {
  World w;
  w.files["/etc/xpress.conf"] = "# comment\n"
                                "\n"
                                "spin_us = 50\n"
                                "XPRESS_KEEPALIVE_MS=4000\n"
                                "  Ring_KB   =  128  \r\n"
                                "log_file = \"/tmp/x %p.log\"\n"
                                "[program nginx redis-server]\n"
                                "spin_us = 70\n"
                                "[program other]\n"
                                "spin_us = 90\n"
                                "keepalive_ms = 9000\n";
  w.env["XPRESS_RING_KB"] = "256";
  REQUIRE(w.parse());
  CHECK(w.errors.empty());
  CHECK(std::string(w.r->file) == "/etc/xpress.conf");
  CHECK(w.cfg.engine.spin_us == 70); // the section beats the global line above it
  CHECK(w.slot(settings::kSPIN_US).origin == Origin::section);
  CHECK(w.slot(settings::kSPIN_US).line == 8);
  CHECK(w.cfg.engine.keepalive_ms == 4000); // [program other] is not this program
  CHECK(w.slot(settings::kKEEPALIVE_MS).line == 4);
  CHECK(w.cfg.engine.ring_bytes == 256u << 10); // the environment beats the file
  CHECK(w.slot(settings::kRING_KB).origin == Origin::env);
  CHECK(std::string(w.cfg.log_file) == "/tmp/x %p.log");
  std::string out = w.printed();
  CHECK(out.find("XPRESS_SPIN_US=70") != std::string::npos);
  CHECK(out.find("/etc/xpress.conf:8") != std::string::npos);
  CHECK(out.find("XPRESS_RING_KB=256") != std::string::npos);
  CHECK(out.find("environment") != std::string::npos);
  CHECK(out.find("XPRESS_STREAMS_PER_CHANNEL=16384") != std::string::npos);

  World o; // the same file seen by another program
  o.files = w.files;
  o.program = "other";
  REQUIRE(o.parse());
  CHECK(o.cfg.engine.spin_us == 90);
  CHECK(o.cfg.engine.keepalive_ms == 9000);
  CHECK(spin_us_of(w, "nginx") == 70);
}

TEST_CASE("settings: a [program] name may be a shell pattern of the program's name") {
  World w;
  w.program = "python3.11";
  w.files["/etc/xpress.conf"] = "spin_us = 50\n"
                                "[program java python3*]\n"
                                "spin_us = 70\n"
                                "[program pyth?n3 [jn]ode]\n"
                                "spin_us = 90\n";
  REQUIRE(w.parse());
  CHECK(w.errors.empty());
  CHECK(w.cfg.engine.spin_us == 70);
  CHECK(spin_us_of(w, "node") == 90);
  CHECK(spin_us_of(w, "python") == 50); // neither pattern, and "python3*" is no plain name
}

TEST_CASE("settings: a '#' at a line's start or after a blank starts a comment") {
  World w;
  w.program = "memcached";
  w.files["/etc/xpress.conf"] = "log_level = info   # all programs\n"
                                "profile = low-cpu\t# every program\n"
                                "[program redis-server memcached]  # the basename of argv[0]\n"
                                "spin_us = 20000 #\n"
                                "log_file = /tmp/x#1.log\n"
                                "stats_file = \"/tmp/a #b\"  # quoted: kept\n";
  REQUIRE(w.parse());
  CHECK(w.errors.empty());
  CHECK(w.cfg.log_level == LogLevel::info);
  CHECK(std::string(w.r->slot[settings::kPROFILE].str) == "low-cpu");
  CHECK(w.cfg.engine.spin_us == 20000); // the section names memcached, not "#"
  CHECK(w.slot(settings::kSPIN_US).origin == Origin::section);
  CHECK(std::string(w.cfg.log_file) == "/tmp/x#1.log");
  CHECK(std::string(w.cfg.stats_file) == "/tmp/a #b");
  World o; // "#", "the", ... are not program names of the section
  o.program = "the";
  o.files = w.files;
  REQUIRE(o.parse());
  CHECK(o.cfg.engine.spin_us == 0);
}

TEST_CASE("settings: XPRESS_CONFIG names the file; a missing named file is an error") {
  World w;
  w.files["/etc/xpress.conf"] = "spin_us = 1\n";
  w.files["/srv/x.conf"] = "spin_us = 2\n";
  w.env["XPRESS_CONFIG"] = "/srv/x.conf";
  REQUIRE(w.parse());
  CHECK(w.cfg.engine.spin_us == 2);
  CHECK(std::string(w.cfg.config_file) == "/srv/x.conf");

  World m;
  m.env["XPRESS_CONFIG"] = "/nowhere.conf";
  CHECK(!m.parse());
  CHECK(!m.cfg.enabled);
  REQUIRE(m.errors.size() == 1);
  CHECK(m.errors[0].find("/nowhere.conf") != std::string::npos);
  CHECK(m.errors[0].find("plain TCP") != std::string::npos);

  World big;
  big.files["/etc/xpress.conf"] = std::string(settings::kMaxFileBytes + 1, '#');
  CHECK(!big.parse());
  REQUIRE(big.errors.size() == 1);
  CHECK(big.errors[0].find("32 KiB") != std::string::npos);
}

TEST_CASE("settings: a secure-execution process ignores XPRESS_CONFIG") {
  World w;
  w.files["/etc/xpress.conf"] = "spin_us = 1\n";
  w.files["/home/u/evil.conf"] = "log_file = /etc/shadow\nspin_us = 2\n";
  w.env["XPRESS_CONFIG"] = "/home/u/evil.conf";
  w.secure = true;
  REQUIRE(w.parse());
  CHECK(w.cfg.engine.spin_us == 1); // the administrator's file only
  CHECK(w.cfg.log_file[0] == '\0');
  CHECK(std::string(w.r->file) == "/etc/xpress.conf");
  CHECK(w.slot(settings::kCONFIG).origin == Origin::dflt);
}

TEST_CASE("settings: profiles apply below the file and the environment") {
  World d;
  d.env["XPRESS_PROFILE"] = "low-cpu";
  REQUIRE(d.parse());
  CHECK(d.cfg.engine.spin_us == 0);
  CHECK(d.cfg.engine.keepalive_ms == 10000);
  CHECK(d.slot(settings::kSPIN_US).origin == Origin::profile);
  CHECK(std::string(d.cfg.profile) == "low-cpu");
  CHECK(d.printed().find("profile low-cpu") != std::string::npos);

  World l;
  l.files["/etc/xpress.conf"] = "profile = throughput\n[program redis-server]\nprofile = latency\n";
  l.env["XPRESS_AUTOCORK_KB"] = "32";
  REQUIRE(l.parse());
  CHECK(std::string(l.cfg.profile) == "latency"); // the section's
  CHECK(l.cfg.engine.spin_us == 100000);
  CHECK(l.cfg.engine.autocork_max == 32u << 10); // the environment beats the profile
  CHECK(l.cfg.engine.ring_bytes == 512u << 10);  // throughput's ring does not apply

  World f;
  f.files["/etc/xpress.conf"] = "spin_us = 5\n";
  f.env["XPRESS_PROFILE"] = "latency";
  REQUIRE(f.parse());
  CHECK(f.cfg.engine.spin_us == 5); // the file's line beats the profile
  CHECK(f.cfg.engine.autocork_max == 0);

  World t;
  t.env["XPRESS_PROFILE"] = "throughput";
  REQUIRE(t.parse());
  CHECK(t.cfg.engine.ring_bytes == 1024u << 10);
  CHECK(t.cfg.engine.autocork_max == 256u << 10);
}

TEST_CASE("settings: each bad line gives one error with file and line, and xpress passes through") {
  struct Bad {
    std::string text, want;
    int line;
  };
  const std::vector<Bad> bad = {
      {"spin_us = fast\n", "XPRESS_SPIN_US", 2},
      {"ring_kb = 4096\n", "64 to 1024", 2},
      {"no_such_thing = 1\n", "unknown setting 'no_such_thing'", 2},
      {"just words\n", "expected 'key = value'", 2},
      {"[server x]\n", "unknown section", 2},
      {"[program]\n", "names no program", 2},
      {"[program x\n", "expected 'key = value'", 2},
      {"config = /tmp/x\n", "environment only", 2},
      {"profile = fastest\n", "latency|throughput|low-cpu", 2},
      {"rules = permit * *\n", "allow|deny", 2},
      {"log_level = loud\n", "warn|error", 2},
      {"enable = maybe\n", "0|1|off|on", 2},
      {std::string("spin_us = 1\0x\n", 14), "NUL", 2},
      {"[program other]\nspin_us = -1\n", "XPRESS_SPIN_US", 3}, // checked, though not applied
  };
  for (const Bad& b : bad) {
    CAPTURE(b.text);
    World w;
    w.files["/etc/xpress.conf"] = "# first line\n" + b.text;
    CHECK(!w.parse());
    CHECK(!w.cfg.enabled);
    REQUIRE(w.errors.size() == 1);
    CHECK(w.errors[0].find(b.want) != std::string::npos);
    CHECK(w.errors[0].find("/etc/xpress.conf:" + std::to_string(b.line) + ":") !=
          std::string::npos);
    CHECK(w.errors[0].find("plain TCP") != std::string::npos);
    CHECK(w.errors[0].find('\n') == std::string::npos);
  }
  // A bad value keeps the value below it; every bad line is reported.
  World w;
  w.files["/etc/xpress.conf"] = "spin_us = 7\n[program redis-server]\nspin_us = x\nring_kb = 1\n";
  CHECK(!w.parse());
  CHECK(w.errors.size() == 2);
  CHECK(w.cfg.engine.spin_us == 7);
  // Empty values mean the default, as in the environment.
  World e;
  e.files["/etc/xpress.conf"] = "spin_us =\n";
  CHECK(e.parse());
  CHECK(e.cfg.engine.spin_us == 1000);
}

TEST_CASE("settings: the environment's errors keep their form") {
  World w;
  w.files["/etc/xpress.conf"] = "spin_us = 7\n";
  w.env["XPRESS_SPIN_US"] = "soon";
  CHECK(!w.parse());
  REQUIRE(w.errors.size() == 1);
  CHECK(w.errors[0] == "xpress: invalid XPRESS_SPIN_US='soon' (accepted: an integer from 0 to "
                       "1000000); xpress disabled, running as plain TCP");
  CHECK(w.cfg.engine.spin_us == 7);
}

TEST_CASE("settings: read_file reads a regular file and refuses others") {
  char buf[64];
  char path[] = "/tmp/xpress-conf-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, "spin_us = 3\n", 12) == 12);
  close(fd);
  CHECK(settings::read_file(path, buf, sizeof buf) == 12);
  CHECK(settings::read_file(path, buf, 12) == 12);
  CHECK(settings::read_file(path, buf, 11) == -EFBIG);
  unlink(path);
  CHECK(settings::read_file(path, buf, sizeof buf) == -ENOENT);
  CHECK(settings::read_file("/tmp", buf, sizeof buf) == -EINVAL);
}

TEST_CASE("settings: an /etc/xpress.conf the program may not read is ignored, a named one is not") {
  struct Denied {
    static long read(const char*, char*, size_t) { return -EACCES; }
  };
  World w;
  w.env["XPRESS_SPIN_US"] = "3";
  World::current_read() = Denied::read;
  CHECK(w.parse());
  CHECK(w.errors.empty());
  CHECK(w.r->file_error == EACCES);
  CHECK(w.cfg.engine.spin_us == 3);
  World n;
  n.env["XPRESS_CONFIG"] = "/srv/x.conf";
  World::current_read() = Denied::read;
  CHECK(!n.parse());
  REQUIRE(n.errors.size() == 1);
  CHECK(n.errors[0].find("permission denied") != std::string::npos);
  World::current_read() = nullptr;
}
