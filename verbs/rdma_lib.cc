#include "verbs/rdma_lib.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
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
// missing: instead of saying it, the first missing name is left there (a
// fork child's private copy: its caller says what follows).
template <typename Fn>
bool resolve(void* lib, const char* symbol, const char* version, Fn* out,
             const char** missing = nullptr) {
  *out = reinterpret_cast<Fn>(dlvsym(lib, symbol, version));
  if (*out != nullptr) return true;
  if (missing != nullptr) {
    if (*missing == nullptr) *missing = symbol;
  } else {
    XP_SLOG(XP_SLOG_INFO, "rdma-core: %s@%s not found: RDMA off (no_device)", symbol, version);
  }
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
// nullptr when it cannot be; *why then says which step failed and why.
void* load_copy(const char* path, char* why, size_t n) {
  if (path[0] == '\0') {
    snprintf(why, n, "the library's file is not known");
    return nullptr;
  }
  const int in = static_cast<int>(syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC));
  if (in < 0) {
    snprintf(why, n, "open %s: %s", path, strerror(errno));
    return nullptr;
  }
  // MFD_EXEC: under vm.memfd_noexec (Linux 6.3+) a memfd is otherwise not
  // executable and dlopen would fail; older kernels refuse the flag.
#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U
#endif
  int mfd = static_cast<int>(syscall(SYS_memfd_create, "xpress-rdmacm", MFD_CLOEXEC | MFD_EXEC));
  if (mfd < 0 && errno == EINVAL)
    mfd = static_cast<int>(syscall(SYS_memfd_create, "xpress-rdmacm", MFD_CLOEXEC));
  if (mfd < 0) snprintf(why, n, "memfd_create: %s", strerror(errno));
  bool ok = mfd >= 0;
  char buf[16384];
  while (ok) {
    const ssize_t r = syscall(SYS_read, in, buf, sizeof buf);
    if (r == 0) break;
    ok = r > 0 && syscall(SYS_write, mfd, buf, r) == r;
    if (!ok) snprintf(why, n, "copying %s: %s", path, r < 0 ? strerror(errno) : "short write");
  }
  syscall(SYS_close, in);
  void* h = nullptr;
  if (ok) {
    char p[64];
    snprintf(p, sizeof p, "/proc/self/fd/%d", mfd);
    h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* e = dlerror();
      snprintf(why, n, "dlopen of the copy of %s: %s", path, e ? e : "failed");
    }
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

bool fresh_rdmacm_from(const char* path) {
  char why[600];
  void* lib = load_copy(path, why, sizeof why);
  if (lib == nullptr) {
    XP_SLOG(XP_SLOG_INFO,
            "fork child: no private copy of librdmacm (%s): the inherited copy serves "
            "(docs/protocol.md §7)",
            why);
    return false;
  }
  RdmaCm t{};
  const char* missing = nullptr;
#define XP_RESOLVE(name, version) (void)resolve(lib, "rdma_" #name, version, &t.name, &missing);
  XP_RDMACM_FUNCTIONS(XP_RESOLVE)
#undef XP_RESOLVE
  if (missing != nullptr) {
    XP_SLOG(XP_SLOG_INFO,
            "fork child: the private copy of librdmacm (%s) has no %s: the inherited copy serves "
            "(docs/protocol.md §7)",
            path, missing);
    return false;
  }
  g_rdmacm = t;
  return true;
}

FreshCm fresh_rdmacm_if_asked() {
  if (!g_fresh_asked.exchange(false, std::memory_order_acq_rel)) return FreshCm::not_asked;
  return fresh_rdmacm_from(g_cm_path) ? FreshCm::copy : FreshCm::inherited;
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
