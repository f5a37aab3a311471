// See startup_checks.h.
#include "stream/startup_checks.h"

#include <cstdio>
#include <cstring>
#include <sys/resource.h>
#include <unistd.h>

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

uint64_t memlock_needed(const EngineParams& p) {
  return uint64_t{p.channels_per_peer} * 2 * p.ring_bytes;
}

bool memlock_advice(uint64_t limit, uint64_t need, bool cap_ipc_lock, char* out, size_t n) {
  if (cap_ipc_lock || limit == RLIM_INFINITY || limit >= need) return false;
  snprintf(out, n,
           "RLIMIT_MEMLOCK is %llu KiB, below the %llu KiB one peer's RDMA channels register: "
           "connections may stay on TCP (resources_exhausted). Raise it: ulimit -l unlimited, "
           "systemd LimitMEMLOCK=infinity, docker run --ulimit memlock=-1",
           static_cast<unsigned long long>(limit >> 10),
           static_cast<unsigned long long>(need >> 10));
  return true;
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
  char advice[320];
  if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 &&
      memlock_advice(rl.rlim_cur, memlock_needed(p), has_cap_ipc_lock(), advice, sizeof advice))
    XP_SLOG(XP_SLOG_WARN, "%s", advice);
}

} // namespace xp::stream
