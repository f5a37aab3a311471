// The engine's start-up checks (stream/startup_checks.h): the locked-memory
// warning comes exactly when registrations would hit the limit.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <sys/resource.h>

#include "alloc/arena.h"
#include "alloc/reg_cache.h"
#include "common/logsink.h"
#include "stream/startup_checks.h"
#include "verbs/device.h"

using namespace xp::stream;

TEST_CASE("start-up: RLIMIT_MEMLOCK below what one peer's channels register is reported") {
  EngineParams p;
  p.channels_per_peer = 4;
  p.ring_bytes = 512 << 10;
  p.zerocopy = false; // the rings alone
  const MemlockNeed need = memlock_needed(p, true, 256 << 20);
  CHECK(need.rings == 4u * 2 * (512 << 10));
  CHECK(need.zero_copy == 0);
  char out[512] = "";
  CHECK(memlock_advice(64 << 10, need, false, out, sizeof out) == XP_SLOG_WARN); // docker's old
  CHECK(strstr(out, "RLIMIT_MEMLOCK is 64 KiB") != nullptr);
  CHECK(strstr(out, "ulimit -l unlimited") != nullptr);
  out[0] = '\0';
  CHECK(memlock_advice(8 << 20, need, false, out, sizeof out) == 0); // Debian's default: enough
  CHECK(memlock_advice(RLIM_INFINITY, need, false, out, sizeof out) == 0);
  CHECK(memlock_advice(64 << 10, need, true, out, sizeof out) == 0); // CAP_IPC_LOCK: no limit
  CHECK(out[0] == '\0');
}

TEST_CASE("start-up: the locked-memory check counts what zero-copy sends may pin") {
  EngineParams p;
  p.channels_per_peer = 4;
  p.ring_bytes = 512 << 10;
  p.zerocopy = true;
  const uint64_t cache = 256u << 20;
  // The registration cache's bound and one arena chunk; nothing without the
  // hooked allocator, which the cache needs too.
  CHECK(memlock_needed(p, false, cache).zero_copy == 0);
  const MemlockNeed need = memlock_needed(p, true, cache);
  CHECK(need.zero_copy == cache + xp::alloc::arena::kChunk);
  // The rings fit, zero-copy sends do not: said at info (they copy).
  char out[512] = "";
  CHECK(memlock_advice(8 << 20, need, false, out, sizeof out) == XP_SLOG_INFO);
  CHECK(strstr(out, "RLIMIT_MEMLOCK is 8192 KiB") != nullptr);
  CHECK(strstr(out, "below the 270336 KiB zero-copy sends may pin with them") != nullptr);
  CHECK(strstr(out, "ulimit -l unlimited") != nullptr);
  // Short of the rings: a warning that names both.
  CHECK(memlock_advice(1 << 20, need, false, out, sizeof out) == XP_SLOG_WARN);
  CHECK(strstr(out, "below the 4096 KiB one peer's RDMA channels register") != nullptr);
  CHECK(strstr(out, "may pin 266240 KiB more") != nullptr);
  // Enough for all of it, unlimited, or CAP_IPC_LOCK: nothing.
  CHECK(memlock_advice(need.rings + need.zero_copy, need, false, out, sizeof out) == 0);
  CHECK(memlock_advice(RLIM_INFINITY, need, false, out, sizeof out) == 0);
  CHECK(memlock_advice(1 << 20, need, true, out, sizeof out) == 0);
  // The cache's current bound is the one counted.
  xp::alloc::reg_cache::set_limits(128, size_t{100} << 20);
  CHECK(xp::alloc::reg_cache::max_bytes() == size_t{100} << 20);
  xp::alloc::reg_cache::set_limits(128, cache);
}

TEST_CASE("start-up: the engine's device line gives each port's state, link layer and GIDs") {
  char out[160];
  unsigned at = 0;
  out[0] = '\0';
  xp::verbs::format_port(out, sizeof out, &at, "rxe0", 1, 4, 2, 2);    // active, Ethernet
  xp::verbs::format_port(out, sizeof out, &at, "mlx5_0", 1, 1, 1, 1);  // down, InfiniBand
  xp::verbs::format_port(out, sizeof out, &at, "mlx4_0", 2, 9, 0, -1); // unknown state, GIDs
  CHECK(std::string(out) == "rxe0 port 1 active Ethernet 2 GIDs, mlx5_0 port 1 down InfiniBand "
                            "1 GID, mlx4_0 port 2 unknown InfiniBand ? GIDs");
  CHECK(at == strlen(out));
  // A full buffer is cut, never overrun.
  char small[20];
  at = 0;
  small[0] = '\0';
  xp::verbs::format_port(small, sizeof small, &at, "rxe0", 1, 4, 2, 2);
  xp::verbs::format_port(small, sizeof small, &at, "rxe1", 1, 4, 2, 2);
  CHECK(strlen(small) == sizeof small - 1);
  CHECK(at == sizeof small - 1);
}
