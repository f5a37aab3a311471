// What the engine logs once when it starts (the first connection that may
// use RDMA): the devices it found with their ports, and whether the locked-memory limit
// leaves room for the registered rings.  Registering memory (ibv_reg_mr)
// counts against RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK; the
// limit is the first thing RDMA users hit in containers (docker's default
// was 64 KiB), and registrations that fail leave connections on TCP.
#pragma once
#include <cstddef>
#include <cstdint>

#include "stream/engine_params.h"

namespace xp::stream {

// Locked memory this configuration lets one peer's connections pin.
struct MemlockNeed {
  // Each channel registers its receive ring and a staging mirror of the
  // peer's ring (XPRESS_CHANNELS_PER_PEER x 2 x XPRESS_RING_KB): short of
  // it, connections stay on TCP.
  uint64_t rings;
  // What zero-copy sends (XPRESS_ZEROCOPY) may pin besides: the
  // registration cache's bound (alloc/reg_cache.h) and the arena chunk a
  // send comes from (one at least: no setting bounds how many a program
  // sends from).  Short of it, those sends copy.  0 with zero copy or the
  // hooked allocator (XPRESS_ALLOC, which the cache needs too) off.
  uint64_t zero_copy;
};
MemlockNeed memlock_needed(const EngineParams& p, bool arenas, uint64_t cache_max);

// The line for a limit below need (limit ~0: unlimited), with the fix, into
// out: XP_SLOG_WARN when the rings do not fit, XP_SLOG_INFO when only
// zero-copy sends fall short (they still work, by copying); 0 (out
// untouched) when everything fits or the process may lock without limit.
// Pure, for the tests.
int memlock_advice(uint64_t limit, const MemlockNeed& need, bool cap_ipc_lock, char* out, size_t n);

// Whether a device lookup already ran and found one (never loads rdma-core):
// for the exit hint.
bool rdma_device_found();

// Logs the start-up lines: at info, every device's ports (name, port state,
// link layer, GID count); the locked-memory check.
void log_startup_checks(const EngineParams& p);

} // namespace xp::stream
