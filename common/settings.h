// The settings of common/settings.def resolved from their sources: the
// declared default, a profile, the configuration file (global lines, then
// the lines of the program's [program NAME] sections) and the environment,
// each overriding the one before.  Pure and allocation-free (the hooked
// allocator resolves its own settings before any constructor ran,
// alloc/heap.cc); the file is read with raw system calls.
#pragma once
#include <cstddef>
#include <cstdint>

namespace xp::settings {

enum class Kind : uint8_t {
  flag,
  count,
  kib,
  ms,
  us,
  bytes,
  choice,
  path,
  log_path,
  rules,
  profile
};
enum class Scope : uint8_t { anywhere, env_only };

enum Id : uint16_t {
#define XP_SETTING(id, ...) k##id,
#include "common/settings.def"
  kCount
};

struct Decl {
  const char* name; // XPRESS_...
  Kind kind;
  const char* dflt;
  uint64_t lo, hi;
  const char* choices;
  Scope scope;
  const char* help;
};
extern const Decl kDecls[kCount];

struct Profile {
  const char* name;
  const char* settings; // "key=value key=value"
  const char* help;
};
extern const Profile kProfiles[];
extern const size_t kProfileCount;

// Where a value came from, lowest precedence first.
enum class Origin : uint8_t { dflt, profile, file, section, env };

struct Slot {
  uint64_t num = 0;          // flag 0/1, numbers as written (KiB for kib), choice value
  const char* str = nullptr; // the value as written (points into env, text or decl)
  Origin origin = Origin::dflt;
  uint32_t line = 0; // file line (file, section)
};

// Reads a whole file into buf; returns its size, or -errno.  A file that
// does not fit returns -EFBIG.
using ReadFile = long (*)(const char* path, char* buf, size_t cap);
long read_file(const char* path, char* buf, size_t cap); // raw system calls

using EnvLookup = const char* (*)(const char* name, void* ctx);
using ErrorReport = void (*)(const char* line, void* ctx);
// Checks a rules value (preload/rules.h); err gets the reason.
using RulesCheck = bool (*)(const char* text, char* err, size_t errlen);

struct Sources {
  EnvLookup env = nullptr;
  void* env_ctx = nullptr;
  ReadFile read = nullptr;  // null: no configuration file at all
  const char* program = ""; // matched against [program NAME] sections
  bool secure = false;      // AT_SECURE: XPRESS_CONFIG is ignored
  RulesCheck check_rules = nullptr;
  ErrorReport report = nullptr; // one line per problem (may be null)
  void* report_ctx = nullptr;
};

constexpr size_t kMaxFileBytes = 32u << 10;

// Every member has an initialiser, all zero: a global Resolved is
// constant-initialised (constinit), in .bss, and costs a process nothing
// until resolve() runs.
struct Resolved {
  Slot slot[kCount];
  char file[256] = {}; // the file read ("" when none)
  int file_error = 0;  // why /etc/xpress.conf was not read (errno), 0 if it was or is absent
  bool valid = false;  // set by resolve(); false: some line or value was rejected
  char profile_text[256] = {};
  char text[kMaxFileBytes + 1] = {};
};

// Fills *out (every slot, whatever happens); false when some value or line
// was rejected (each reported once).  The caller then passes through.
bool resolve(const Sources& src, Resolved* out);

// Parses one value of setting id; false (and *slot untouched) when invalid.
// why gets what is accepted.
bool parse_value(Id id, const char* v, Slot* slot, char* why, size_t whylen);

// Setting id's effective value and where it came from ("default",
// "profile NAME", "FILE:LINE", "environment").
void format(const Resolved& r, Id id, char* val, size_t vlen, char* origin, size_t olen);

// "NAME=VALUE  (origin)" for each setting, one per line, into fd.
void print(const Resolved& r, int fd);

// Case-insensitive key (spin_us, SPIN_US, XPRESS_SPIN_US); kCount if none.
Id find(const char* key);

} // namespace xp::settings
