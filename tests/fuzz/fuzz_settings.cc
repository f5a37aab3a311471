// libFuzzer target: the configuration file (common/settings.h), bytes the
// user naming XPRESS_CONFIG chooses.  Whatever they are, resolving stays
// within its buffer, and a file that resolves leaves every number within
// its declared range.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "common/settings.h"

namespace {
const uint8_t* g_data;
size_t g_size;
xp::settings::Resolved g_r;
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace xp::settings;
  g_data = data;
  g_size = size;
  Sources src;
  src.read = [](const char*, char* buf, size_t cap) -> long {
    if (g_size > cap) return -27; // EFBIG
    memcpy(buf, g_data, g_size);
    return static_cast<long>(g_size);
  };
  src.program = "redis-server";
  src.report = [](const char* line, void*) {
    if (strchr(line, '\n') != nullptr) abort(); // one line each
  };
  bool ok = resolve(src, &g_r);
  if (!ok) return 0;
  for (int i = 0; i < kCount; ++i) {
    const Decl& d = kDecls[i];
    const Slot& s = g_r.slot[i];
    bool number = d.kind == Kind::count || d.kind == Kind::kib || d.kind == Kind::ms ||
                  d.kind == Kind::us || d.kind == Kind::bytes;
    if (number && (s.num < d.lo || s.num > d.hi)) abort();
    if (d.kind == Kind::flag && s.num > 1) abort();
  }
  return 0;
}
