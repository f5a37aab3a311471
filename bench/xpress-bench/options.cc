// Argument parsing: one table of options says which modes accept each, so usage text and
// validation cannot drift apart.
#include "options.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace xb {

namespace {

enum : unsigned {
  kSrv = 1,
  kStream = 2,
  kPing = 4,
  kPs = 8,
  kIncast = 16,
  kConnect = 32,
  kClient = kStream | kPing | kPs | kIncast | kConnect,
  kAll = kSrv | kClient,
};

struct Spec {
  const char* name;
  const char* arg; // nullptr for flags
  unsigned modes;
  const char* help;
};

const Spec kSpecs[] = {
    {"port", "P", kAll, "TCP port (default 7470; server: 0 = any free port, printed)"},
    {"host", "H", kClient, "server address (default 127.0.0.1)"},
    {"bind", "ADDR", kSrv, "address to listen on (default 0.0.0.0)"},
    {"once", nullptr, kSrv, "exit after the first client run ends"},
    {"json", nullptr, kClient, "print one JSON object (one line) instead of the table"},
    {"quiet", nullptr, kAll, "no progress line (client) / no per-run lines (server)"},
    {"timeout", "SEC", kAll, "hard limit for the process (client default: run time + 60 s)"},
    {"verify", "MODE", kClient,
     "payload checks: none, sample (default; stamps), full (every byte)"},
    {"seed", "N", kClient, "seed of patterns and random choices (default 1)"},
    {"label", "TEXT", kClient, "free text copied into the report's \"label\" (tags runs)"},
    {"duration", "SEC", kStream | kPing | kPs, "measured time (default 5)"},
    {"warmup", "SEC", kPing | kPs, "unmeasured warm-up before it (default 0.5)"},
    {"size", "BYTES", kStream | kPing | kIncast,
     "message size (stream 64K, pingpong 64, incast: bytes per sender per round 256K)"},
    {"conns", "N", kStream | kPing | kPs,
     "connections (stream/pingpong: each with its own thread; ps: per client)"},
    {"reverse", nullptr, kStream | kIncast, "server sends, client receives"},
    {"iters", "N", kPing, "stop after N measured round trips per connection"},
    {"sizes", "MIX", kPs, "size mix SIZE:WEIGHT,... (default 4K:0.5,64K:0.3,1M:0.15,4M:0.05)"},
    {"fetch-ratio", "R", kPs, "fraction of operations that are fetches (default 0.8)"},
    {"clients", "N", kPs, "client threads (default 4)"},
    {"shards", "N", kPs, "parameter shards per size class on the server (default 4)"},
    {"senders", "N", kIncast, "concurrent senders, one connection and thread each (default 8)"},
    {"rounds", "N", kIncast, "measured rounds (default 200)"},
    {"warmup-rounds", "N", kIncast, "unmeasured rounds first (default 3)"},
    {"count", "N", kConnect, "short connections: connect, first byte, close (default 500)"},
    {"parallel", "N", kConnect, "threads opening short connections (default 1)"},
    {"long", "M", kConnect, "long-lived connections held at once for memory (default 100)"},
    {"hold", "SEC", kConnect, "how long the long-lived connections stay open (default 0.5)"},
};

struct ModeName {
  const char* name;
  unsigned bit;
  Scenario scenario;
  const char* help;
};
const ModeName kModes[] = {
    {"server", kSrv, Scenario::kStream, "serve every scenario"},
    {"stream", kStream, Scenario::kStream, "throughput and CPU per GB"},
    {"pingpong", kPing, Scenario::kPingpong, "request/response latency"},
    {"ps", kPs, Scenario::kPs, "parameter-server fetch/push workload"},
    {"incast", kIncast, Scenario::kIncast, "N senders to one receiver, completion time per round"},
    {"connect", kConnect, Scenario::kConnect, "connection setup rate and memory per connection"},
};

bool parse_double(const std::string& s, double* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (errno || *end || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

bool parse_int(const std::string& s, long lo, long hi, int* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (errno || *end || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

// Seconds with an optional unit: "5", "2.5s", "500ms", "1m".
bool parse_seconds(const std::string& s, double* out) {
  double scale = 1;
  std::string num = s;
  auto ends = [&](const char* suf) {
    size_t n = std::strlen(suf);
    return num.size() > n && num.compare(num.size() - n, n, suf) == 0;
  };
  if (ends("ms")) {
    scale = 1e-3;
    num.resize(num.size() - 2);
  } else if (ends("us")) {
    scale = 1e-6;
    num.resize(num.size() - 2);
  } else if (ends("s")) {
    num.resize(num.size() - 1);
  } else if (ends("m")) {
    scale = 60;
    num.resize(num.size() - 1);
  }
  double v;
  if (!parse_double(num, &v) || v < 0) return false;
  *out = v * scale;
  return true;
}

} // namespace

bool parse_size(const std::string& s, uint64_t* out) {
  if (s.empty() || !(s[0] >= '0' && s[0] <= '9')) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (errno || v < 0) return false;
  std::string unit(end);
  for (auto& c : unit)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();
  if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();
  double mult = 1;
  if (unit == "K")
    mult = 1024.0;
  else if (unit == "M")
    mult = 1024.0 * 1024;
  else if (unit == "G")
    mult = 1024.0 * 1024 * 1024;
  else if (!unit.empty() && unit != "B")
    return false;
  double bytes = v * mult;
  if (bytes != std::floor(bytes) || bytes > 1e15) return false;
  *out = static_cast<uint64_t>(bytes);
  return true;
}

std::string size_text(uint64_t b) {
  const char* units[] = {"", "K", "M", "G"};
  int u = 0;
  while (u < 3 && b >= 1024 && b % 1024 == 0) {
    b /= 1024;
    ++u;
  }
  return std::to_string(b) + units[u];
}

bool parse_size_mix(const std::string& s, std::vector<SizeClass>* out, std::string* err) {
  out->clear();
  double total = 0;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t colon = item.find(':');
    SizeClass c{0, 1.0};
    std::string size_part = item.substr(0, colon);
    if (!parse_size(size_part, &c.bytes) || c.bytes == 0 || c.bytes > kMaxMessage ||
        (colon != std::string::npos &&
         (!parse_double(item.substr(colon + 1), &c.weight) || c.weight <= 0))) {
      *err = "bad size class '" + item + "' in --sizes (want SIZE:WEIGHT, e.g. 64K:0.3)";
      return false;
    }
    total += c.weight;
    out->push_back(c);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (out->size() > static_cast<size_t>(kMaxSizeClasses)) {
    *err = "--sizes has more than " + std::to_string(kMaxSizeClasses) + " classes";
    return false;
  }
  for (auto& c : *out)
    c.weight /= total;
  return true;
}

const char* scenario_name(Scenario s) {
  switch (s) {
  case Scenario::kStream:
    return "stream";
  case Scenario::kPingpong:
    return "pingpong";
  case Scenario::kPs:
    return "ps";
  case Scenario::kIncast:
    return "incast";
  case Scenario::kConnect:
    return "connect";
  }
  return "?";
}

const char* verify_name(Verify v) {
  switch (v) {
  case Verify::kNone:
    return "none";
  case Verify::kSample:
    return "sample";
  case Verify::kFull:
    return "full";
  }
  return "?";
}

void print_usage(FILE* f) {
  std::fprintf(f, "usage: xpress-bench server [--port P] [options]\n"
                  "       xpress-bench <scenario> [--host H] [--port P] [options]\n\n"
                  "modes:\n");
  for (const auto& m : kModes)
    std::fprintf(f, "  %-10s %s\n", m.name, m.help);
  std::fprintf(f, "\noptions (modes that accept them):\n");
  for (const auto& s : kSpecs) {
    std::string left = std::string("--") + s.name + (s.arg ? std::string(" ") + s.arg : "");
    std::string modes;
    for (const auto& m : kModes) {
      if (s.modes & m.bit) modes += std::string(modes.empty() ? "" : ",") + m.name;
    }
    if (s.modes == kAll) modes = "all";
    if (s.modes == kClient) modes = "all clients";
    std::fprintf(f, "  %-20s %s [%s]\n", left.c_str(), s.help, modes.c_str());
  }
  std::fprintf(f, "\nexit status: 0 ok, 1 run failed (I/O or integrity error), 2 bad arguments,\n"
                  "3 hard timeout.  See bench/xpress-bench/README.md.\n");
}

ParseResult parse_options(int argc, char** argv, Options* o, std::string* err) {
  if (argc < 2) {
    *err = "missing mode (server, stream, pingpong, ps, incast, connect)";
    return ParseResult::kError;
  }
  std::string mode = argv[1];
  if (mode == "-h" || mode == "--help" || mode == "help") return ParseResult::kHelp;
  unsigned bit = 0;
  for (const auto& m : kModes) {
    if (mode == m.name) {
      bit = m.bit;
      o->scenario = m.scenario;
    }
  }
  if (!bit) {
    *err = "unknown mode '" + mode + "'";
    return ParseResult::kError;
  }
  o->mode = mode;
  o->server = bit == kSrv;
  bool size_set = false;

  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") return ParseResult::kHelp;
    if (a.rfind("--", 0) != 0) {
      *err = "unexpected argument '" + a + "'";
      return ParseResult::kError;
    }
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
      has_value = true;
    }
    const Spec* spec = nullptr;
    for (const auto& s : kSpecs)
      if (name == s.name) spec = &s;
    if (!spec) {
      *err = "unknown option --" + name;
      return ParseResult::kError;
    }
    if (!(spec->modes & bit)) {
      *err = "option --" + name + " does not apply to '" + mode + "'";
      return ParseResult::kError;
    }
    if (spec->arg && !has_value) {
      if (i + 1 >= argc) {
        *err = "option --" + name + " needs a value (" + spec->arg + ")";
        return ParseResult::kError;
      }
      value = argv[++i];
    } else if (!spec->arg && has_value) {
      *err = "option --" + name + " takes no value";
      return ParseResult::kError;
    }

    bool ok = true;
    int port = 0;
    if (name == "port") {
      ok = parse_int(value, o->server ? 0 : 1, 65535, &port);
      o->port = static_cast<uint16_t>(port);
    } else if (name == "host") {
      o->host = value;
      ok = !value.empty();
    } else if (name == "bind") {
      o->bind = value;
      ok = !value.empty();
    } else if (name == "once") {
      o->once = true;
    } else if (name == "json") {
      o->json = true;
    } else if (name == "quiet") {
      o->quiet = true;
    } else if (name == "reverse") {
      o->reverse = true;
    } else if (name == "timeout") {
      ok = parse_seconds(value, &o->timeout_s) && o->timeout_s > 0;
    } else if (name == "verify") {
      if (value == "none")
        o->verify = Verify::kNone;
      else if (value == "sample")
        o->verify = Verify::kSample;
      else if (value == "full")
        o->verify = Verify::kFull;
      else
        ok = false;
    } else if (name == "label") {
      o->label = value;
    } else if (name == "seed") {
      errno = 0;
      char* end = nullptr;
      o->seed = std::strtoull(value.c_str(), &end, 0);
      ok = !value.empty() && !errno && !*end;
    } else if (name == "duration") {
      ok = parse_seconds(value, &o->duration_s) && o->duration_s > 0 && o->duration_s <= 86400;
    } else if (name == "warmup") {
      ok = parse_seconds(value, &o->warmup_s) && o->warmup_s <= 3600;
    } else if (name == "hold") {
      ok = parse_seconds(value, &o->hold_s) && o->hold_s <= 3600;
    } else if (name == "size") {
      ok = parse_size(value, &o->size) && o->size > 0 && o->size <= kMaxMessage;
      size_set = true;
    } else if (name == "conns") {
      ok = parse_int(value, 1, 4096, &o->conns);
    } else if (name == "iters") {
      int n = 0;
      ok = parse_int(value, 1, 2000000000, &n);
      o->iters = static_cast<uint64_t>(n);
    } else if (name == "sizes") {
      o->sizes_text = value;
    } else if (name == "fetch-ratio") {
      ok = parse_double(value, &o->fetch_ratio) && o->fetch_ratio >= 0 && o->fetch_ratio <= 1;
    } else if (name == "clients") {
      ok = parse_int(value, 1, 1024, &o->clients);
    } else if (name == "shards") {
      ok = parse_int(value, 1, 4096, &o->shards);
    } else if (name == "senders") {
      ok = parse_int(value, 1, 4096, &o->senders);
    } else if (name == "rounds") {
      ok = parse_int(value, 1, 10000000, &o->rounds);
    } else if (name == "warmup-rounds") {
      ok = parse_int(value, 0, 10000000, &o->warmup_rounds);
    } else if (name == "count") {
      ok = parse_int(value, 0, 10000000, &o->count);
    } else if (name == "parallel") {
      ok = parse_int(value, 1, 1024, &o->parallel);
    } else if (name == "long") {
      ok = parse_int(value, 0, 1000000, &o->long_conns);
    }
    if (!ok) {
      *err = "bad value '" + value + "' for --" + name;
      return ParseResult::kError;
    }
  }

  if (!size_set) {
    if (o->scenario == Scenario::kStream) o->size = 64 * 1024;
    if (o->scenario == Scenario::kPingpong) o->size = 64;
    if (o->scenario == Scenario::kIncast) o->size = 256 * 1024;
  }
  if (!o->server && o->scenario == Scenario::kPs) {
    if (!parse_size_mix(o->sizes_text, &o->sizes, err)) return ParseResult::kError;
    uint64_t total = 0;
    for (const auto& c : o->sizes)
      total += c.bytes * static_cast<uint64_t>(o->shards);
    if (total > (2ull << 30)) {
      *err = "--shards x --sizes needs more than 2 GiB of shards on the server";
      return ParseResult::kError;
    }
  }
  if (!o->server && o->scenario == Scenario::kConnect && o->count == 0 && o->long_conns == 0) {
    *err = "connect: --count and --long are both 0, nothing to measure";
    return ParseResult::kError;
  }
  return ParseResult::kOk;
}

} // namespace xb
