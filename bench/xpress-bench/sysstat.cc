// Resource readings from getrusage and /proc.
#include "sysstat.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace xb {

namespace {
uint64_t tv_ns(const timeval& tv) {
  return static_cast<uint64_t>(tv.tv_sec) * 1000000000ull +
         static_cast<uint64_t>(tv.tv_usec) * 1000ull;
}

CpuTimes usage(int who) {
  rusage ru{};
  CpuTimes t;
  if (getrusage(who, &ru) == 0) {
    t.user_ns = tv_ns(ru.ru_utime);
    t.sys_ns = tv_ns(ru.ru_stime);
  }
  return t;
}
} // namespace

CpuTimes process_cpu() {
  return usage(RUSAGE_SELF);
}
CpuTimes thread_cpu() {
  return usage(RUSAGE_THREAD);
}

uint64_t rss_kb() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long size = 0, resident = 0;
  int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) / 1024;
}

uint64_t tcp_mem_pages() {
  FILE* f = std::fopen("/proc/net/sockstat", "r");
  if (!f) return 0;
  char line[256];
  uint64_t pages = 0;
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, "TCP:", 4) != 0) continue;
    const char* m = std::strstr(line, " mem ");
    if (m) pages = std::strtoull(m + 5, nullptr, 10);
  }
  std::fclose(f);
  return pages;
}

std::string preload_env() {
  const char* p = std::getenv("LD_PRELOAD");
  return p ? p : "";
}

void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
  }
}

} // namespace xb
