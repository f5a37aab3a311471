#include "verbs/rdma_lib.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/load_once.h"
#include "common/logsink.h"

namespace xp::verbs::detail {
namespace {

Ibv g_ibv;
RdmaCm g_rdmacm;
QueryGidTable g_query_gid_table = nullptr;

LoadOnce g_load;
// The file librdmacm was first loaded from (a fork child copies it).
char g_cm_path[512];
std::atomic<bool> g_fresh_asked{false};

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
  if (void* f = dlsym(cm_lib, "rdma_create_id")) {
    Dl_info di{};
    if (dladdr(f, &di) != 0 && di.dli_fname != nullptr)
      snprintf(g_cm_path, sizeof g_cm_path, "%s", di.dli_fname);
  }
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

// A private copy of librdmacm: the file copied into a memfd and loaded
// from there (another inode: the dynamic loader maps it anew, with its own
// globals; libibverbs, named by soname, stays the one already loaded).
void* load_copy() {
  if (g_cm_path[0] == '\0') return nullptr;
  const int in = static_cast<int>(syscall(SYS_openat, AT_FDCWD, g_cm_path, O_RDONLY | O_CLOEXEC));
  if (in < 0) return nullptr;
    // MFD_EXEC: under vm.memfd_noexec (Linux 6.3+) a memfd is otherwise not
    // executable and dlopen would fail; older kernels refuse the flag.
#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U
#endif
  int mfd = static_cast<int>(syscall(SYS_memfd_create, "xpress-rdmacm", MFD_CLOEXEC | MFD_EXEC));
  if (mfd < 0 && errno == EINVAL)
    mfd = static_cast<int>(syscall(SYS_memfd_create, "xpress-rdmacm", MFD_CLOEXEC));
  bool ok = mfd >= 0;
  char buf[16384];
  while (ok) {
    const ssize_t n = syscall(SYS_read, in, buf, sizeof buf);
    if (n == 0) break;
    ok = n > 0 && syscall(SYS_write, mfd, buf, n) == n;
  }
  syscall(SYS_close, in);
  void* h = nullptr;
  if (ok) {
    char p[64];
    snprintf(p, sizeof p, "/proc/self/fd/%d", mfd);
    h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
  }
  // The memfd stays open for the process's life (close-on-exec): the loader
  // knows the copy by its name, /proc/self/fd/N, and a later dlopen of the
  // same name (a grandchild's copy, were N free again) would get this one.
  if (h == nullptr && mfd >= 0) syscall(SYS_close, mfd);
  return h;
}

} // namespace

void fresh_cm_asked() {
  g_fresh_asked.store(true, std::memory_order_release);
}

bool fresh_rdmacm_if_asked() {
  if (!g_fresh_asked.exchange(false, std::memory_order_acq_rel)) return true;
  void* lib = load_copy();
  if (lib == nullptr) {
    XP_SLOG(XP_SLOG_INFO, "fork child: no private copy of librdmacm (%s): the inherited one serves",
            g_cm_path);
    return false;
  }
  RdmaCm t{};
  bool ok = true;
#define XP_RESOLVE(name, version) ok = resolve(lib, "rdma_" #name, version, &t.name) && ok;
  XP_RDMACM_FUNCTIONS(XP_RESOLVE)
#undef XP_RESOLVE
  if (ok) g_rdmacm = t;
  return ok;
}

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
