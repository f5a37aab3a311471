#include "verbs/device.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

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

bool device_found() {
  return g_present.load(std::memory_order_acquire) == 1;
}

void format_port(char* out, unsigned n, unsigned* at, const char* dev, unsigned port, int state,
                 int link_layer, int gids) {
  static const char* const kStates[] = {"nop", "down", "init", "armed", "active", "active_defer"};
  const char* st = state >= 0 && state < 6 ? kStates[state] : "unknown";
  // IBV_LINK_LAYER_UNSPECIFIED is what older drivers of InfiniBand ports say.
  const char* ll = link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand";
  if (*at >= n) return;
  char g[24];
  if (gids < 0)
    snprintf(g, sizeof g, "? GIDs");
  else
    snprintf(g, sizeof g, "%d GID%s", gids, gids == 1 ? "" : "s");
  int w =
      snprintf(out + *at, n - *at, "%s%s port %u %s %s %s", *at ? ", " : "", dev, port, st, ll, g);
  if (w < 0) return;
  *at = *at + static_cast<unsigned>(w) < n ? *at + static_cast<unsigned>(w) : n - 1;
}

namespace {
// The exported ibv_query_port fills the older, shorter layout that
// ibv_port_attr begins with (as <infiniband/verbs.h>'s inline wrapper
// passes it).
int query_port(ibv_context* ctx, unsigned port, ibv_port_attr* pa) {
  return ibv().query_port(ctx, static_cast<uint8_t>(port),
                          reinterpret_cast<_compat_ibv_port_attr*>(pa));
}

// Valid GIDs per port of one device (index: port number), or -1 each when
// they cannot be listed.
void count_gids(ibv_context* ctx, unsigned ports, int* gids, unsigned max_port) {
  for (unsigned p = 0; p <= max_port; ++p)
    gids[p] = -1;
  detail::QueryGidTable q = detail::query_gid_table();
  if (q == nullptr) return;
  size_t cap = 0;
  for (unsigned p = 1; p <= ports && p <= max_port; ++p) {
    ibv_port_attr pa{};
    if (query_port(ctx, p, &pa) == 0) cap += pa.gid_tbl_len;
  }
  if (cap == 0) return;
  auto* e = static_cast<ibv_gid_entry*>(calloc(cap, sizeof(ibv_gid_entry)));
  if (e == nullptr) return;
  ssize_t r = q(ctx, e, cap, 0, sizeof(ibv_gid_entry));
  if (r >= 0) {
    for (unsigned p = 0; p <= max_port; ++p)
      gids[p] = 0;
    for (ssize_t i = 0; i < r; ++i)
      if (e[i].port_num <= max_port) ++gids[e[i].port_num];
  }
  free(e);
}
} // namespace

void describe_devices(char* out, unsigned n) {
  if (n == 0) return;
  out[0] = '\0';
  int count = 0;
  ibv_device** list = detail::rdma_loaded() ? ibv().get_device_list(&count) : nullptr;
  if (list == nullptr) return;
  unsigned at = 0;
  for (int i = 0; i < count; ++i) {
    const char* name = ibv().get_device_name(list[i]);
    ibv_context* ctx = ibv().open_device(list[i]);
    ibv_device_attr da{};
    if (ctx == nullptr || ibv().query_device(ctx, &da) != 0) {
      if (at < n) {
        int w = snprintf(out + at, n - at, "%s%s (cannot be opened)", at ? ", " : "", name);
        if (w > 0) at = at + static_cast<unsigned>(w) < n ? at + static_cast<unsigned>(w) : n - 1;
      }
      if (ctx != nullptr) ibv().close_device(ctx);
      continue;
    }
    constexpr unsigned kMaxPort = 8;
    int gids[kMaxPort + 1];
    count_gids(ctx, da.phys_port_cnt, gids, kMaxPort);
    for (unsigned p = 1; p <= da.phys_port_cnt; ++p) {
      ibv_port_attr pa{};
      if (query_port(ctx, p, &pa) != 0) continue;
      format_port(out, n, &at, name, p, pa.state, pa.link_layer, p <= kMaxPort ? gids[p] : -1);
    }
    ibv().close_device(ctx);
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
