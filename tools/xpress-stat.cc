// xpress-stat: live statistics of running xpress processes, read from their
// /dev/shm/xpress-<uid>/<pid>.stats files (XPRESS_STATS_LIVE=1; like smcss /
// vma_stats).
//
//   xpress-stat                 one line per process
//   xpress-stat PID             that process's full table (connections, reasons, rows)
//   xpress-stat --json [PID]    the same as JSON
//   xpress-stat -w SECONDS ...  repeat every SECONDS until interrupted
//   xpress-stat -z PID          reset its counters; -l LEVEL PID: its log level
//   xpress-stat --print-config [PROGRAM]
//                               the settings a program of that name started
//                               now would get, and where each came from
// Files of processes that no longer exist are removed on the way.
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <memory>
#include <sys/mman.h>
#include <unistd.h>

#include "preload/config.h"
#include "preload/stats.h"

using namespace xp;

// No start-up of its own (preload/lifecycle.cc): this is a tool.
extern "C" {
bool xp_tool_process = true;
}

namespace {

void usage() {
  fprintf(stderr, "usage: xpress-stat [--json] [-w SECONDS] [PID]\n"
                  "       xpress-stat -z PID | -l LEVEL PID | -z -l LEVEL PID\n"
                  "       xpress-stat --print-config [PROGRAM]\n"
                  "  no PID: one line per process running with xpress\n"
                  "  PID:    that process's counters, fallback reasons and open connections\n"
                  "  -z:     reset that process's counters (open connections stay)\n"
                  "  -l:     set its log level (error, warn, info, debug, trace)\n"
                  "  --print-config: every setting's value for PROGRAM (a name or path)\n"
                  "          started now with this environment, and where it came from\n");
}

// What the library would resolve in a process named program started with
// this environment (preload/lifecycle.cc does the same).  Exit status 1
// when some value or line is rejected (the process would pass through).
int print_config(const char* program) {
  const char* base = strrchr(program, '/');
  settings::Sources src;
  src.env = [](const char* name, void*) -> const char* { return getenv(name); };
  src.read = settings::read_file;
  src.program = base != nullptr ? base + 1 : program;
  src.check_rules = check_rules;
  src.report = [](const char* line, void*) { fprintf(stderr, "%s\n", line); };
  auto r = std::make_unique<settings::Resolved>();
  Config cfg;
  bool ok = parse_config(src, r.get(), &cfg);
  // A file the program may not read (permissions, a sandbox) is ignored.
  char none[400] = "none";
  if (r->file_error != 0 && r->file_error != ENOENT)
    snprintf(none, sizeof none, "none (%s cannot be read: %s; ignored)",
             r->slot[settings::kCONFIG].str, strerror(r->file_error));
  printf("# program '%s', configuration file %s%s\n", src.program, r->file[0] ? r->file : none,
         ok ? "" : "; invalid: xpress would pass everything through");
  fflush(stdout);
  settings::print(*r, STDOUT_FILENO);
  return ok ? 0 : 1;
}

// Reads a consistent-enough snapshot (counters are independent; no lock):
// the block, then the registered-memory counters after its pages.
bool load_path(const char* path, StatsBlock* out, alloc::MemStats* mem) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  ssize_t n = read(fd, static_cast<void*>(out), sizeof *out);
  ssize_t m = pread(fd, static_cast<void*>(mem), sizeof *mem, stats::kMemStatsOffset);
  close(fd);
  return n == static_cast<ssize_t>(sizeof *out) && m == static_cast<ssize_t>(sizeof *mem) &&
         memcmp(out->magic, kStatsMagic, 8) == 0 && out->version == kStatsVersion;
}

bool alive(int pid) {
  return kill(pid, 0) == 0 || errno == EPERM;
}

// Calls fn(path, pid) for every live file this user may read: each user's
// files are in /dev/shm/xpress-<uid>/ (mode 0700: root sees everyone's).
// Files of processes that are gone (killed) are removed.
template <typename Fn> void for_each_live(Fn fn) {
  DIR* top = opendir("/dev/shm");
  if (top == nullptr) return;
  while (dirent* u = readdir(top)) {
    unsigned uid = 0;
    char tail = 0;
    if (sscanf(u->d_name, "xpress-%u%c", &uid, &tail) != 1) continue;
    char dir[64];
    stats::live_dir(uid, dir, sizeof dir);
    DIR* d = opendir(dir);
    if (d == nullptr) continue;
    while (dirent* e = readdir(d)) {
      int pid = 0;
      char end[8] = "";
      if (sscanf(e->d_name, "%d.%7s", &pid, end) != 2 || strcmp(end, "stats") != 0) continue;
      char path[128];
      stats::live_path(uid, pid, path, sizeof path);
      if (!alive(pid)) {
        unlink(path);
        continue;
      }
      fn(path, pid);
    }
    closedir(d);
  }
  closedir(top);
}

// The live file of pid: this user's own first, then any this user can read.
bool find_path(int pid, char* path, size_t n) {
  stats::live_path(static_cast<unsigned>(geteuid()), pid, path, n);
  if (access(path, R_OK) == 0) return true;
  bool found = false;
  for_each_live([&](const char* p, int k) {
    if (!found && k == pid) {
      snprintf(path, n, "%s", p);
      found = true;
    }
  });
  return found;
}

bool load(int pid, StatsBlock* out, alloc::MemStats* mem) {
  char path[128];
  return find_path(pid, path, sizeof path) && load_path(path, out, mem);
}

// -z / -l: leave a request in the process's block and wait up to 2 s for
// the process to take it (preload/stats.h).
int send_request(int pid, uint32_t req) {
  char path[128];
  int fd = find_path(pid, path, sizeof path) ? open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW) : -1;
  if (fd < 0) {
    fprintf(stderr, "xpress-stat: no live statistics of pid %d to change\n", pid);
    return 1;
  }
  void* m = mmap(nullptr, sizeof(StatsBlock), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    perror("xpress-stat: mmap");
    return 1;
  }
  auto* b = static_cast<StatsBlock*>(m);
  int rc = 0;
  if (memcmp(b->magic, kStatsMagic, 8) != 0 || b->version != kStatsVersion) {
    fprintf(stderr, "xpress-stat: pid %d runs another version of xpress\n", pid);
    rc = 1;
  } else {
    b->request.fetch_or(req);
    bool taken = false;
    for (int i = 0; i < 200 && !taken; ++i) {
      taken = b->request.load() == 0;
      if (!taken) usleep(10000);
    }
    printf("pid %d: %s\n", pid,
           taken ? "done" : "requested (taken at the process's next tick or new connection)");
  }
  munmap(m, sizeof(StatsBlock));
  return rc;
}

int list_all(bool json) {
  auto b = std::make_unique<StatsBlock>();
  auto mem = std::make_unique<alloc::MemStats>();
  if (!json)
    printf("%7s %-16s %8s %8s %14s %14s  %s\n", "pid", "program", "rdma", "tcp", "rdma_bytes",
           "tcp_bytes", "tcp reasons");
  else
    printf("[");
  bool first = true;
  for_each_live([&](const char* path, int) {
    if (!load_path(path, b.get(), mem.get())) return;
    const Counters& c = b->c;
    stats::Totals t;
    stats::totals(*b, &t);
    auto g = [](const Counter& x) { return static_cast<unsigned long>(x.load()); };
    if (json) {
      printf("%s", first ? "" : ",");
      fflush(stdout);
      stats::dump(stdout, *b, true, mem.get());
    } else {
      char reasons[256] = "";
      size_t off = 0;
      for (int r = 1; r < static_cast<int>(Reason::count); ++r)
        if (g(c.fallbacks[r]) && off < sizeof reasons)
          off +=
              static_cast<size_t>(snprintf(reasons + off, sizeof reasons - off, "%s=%lu ",
                                           reason_name(static_cast<Reason>(r)), g(c.fallbacks[r])));
      // tcp_bytes: every byte that crossed on TCP, the upgraded
      // connections' bytes before their switch included.
      printf("%7d %-16s %8lu %8lu %14lu %14lu  %s\n", b->pid, b->comm, g(c.connections[1]),
             g(c.connections[0]), t.bytes_tx[1] + t.bytes_rx[1],
             t.bytes_tx[0] + t.bytes_rx[0] + t.tx_before_switch + t.rx_before_switch, reasons);
    }
    first = false;
  });
  if (json) printf("]\n");
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  bool json = false;
  int watch = 0, pid = 0, level = -1;
  bool reset = false;
  if (argc >= 2 && strcmp(argv[1], "--print-config") == 0) {
    if (argc > 3) {
      usage();
      return 2;
    }
    return print_config(argc == 3 ? argv[2] : "");
  }
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (strcmp(argv[i], "-z") == 0) {
      reset = true;
    } else if (strcmp(argv[i], "-l") == 0 && i + 1 < argc) {
      static const char* const names[] = {"error", "warn", "info", "debug", "trace"};
      const char* v = argv[++i];
      for (int k = 0; k < 5; ++k)
        if (strcmp(v, names[k]) == 0 || (v[0] == '0' + k && v[1] == '\0')) level = k;
      if (level < 0) {
        usage();
        return 2;
      }
    } else if (strcmp(argv[i], "-w") == 0 && i + 1 < argc) {
      watch = atoi(argv[++i]);
      if (watch <= 0) {
        usage();
        return 2;
      }
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage();
      return 0;
    } else if (argv[i][0] != '-' && (pid = atoi(argv[i])) > 0) {
    } else {
      usage();
      return 2;
    }
  }
  if (reset || level >= 0) {
    if (pid == 0 || watch != 0 || json) {
      usage();
      return 2;
    }
    uint32_t req = reset ? kRequestReset : 0;
    if (level >= 0) req |= kRequestLevel | (static_cast<uint32_t>(level) << kRequestLevelShift);
    return send_request(pid, req);
  }
  auto b = std::make_unique<StatsBlock>();
  auto mem = std::make_unique<alloc::MemStats>();
  while (true) {
    if (pid == 0) {
      int rc = list_all(json);
      if (rc) return rc;
    } else if (!load(pid, b.get(), mem.get())) {
      fprintf(stderr,
              "xpress-stat: no live statistics for pid %d (not running under xpress, "
              "XPRESS_STATS_LIVE=1 not set, another user's process, or no TCP socket yet)\n",
              pid);
      return 1;
    } else {
      stats::dump(stdout, *b, json, mem.get());
    }
    if (watch == 0) return 0;
    fflush(stdout);
    sleep(static_cast<unsigned>(watch));
    if (!json) printf("\n");
  }
}
