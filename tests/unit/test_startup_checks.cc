// The engine's start-up checks (stream/startup_checks.h): the locked-memory
// warning comes exactly when registrations would hit the limit.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <sys/resource.h>

#include "stream/startup_checks.h"
#include "verbs/device.h"

using namespace xp::stream;

TEST_CASE("start-up: RLIMIT_MEMLOCK below what one peer's channels register is reported") {
  EngineParams p;
  p.channels_per_peer = 4;
  p.ring_bytes = 512 << 10;
  const uint64_t need = memlock_needed(p);
  CHECK(need == 4u * 2 * (512 << 10));
  char out[320] = "";
  CHECK(memlock_advice(64 << 10, need, false, out, sizeof out)); // docker's old default
  CHECK(strstr(out, "RLIMIT_MEMLOCK is 64 KiB") != nullptr);
  CHECK(strstr(out, "ulimit -l unlimited") != nullptr);
  out[0] = '\0';
  CHECK(!memlock_advice(8 << 20, need, false, out, sizeof out)); // Debian's default: enough
  CHECK(!memlock_advice(RLIM_INFINITY, need, false, out, sizeof out));
  CHECK(!memlock_advice(64 << 10, need, true, out, sizeof out)); // CAP_IPC_LOCK: no limit
  CHECK(out[0] == '\0');
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
