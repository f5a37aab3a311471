#include "preload/config.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <type_traits>

namespace xp {
namespace {

using settings::Kind;
using settings::Slot;

// One setting's value into its field, by the field's type.
template <class T> void store(T& field, const Slot& s, Kind kind) {
  if constexpr (std::is_same_v<T, bool>) {
    field = s.num != 0;
  } else if constexpr (std::is_enum_v<T>) {
    field = static_cast<T>(s.num);
  } else if constexpr (std::is_integral_v<T>) {
    field = static_cast<T>(kind == Kind::kib ? s.num << 10 : s.num);
  } else if constexpr (std::is_same_v<T, RuleSet>) {
    char err[300];
    if (!parse_rules(s.str, &field, err, sizeof err)) field.count = 0; // checked while resolving
  } else {
    static_assert(std::is_array_v<T>, "a setting's field: bool, number, enum, text or rules");
    snprintf(field, sizeof field, "%s", s.str != nullptr ? s.str : "");
  }
}

const char* env_only(const char* name, void* ctx) {
  auto* p = static_cast<std::pair<EnvLookup, void*>*>(ctx);
  return p->first(name, p->second);
}

} // namespace

bool check_rules(const char* text, char* err, size_t errlen) {
  RuleSet rs;
  return parse_rules(text, &rs, err, errlen);
}

bool parse_config(const settings::Sources& src, settings::Resolved* r, Config* cfg) {
  *cfg = Config{};
  cfg->valid = settings::resolve(src, r);
#define XP_SETTING(id, kind, dflt, lo, hi, choices, scope, field, help)                            \
  store(cfg->field, r->slot[settings::k##id], Kind::kind);
#include "common/settings.def"
  if (!cfg->valid) cfg->enabled = false;
  return cfg->valid;
}

bool parse_config(EnvLookup lookup, void* lookup_ctx, ErrorReport report, void* report_ctx,
                  Config* cfg) {
  std::pair<EnvLookup, void*> env{lookup, lookup_ctx};
  settings::Sources src;
  src.env = env_only;
  src.env_ctx = &env;
  src.check_rules = check_rules;
  src.report = report;
  src.report_ctx = report_ctx;
  auto r = std::make_unique<settings::Resolved>();
  return parse_config(src, r.get(), cfg);
}

void apply_secure_execution(Config* cfg) {
  cfg->enabled = false;
  cfg->alloc = false;
  cfg->log_file[0] = '\0';
  cfg->stats_file[0] = '\0';
  cfg->stats_live = false;
}

} // namespace xp
