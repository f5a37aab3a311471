#include "verbs/rdma_lib.h"

#include <dlfcn.h>

#include "common/load_once.h"
#include "common/logsink.h"

namespace xp::verbs::detail {
namespace {

Ibv g_ibv;
RdmaCm g_rdmacm;
QueryGidTable g_query_gid_table = nullptr;

LoadOnce g_load;

// One entry by name and version; false (and says which) when missing.
template <typename Fn> bool resolve(void* lib, const char* symbol, const char* version, Fn* out) {
  *out = reinterpret_cast<Fn>(dlvsym(lib, symbol, version));
  if (*out != nullptr) return true;
  XP_SLOG(XP_SLOG_INFO, "rdma-core: %s@%s not found: RDMA off (no_device)", symbol, version);
  return false;
}

void* open_lib(const char* soname) {
  // RTLD_LOCAL: the program's own symbol lookups never see them (unless it
  // links rdma-core itself, in which case this is the same copy).
  void* h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) XP_SLOG(XP_SLOG_INFO, "rdma-core: %s: RDMA off (no_device)", dlerror());
  return h;
}

bool load() {
  void* ibv_lib = open_lib("libibverbs.so.1");
  void* cm_lib = ibv_lib ? open_lib("librdmacm.so.1") : nullptr;
  if (cm_lib == nullptr) return false;
  bool ok = true;
#define XP_RESOLVE(name, version) ok = resolve(ibv_lib, "ibv_" #name, version, &g_ibv.name) && ok;
  XP_IBV_FUNCTIONS(XP_RESOLVE)
#undef XP_RESOLVE
#define XP_RESOLVE(name, version)                                                                  \
  ok = resolve(cm_lib, "rdma_" #name, version, &g_rdmacm.name) && ok;
  XP_RDMACM_FUNCTIONS(XP_RESOLVE)
#undef XP_RESOLVE
  g_query_gid_table =
      reinterpret_cast<QueryGidTable>(dlvsym(ibv_lib, "_ibv_query_gid_table", "IBVERBS_1.11"));
  // The libraries stay loaded either way (never dlclose'd: a half-resolved
  // table is simply never used).
  return ok;
}

} // namespace

bool rdma_loaded() {
  return g_load.get(load);
}

const Ibv& ibv() {
  return g_ibv;
}

const RdmaCm& rdmacm() {
  return g_rdmacm;
}

QueryGidTable query_gid_table() {
  return g_query_gid_table;
}

} // namespace xp::verbs::detail
