// Command line of xpress-bench: `xpress-bench server ...` or `xpress-bench <scenario> ...`.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "wire.h"

namespace xb {

struct SizeClass {
  uint64_t bytes;
  double weight; // normalised so the weights sum to 1
};

struct Options {
  bool server = false;
  Scenario scenario = Scenario::kStream;
  std::string mode; // "server" or the scenario name, as typed

  // Common.
  std::string host = "127.0.0.1";
  std::string bind = "0.0.0.0";
  uint16_t port = 7470;
  bool json = false;
  bool quiet = false;
  bool once = false;
  double timeout_s = 0; // hard limit on the whole process; 0 = per-scenario default
  Verify verify = Verify::kSample;
  uint64_t seed = 1;
  std::string label; // copied into the report, to tag runs (e.g. "tcp", "xpress")

  // Timed scenarios (stream, pingpong, ps).
  double duration_s = 5;
  double warmup_s = 0.5;

  // stream / pingpong / incast.
  uint64_t size = 0; // 0 = per-scenario default
  int conns = 1;
  bool reverse = false;
  uint64_t iters = 0; // pingpong: stop after this many measured round trips (0 = no cap)

  // ps.
  std::string sizes_text = "4K:0.5,64K:0.3,1M:0.15,4M:0.05";
  std::vector<SizeClass> sizes;
  double fetch_ratio = 0.8;
  int clients = 4;
  int shards = 4; // per size class

  // incast.
  int senders = 8;
  int rounds = 200;
  int warmup_rounds = 3;

  // connect.
  int count = 500;
  int parallel = 1;
  int long_conns = 100;
  double hold_s = 0.5;
};

enum class ParseResult { kOk, kHelp, kError };
ParseResult parse_options(int argc, char** argv, Options* o, std::string* err);
void print_usage(FILE* f);

// "4K" -> 4096, "1M" -> 1048576, "100" -> 100 (binary multiples).
bool parse_size(const std::string& s, uint64_t* out);
// "4K:0.5,64K:0.3" -> classes with normalised weights.
bool parse_size_mix(const std::string& s, std::vector<SizeClass>* out, std::string* err);
// "4K", "1M", "100" for sizes (binary units, like parse_size).
std::string size_text(uint64_t bytes);
const char* scenario_name(Scenario s);
const char* verify_name(Verify v);

} // namespace xb
