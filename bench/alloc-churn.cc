// Allocator churn benchmark: threads allocate, touch and free blocks of
// random sizes (most between the threshold and 1 MiB, some small, a few
// large), keeping a bounded live set each.  Prints operations per second
// (wall clock, and per CPU second of the process: user + system, which a
// loaded host disturbs less) and the resident set (peak and at the end).  Run it plainly (glibc
// malloc) and under LD_PRELOAD=build/libxpress.so (the hooked allocator);
// bench/alloc-churn.sh does both, interleaved, and prints the ratios.
//
//   alloc-churn [--threads N] [--ops N] [--live N] [--seed N]
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sys/resource.h>
#include <thread>
#include <vector>

namespace {

struct Options {
  int threads = 2;
  long ops = 200000; // per thread
  int live = 64;     // blocks each thread keeps
  unsigned seed = 1;
};

// Sizes: 30% small (64 B .. 16 KiB), 60% medium (16 KiB .. 1 MiB), 10%
// large (1 .. 8 MiB); each block's pages are touched once (first and last
// byte of every page), as a program filling a buffer would.
size_t pick(std::mt19937_64& rng) {
  unsigned r = rng() % 100;
  if (r < 30) return 64 + rng() % (16 << 10);
  if (r < 90) return (16 << 10) + rng() % (1 << 20);
  return (1 << 20) + rng() % (7 << 20);
}

void touch(void* p, size_t n) {
  auto* b = static_cast<volatile uint8_t*>(p);
  for (size_t i = 0; i < n; i += 4096)
    b[i] = 1;
  b[n - 1] = 1;
}

long rss_kb(const char* field) {
  FILE* f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long v = -1;
  size_t fl = strlen(field);
  while (fgets(line, sizeof line, f))
    if (strncmp(line, field, fl) == 0) v = atol(line + fl);
  fclose(f);
  return v;
}

} // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--threads"))
      o.threads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--ops"))
      o.ops = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--live"))
      o.live = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--seed"))
      o.seed = static_cast<unsigned>(atoi(argv[i + 1]));
    else {
      fprintf(stderr, "usage: alloc-churn [--threads N] [--ops N] [--live N] [--seed N]\n");
      return 2;
    }
  }
  std::atomic<long> failures{0};
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> ts;
  for (int t = 0; t < o.threads; ++t) {
    ts.emplace_back([&, t] {
      std::mt19937_64 rng(o.seed * 7919 + static_cast<unsigned>(t));
      std::vector<void*> live(static_cast<size_t>(o.live), nullptr);
      std::vector<size_t> sizes(live.size(), 0);
      for (long i = 0; i < o.ops; ++i) {
        size_t k = rng() % live.size();
        if (live[k]) {
          free(live[k]);
          live[k] = nullptr;
          continue;
        }
        size_t n = pick(rng);
        switch (rng() % 8) {
        case 0:
          live[k] = calloc(1, n);
          break;
        case 1:
          live[k] = realloc(malloc(n / 2 + 1), n);
          break;
        default:
          live[k] = malloc(n);
          break;
        }
        if (!live[k]) {
          failures++;
          continue;
        }
        touch(live[k], n);
      }
      for (void* p : live)
        free(p);
    });
  }
  for (auto& t : ts)
    t.join();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double ops = static_cast<double>(o.ops) * o.threads / secs;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  double cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
               static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  printf("{\"threads\":%d,\"ops\":%ld,\"live\":%d,\"seconds\":%.3f,\"ops_per_sec\":%.0f,"
         "\"cpu_seconds\":%.3f,\"ops_per_cpu_sec\":%.0f,"
         "\"peak_rss_kb\":%ld,\"end_rss_kb\":%ld,\"failures\":%ld}\n",
         o.threads, o.ops, o.live, secs, ops, cpu, static_cast<double>(o.ops) * o.threads / cpu,
         rss_kb("VmHWM:"), rss_kb("VmRSS:"), failures.load());
  return failures.load() == 0 ? 0 : 1;
}
