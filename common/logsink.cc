#include "common/logsink.h"

namespace xp::logsink {

std::atomic<Writer> g_writer{nullptr};
std::atomic<int> g_level{-1};

void install(Writer w, int level) {
  g_writer.store(w, std::memory_order_release);
  g_level.store(level, std::memory_order_release);
}

void emit(int level, const char* fmt, ...) {
  Writer w = g_writer.load(std::memory_order_acquire);
  if (w == nullptr) return;
  va_list ap;
  va_start(ap, fmt);
  w(level, fmt, ap);
  va_end(ap);
}

} // namespace xp::logsink
