#include "verbs/rdma_lib.h"

#include <atomic>
#include <dlfcn.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/logsink.h"

namespace xp::verbs::detail {
namespace {

Ibv g_ibv;
RdmaCm g_rdmacm;

// 0 not tried, kLoaded or kMissing when decided; while a thread loads, the
// pid of its process.  A fork child whose parent was loading at the fork
// sees another process's pid there: no thread of its own will finish that
// load, so it starts over rather than wait forever.
constexpr long kLoaded = -1, kMissing = -2;
std::atomic<long> g_state{0};

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
  // The libraries stay loaded either way (never dlclose'd: a half-resolved
  // table is simply never used).
  return ok;
}

} // namespace

bool rdma_loaded() {
  while (true) {
    long s = g_state.load(std::memory_order_acquire);
    if (__builtin_expect(s == kLoaded, 1)) return true;
    if (s == kMissing) return false;
    long self = ::syscall(SYS_getpid);
    if (s == 0) {
      if (!g_state.compare_exchange_strong(s, self, std::memory_order_acq_rel)) continue;
      bool ok = load();
      g_state.store(ok ? kLoaded : kMissing, std::memory_order_release);
      return ok;
    }
    if (s == self)
      sched_yield(); // another thread of ours is loading: it does not block for long
    else
      g_state.compare_exchange_strong(s, 0, std::memory_order_acq_rel);
  }
}

const Ibv& ibv() {
  return g_ibv;
}

const RdmaCm& rdmacm() {
  return g_rdmacm;
}

} // namespace xp::verbs::detail
