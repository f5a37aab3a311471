// See startup_checks.h.
#include "stream/startup_checks.h"

#include <cstdio>
#include <cstring>
#include <sys/resource.h>
#include <unistd.h>

#include "alloc/arena.h"
#include "alloc/heap.h"
#include "alloc/reg_cache.h"
#include "common/logsink.h"
#include "verbs/device.h"

namespace xp::stream {
namespace {

// CAP_IPC_LOCK in the effective set (/proc/self/status, CapEff).
bool has_cap_ipc_lock() {
  FILE* f = fopen("/proc/self/status", "re");
  if (f == nullptr) return false;
  char line[256];
  unsigned long long eff = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "CapEff: %llx", &eff) == 1) break;
  fclose(f);
  return (eff >> 14) & 1; // CAP_IPC_LOCK
}

} // namespace

MemlockNeed memlock_needed(const EngineParams& p, bool arenas, uint64_t cache_max) {
  MemlockNeed need;
  need.rings = uint64_t{p.channels_per_peer} * 2 * p.ring_bytes;
  need.zero_copy = p.zerocopy && arenas ? cache_max + alloc::arena::kChunk : 0;
  return need;
}

int memlock_advice(uint64_t limit, const MemlockNeed& need, bool cap_ipc_lock, char* out,
                   size_t n) {
  const uint64_t all = need.rings + need.zero_copy;
  if (cap_ipc_lock || limit == RLIM_INFINITY || limit >= all) return 0;
  const auto kib = [](uint64_t b) { return static_cast<unsigned long long>(b >> 10); };
  static constexpr const char* kFix =
      "Raise it: ulimit -l unlimited, systemd LimitMEMLOCK=infinity, docker run --ulimit "
      "memlock=-1";
  if (limit < need.rings) {
    snprintf(out, n,
             "RLIMIT_MEMLOCK is %llu KiB, below the %llu KiB one peer's RDMA channels register: "
             "connections may stay on TCP (resources_exhausted); zero-copy sends may pin %llu KiB "
             "more. %s",
             kib(limit), kib(need.rings), kib(need.zero_copy), kFix);
    return XP_SLOG_WARN;
  }
  snprintf(out, n,
           "RLIMIT_MEMLOCK is %llu KiB: enough for one peer's RDMA channels (%llu KiB), below the "
           "%llu KiB zero-copy sends may pin with them (registration cache, arena chunks): large "
           "sends may copy instead. %s",
           kib(limit), kib(need.rings), kib(all), kFix);
  return XP_SLOG_INFO;
}

bool rdma_device_found() {
  return verbs::device_found();
}

void log_startup_checks(const EngineParams& p) {
  // Opening each device for its ports costs milliseconds: only for the line.
  if (logsink::g_level.load(std::memory_order_relaxed) >= XP_SLOG_INFO) {
    char devs[512];
    verbs::describe_devices(devs, sizeof devs);
    XP_SLOG(XP_SLOG_INFO, "RDMA devices: %s", devs[0] ? devs : "none");
  }
  rlimit rl{};
  char advice[512];
  if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0) return;
  const MemlockNeed need =
      memlock_needed(p, alloc::heap::hook_enabled(), alloc::reg_cache::max_bytes());
  // Zero-copy sends that do not fit still work (they copy): that one is
  // at info, so that a stock limit (8 MiB on Debian) puts no line on every
  // program's stderr.
  const int level = memlock_advice(rl.rlim_cur, need, has_cap_ipc_lock(), advice, sizeof advice);
  if (level != 0) XP_SLOG(level, "%s", advice);
}

} // namespace xp::stream
