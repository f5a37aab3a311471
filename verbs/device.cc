#include "verbs/device.h"

#include <atomic>
#include <cstdio>

#include "verbs/rdma_lib.h"

namespace xp::verbs {
using detail::ibv;
namespace {
// -1 unknown, 0 none, 1 present.
std::atomic<int> g_present{-1};
} // namespace

bool device_present() {
  int v = g_present.load(std::memory_order_acquire);
  if (__builtin_expect(v >= 0, 1)) return v == 1;
  int n = 0;
  // rdma-core is loaded here, the first time a connection could use it.
  ibv_device** list = detail::rdma_loaded() ? ibv().get_device_list(&n) : nullptr;
  if (list != nullptr) ibv().free_device_list(list);
  v = (list != nullptr && n > 0) ? 1 : 0;
  g_present.store(v, std::memory_order_release);
  return v == 1;
}

void device_names(char* out, unsigned n) {
  if (n == 0) return;
  out[0] = '\0';
  int count = 0;
  ibv_device** list = detail::rdma_loaded() ? ibv().get_device_list(&count) : nullptr;
  if (list == nullptr) return;
  unsigned o = 0;
  for (int i = 0; i < count && o + 1 < n; ++i) {
    int w = snprintf(out + o, n - o, "%s%s", i ? "," : "", ibv().get_device_name(list[i]));
    if (w < 0) break;
    o += static_cast<unsigned>(w);
  }
  ibv().free_device_list(list);
}

void reset_device_cache() {
  g_present.store(-1, std::memory_order_release);
}

void fresh_cm_for_fork_child() {
  detail::fresh_cm_asked();
}

} // namespace xp::verbs
