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

// Locked memory one peer's channels need at these settings: each channel
// registers its receive ring and a staging mirror of the peer's ring.
uint64_t memlock_needed(const EngineParams& p);

// The warning for a limit below need (limit ~0: unlimited), with the fix,
// into out; false (out untouched) when the limit suffices or the process
// may lock without limit.  Pure, for the tests.
bool memlock_advice(uint64_t limit, uint64_t need, bool cap_ipc_lock, char* out, size_t n);

// Whether a device lookup already ran and found one (never loads rdma-core):
// for the exit hint.
bool rdma_device_found();

// Logs the start-up lines: at info, every device's ports (name, port state,
// link layer, GID count); the locked-memory check.
void log_startup_checks(const EngineParams& p);

} // namespace xp::stream
