// The engine's start-up checks (stream/startup_checks.h): the locked-memory
// warning comes exactly when registrations would hit the limit.
#include <doctest/doctest.h>

#include <cstring>
#include <sys/resource.h>

#include "stream/startup_checks.h"

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
