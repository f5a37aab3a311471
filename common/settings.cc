#include "common/settings.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fnmatch.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/env_value.h"

namespace xp::settings {

const Decl kDecls[kCount] = {
#define XP_SETTING(id, kind, dflt, lo, hi, choices, scope, field, help)                            \
  {"XPRESS_" #id, Kind::kind, dflt, lo, hi, choices, Scope::scope, help},
#include "common/settings.def"
};

const Profile kProfiles[] = {
#define XP_PROFILE(name, settings, help) {name, settings, help},
#include "common/settings.def"
};
const size_t kProfileCount = sizeof kProfiles / sizeof kProfiles[0];

namespace {

constexpr const char* kDisabled = "xpress disabled, running as plain TCP";

const Profile* find_profile(const char* name) {
  for (size_t i = 0; i < kProfileCount; ++i)
    if (strcmp(kProfiles[i].name, name) == 0) return &kProfiles[i];
  return nullptr;
}

// The next "SPELLING=VALUE" of a choice list: spelling [s, s+n), *val.
const char* next_choice(const char* p, const char** s, size_t* n, uint64_t* val) {
  while (*p == ' ')
    ++p;
  if (*p == '\0') return nullptr;
  const char* eq = strchr(p, '=');
  *s = p;
  *n = static_cast<size_t>(eq - p);
  *val = 0;
  for (p = eq + 1; *p >= '0' && *p <= '9'; ++p)
    *val = *val * 10 + static_cast<uint64_t>(*p - '0');
  return p;
}

void append(char* buf, size_t len, const char* fmt, const char* s, size_t n) {
  size_t o = strlen(buf);
  if (o < len) snprintf(buf + o, len - o, fmt, static_cast<int>(n), s);
}

// What setting d accepts, for the error line.
void accepted(const Decl& d, char* why, size_t len) {
  why[0] = '\0';
  switch (d.kind) {
  case Kind::flag:
    snprintf(why, len, "%s", env::kFlagSpellings);
    break;
  case Kind::count:
  case Kind::kib:
  case Kind::ms:
  case Kind::us:
  case Kind::bytes:
    snprintf(why, len, "an integer from %llu to %llu", static_cast<unsigned long long>(d.lo),
             static_cast<unsigned long long>(d.hi));
    break;
  case Kind::choice: {
    const char* s;
    size_t n;
    uint64_t v;
    for (const char* p = d.choices; (p = next_choice(p, &s, &n, &v)) != nullptr;)
      append(why, len, why[0] ? "|%.*s" : "%.*s", s, n);
    break;
  }
  case Kind::path:
    snprintf(why, len, "a path shorter than 256 bytes");
    break;
  case Kind::log_path:
    snprintf(why, len, "a path shorter than 256 bytes; %%p is replaced by the pid");
    break;
  case Kind::rules:
    snprintf(why, len, "'allow|deny client|server|* ADDR[/N][:PORT|:LO-HI]' separated by ';'");
    break;
  case Kind::profile:
    for (size_t i = 0; i < kProfileCount; ++i)
      append(why, len, i ? "|%.*s" : "%.*s", kProfiles[i].name, strlen(kProfiles[i].name));
    break;
  }
}

// why (may be null) gets what is accepted when v is refused.
bool parse(Id id, const char* v, RulesCheck check_rules, Slot* slot, char* why, size_t len) {
  const Decl& d = kDecls[id];
  uint64_t n = 0;
  bool ok = true;
  switch (d.kind) {
  case Kind::flag: {
    int f = env::flag(v, -1);
    ok = f >= 0;
    n = f == 1;
    break;
  }
  case Kind::count:
  case Kind::kib:
  case Kind::ms:
  case Kind::us:
  case Kind::bytes:
    ok = env::number(v, d.lo, d.hi, &n);
    break;
  case Kind::choice: {
    ok = false;
    const char* s;
    size_t sn;
    for (const char* p = d.choices; !ok && (p = next_choice(p, &s, &sn, &n)) != nullptr;)
      ok = strlen(v) == sn && strncmp(v, s, sn) == 0;
    break;
  }
  case Kind::path:
  case Kind::log_path:
    ok = strlen(v) < 256;
    break;
  case Kind::rules:
    if (check_rules != nullptr) {
      char err[300];
      if (check_rules(v, err, sizeof err)) break;
      if (why != nullptr) {
        accepted(d, why, len);
        size_t o = strlen(why);
        if (o < len) snprintf(why + o, len - o, " (%s)", err);
      }
      return false;
    }
    break;
  case Kind::profile:
    ok = *v == '\0' || find_profile(v) != nullptr;
    break;
  }
  if (!ok) {
    if (why != nullptr) accepted(d, why, len);
    return false;
  }
  slot->num = n;
  slot->str = v;
  return true;
}

struct Resolver {
  const Sources& src;
  Resolved* r;

  void report(const char* line) {
    r->valid = false;
    if (src.report != nullptr) src.report(line, src.report_ctx);
  }
  // The error paths keep their buffers off the stack of the common path
  // (the hooked allocator may resolve on a thread with a small stack).
  __attribute__((noinline)) void reportf(unsigned line, const char* what, const char* a = "",
                                         const char* b = "") {
    char buf[1024];
    snprintf(buf, sizeof buf, "xpress: %.256s:%u: %s%.200s%.300s; %s", r->file, line, what, a, b,
             kDisabled);
    report(buf);
  }
  __attribute__((noinline)) void reject(Id id, const char* v, Origin o, uint32_t line) {
    char why[600], buf[1500];
    Slot s;
    parse(id, v, src.check_rules, &s, why, sizeof why); // again, for what is accepted
    if (o == Origin::env)
      snprintf(buf, sizeof buf, "xpress: invalid %s='%.200s' (accepted: %.600s); %s",
               kDecls[id].name, v, why, kDisabled);
    else
      snprintf(buf, sizeof buf, "xpress: %.256s:%u: invalid %s = '%.200s' (accepted: %.600s); %s",
               r->file, line, kDecls[id].name, v, why, kDisabled);
    report(buf);
  }

  void set(Id id, const char* v, Origin o, uint32_t line) {
    Slot s = r->slot[id];
    if (!parse(id, v, src.check_rules, &s, nullptr, 0)) {
      reject(id, v, o, line);
      return;
    }
    if (o < r->slot[id].origin) return; // validated, but a stronger source set it
    s.origin = o;
    s.line = line;
    r->slot[id] = s;
  }

  void from_env(Id id) {
    const char* v = src.env(kDecls[id].name, src.env_ctx);
    if (v != nullptr && *v != '\0') set(id, v, Origin::env, 0);
  }

  static char* trim(char* s) {
    while (*s == ' ' || *s == '\t')
      ++s;
    char* e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
      *--e = '\0';
    return s;
  }

  // [program NAME...]: whether this process is one of the names.
  // A [program] name is the program's base name or a shell pattern of it
  // ("python3*", "java*"), as rules match program names (xpress(7)).
  static bool name_matches(const char* name, const char* program) {
    if (strpbrk(name, "*?[") == nullptr) return strcmp(name, program) == 0;
    return fnmatch(name, program, FNM_PERIOD) == 0;
  }

  bool section(char* s, unsigned line, bool* ok) {
    *ok = false;
    size_t n = strlen(s);
    if (s[n - 1] != ']') {
      reportf(line, "expected 'key = value', '[program NAME...]' or '# comment', not '", s, "'");
      return false;
    }
    s[n - 1] = '\0';
    s = trim(s + 1);
    if (strncmp(s, "program", 7) != 0 || (s[7] != ' ' && s[7] != '\t' && s[7] != '\0')) {
      reportf(line, "unknown section '[", s, "]' (expected [program NAME...])");
      return false;
    }
    bool match = false, any = false;
    char* save;
    for (char* t = strtok_r(s + 7, " \t", &save); t != nullptr;
         t = strtok_r(nullptr, " \t", &save)) {
      match = match || name_matches(t, src.program);
      any = true;
    }
    if (!any) reportf(line, "[program] names no program");
    *ok = any;
    return match;
  }

  // A '#' at the start of the line or after a blank starts a comment, so
  // "profile = low-cpu   # every program" and "[program a b]  # why" work;
  // a '#' inside a word ("/var/log/x#1") or a "quoted value" is kept.
  static void strip_comment(char* s) {
    bool quoted = false;
    for (char* p = s; *p != '\0'; ++p) {
      if (*p == '"') quoted = !quoted;
      if (*p == '#' && !quoted && (p == s || p[-1] == ' ' || p[-1] == '\t')) {
        *p = '\0';
        return;
      }
    }
  }

  void line(char* s, unsigned line, bool* in_section, bool* matches) {
    strip_comment(s);
    s = trim(s);
    if (*s == '\0') return;
    if (*s == '[') {
      bool ok;
      bool m = section(s, line, &ok);
      *in_section = true;
      *matches = ok && m;
      return;
    }
    char* eq = strchr(s, '=');
    if (eq == nullptr) {
      reportf(line, "expected 'key = value', '[program NAME...]' or '# comment', not '", s, "'");
      return;
    }
    *eq = '\0';
    char* key = trim(s);
    char* val = trim(eq + 1);
    size_t vn = strlen(val);
    if (vn >= 2 && val[0] == '"' && val[vn - 1] == '"') {
      val[vn - 1] = '\0';
      ++val;
    }
    Id id = find(key);
    if (id == kCount) {
      reportf(line, "unknown setting '", key, "'");
      return;
    }
    if (kDecls[id].scope == Scope::env_only) {
      reportf(line, kDecls[id].name, " is read from the environment only");
      return;
    }
    if (*val == '\0') return; // as in the environment: the default
    // Every line is checked; only the global ones and those of this
    // program's sections apply.
    if (*in_section && !*matches) {
      Slot scratch;
      if (parse(id, val, src.check_rules, &scratch, nullptr, 0)) return;
    }
    set(id, val, *in_section ? Origin::section : Origin::file, line);
  }

  void read_file() {
    const char* path = r->slot[kCONFIG].str;
    snprintf(r->file, sizeof r->file, "%s", path);
    long n = src.read(path, r->text, kMaxFileBytes);
    if (n < 0) {
      bool named = r->slot[kCONFIG].origin == Origin::env;
      // No /etc/xpress.conf, or a sandbox (seccomp, AppArmor) that keeps
      // the program from looking: as without a file, so that users who set
      // nothing see no change; --print-config says why.
      if (!named && (n == -ENOENT || n == -ENOTDIR || n == -EACCES || n == -EPERM)) {
        r->file[0] = '\0';
        r->file_error = static_cast<int>(-n);
        return;
      }
      const char* why = n == -ENOENT   ? "no such file"
                        : n == -EACCES ? "permission denied"
                        : n == -EFBIG  ? "larger than 32 KiB"
                                       : "not a readable regular file";
      char buf[1024];
      snprintf(buf, sizeof buf, "xpress: cannot read configuration file %.256s (%s); %s", path, why,
               kDisabled);
      report(buf);
      r->file[0] = '\0';
      return;
    }
    r->text[n] = '\0';
    bool in_section = false, matches = false;
    unsigned ln = 1;
    for (char* p = r->text; p != nullptr; ++ln) {
      char* end = static_cast<char*>(memchr(p, '\n', static_cast<size_t>(r->text + n - p)));
      if (end == nullptr) end = r->text + n;
      bool nul = memchr(p, '\0', static_cast<size_t>(end - p)) != nullptr;
      char* next = end < r->text + n ? end + 1 : nullptr;
      *end = '\0';
      if (nul)
        reportf(ln, "a NUL byte in the line");
      else
        line(p, ln, &in_section, &matches);
      p = next;
    }
  }

  void apply_profile() {
    const char* name = r->slot[kPROFILE].str;
    const Profile* p = name != nullptr ? find_profile(name) : nullptr;
    if (p == nullptr) return;
    // "key=value key=value": each applies where nothing stronger set it.
    // The values are kept in r->profile_text, so the slots may point there.
    snprintf(r->profile_text, sizeof r->profile_text, "%s", p->settings);
    char* save;
    for (char* t = strtok_r(r->profile_text, " ", &save); t != nullptr;
         t = strtok_r(nullptr, " ", &save)) {
      char* eq = strchr(t, '=');
      if (eq == nullptr) continue;
      *eq = '\0';
      Id id = find(t);
      if (id == kCount || r->slot[id].origin != Origin::dflt) continue;
      Slot s;
      if (!parse(id, eq + 1, nullptr, &s, nullptr, 0)) continue; // a unit test checks them
      s.origin = Origin::profile;
      r->slot[id] = s;
    }
  }
};

} // namespace

Id find(const char* key) {
  if (strncasecmp(key, "XPRESS_", 7) == 0) key += 7;
  for (int i = 0; i < kCount; ++i)
    if (strcasecmp(kDecls[i].name + 7, key) == 0) return static_cast<Id>(i);
  return kCount;
}

bool parse_value(Id id, const char* v, Slot* slot, char* why, size_t whylen) {
  return parse(id, v, nullptr, slot, why, whylen);
}

bool resolve(const Sources& src, Resolved* out) {
  out->valid = true;
  out->file[0] = '\0';
  out->file_error = 0;
  for (int i = 0; i < kCount; ++i) {
    Slot s;
    parse(static_cast<Id>(i), kDecls[i].dflt, nullptr, &s, nullptr, 0);
    out->slot[i] = s;
  }
  Resolver rs{src, out};
  if (!src.secure && src.env != nullptr) rs.from_env(kCONFIG);
  if (src.read != nullptr) rs.read_file();
  if (src.env != nullptr)
    for (int i = 0; i < kCount; ++i)
      if (i != kCONFIG) rs.from_env(static_cast<Id>(i));
  rs.apply_profile();
  return out->valid;
}

long read_file(const char* path, char* buf, size_t cap) {
  long fd = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return -errno;
  struct stat st;
  long n = 0;
  if (syscall(SYS_fstat, fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    n = -EINVAL;
  } else {
    while (static_cast<size_t>(n) <= cap) {
      // One byte beyond cap tells a file that does not fit.
      char extra;
      char* dst = static_cast<size_t>(n) < cap ? buf + n : &extra;
      size_t want = static_cast<size_t>(n) < cap ? cap - static_cast<size_t>(n) : 1;
      long got = syscall(SYS_read, fd, dst, want);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        n = -errno;
        break;
      }
      if (got == 0) break;
      if (static_cast<size_t>(n) >= cap) {
        n = -EFBIG;
        break;
      }
      n += got;
    }
  }
  syscall(SYS_close, fd);
  return n;
}

void format(const Resolved& r, Id id, char* val, size_t vlen, char* origin, size_t olen) {
  const Decl& d = kDecls[id];
  const Slot& s = r.slot[id];
  switch (d.kind) {
  case Kind::choice:
  case Kind::path:
  case Kind::log_path:
  case Kind::rules:
  case Kind::profile:
    snprintf(val, vlen, "%s", s.str != nullptr ? s.str : "");
    break;
  default:
    snprintf(val, vlen, "%llu", static_cast<unsigned long long>(s.num));
  }
  switch (s.origin) {
  case Origin::dflt:
    snprintf(origin, olen, "default");
    break;
  case Origin::profile:
    snprintf(origin, olen, "profile %s", r.slot[kPROFILE].str);
    break;
  case Origin::file:
  case Origin::section:
    snprintf(origin, olen, "%s:%u", r.file, s.line);
    break;
  case Origin::env:
    snprintf(origin, olen, "environment");
    break;
  }
}

void print(const Resolved& r, int fd) {
  for (int i = 0; i < kCount; ++i) {
    char val[300], origin[300], left[600];
    format(r, static_cast<Id>(i), val, sizeof val, origin, sizeof origin);
    snprintf(left, sizeof left, "%s=%s", kDecls[i].name, val);
    dprintf(fd, "%-44s %s\n", left, origin);
  }
}

} // namespace xp::settings
