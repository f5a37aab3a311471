#include "preload/stats.h"
#include "common/fork_parts.h"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <initializer_list>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "preload/config.h"
#include "preload/log.h"
#include "stream/resume.h"
#include "stream/startup_checks.h"

namespace xp::stats {
namespace {

constexpr size_t kBlockBytes = kMemStatsOffset;
constexpr size_t kFileBytes = kBlockBytes + sizeof(alloc::MemStats);
std::atomic<bool> g_live{false};
std::atomic<uint32_t> g_slot_hint{0};

uint64_t unix_ms() {
  struct timespec ts {};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

int raw_pid() {
  return static_cast<int>(::syscall(SYS_getpid));
}

void fill_identity(StatsBlock* b) {
  memcpy(b->magic, kStatsMagic, sizeof b->magic);
  b->version = kStatsVersion;
  b->pid = raw_pid();
  b->slot_count = sw::kStatsConnSlots;
  b->started_unix_ms = unix_ms();
  int fd =
      static_cast<int>(::syscall(SYS_openat, AT_FDCWD, "/proc/self/comm", O_RDONLY | O_CLOEXEC));
  if (fd >= 0) {
    long n = ::syscall(SYS_read, fd, b->comm, sizeof b->comm - 1);
    if (n > 0 && b->comm[n - 1] == '\n') b->comm[n - 1] = '\0';
    ::syscall(SYS_close, fd);
  }
}

bool write_all(int fd, const void* data, size_t n, size_t at) {
  const char* p = static_cast<const char*>(data);
  size_t off = 0;
  while (off < n) {
    long w = ::syscall(SYS_pwrite64, fd, p + off, n - off, at + off);
    if (w <= 0) return false;
    off += static_cast<size_t>(w);
  }
  return true;
}

// The live file, created afresh in the caller's own directory (see
// live_dir): O_EXCL, so nobody else's file or link is ever opened, and mode
// 0600.  A stale file of an earlier process with this pid is replaced.
int create_live_file(int pid) {
  char dir[64], name[32];
  live_dir(static_cast<unsigned>(geteuid()), dir, sizeof dir);
  snprintf(name, sizeof name, "%d.stats", pid);
  ::syscall(SYS_mkdirat, AT_FDCWD, dir, 0700);
  int dfd = static_cast<int>(
      ::syscall(SYS_openat, AT_FDCWD, dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (dfd < 0) return -1;
  struct stat st {};
  int fd = -1;
  // Only a directory of our own that nobody else can enter.
  if (fstat(dfd, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
      (st.st_mode & 077) == 0) {
    const int flags = O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    fd = static_cast<int>(::syscall(SYS_openat, dfd, name, flags, 0600));
    if (fd < 0 && errno == EEXIST && ::syscall(SYS_unlinkat, dfd, name, 0) == 0)
      fd = static_cast<int>(::syscall(SYS_openat, dfd, name, flags, 0600));
  } else {
    errno = EPERM;
  }
  int saved = errno;
  ::syscall(SYS_close, dfd);
  errno = saved;
  return fd;
}

// The registered-memory counters' copy in the live file.  The allocator
// keeps its counters in private memory (it reads some of them to decide
// what to give back): the file only gets snapshots (on_tick).
std::atomic<alloc::MemStats*> g_live_mem{nullptr};
// The page read as counters (its tail past the last field is zero).
constexpr size_t kMemCounters = sizeof(alloc::MemStats) / sizeof(alloc::MemCounter);
using MemCounterArray = alloc::MemCounter[kMemCounters];

// Replace the block's pages in place by a MAP_SHARED mapping of a new file
// holding the same bytes (every pointer into them stays valid), and map the
// file's second part for the registered-memory snapshot.
bool map_live_file(StatsBlock* b) {
  int fd = create_live_file(b->pid);
  if (fd < 0) {
    XP_LOG(debug, "live statistics unavailable: cannot create the file: %s", strerror(errno));
    return false;
  }
  bool ok = false;
  alloc::MemStats* mem = &alloc::mem_stats();
  if (write_all(fd, b, kBlockBytes, 0) && write_all(fd, mem, sizeof *mem, kBlockBytes) &&
      mmap(b, kBlockBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) != MAP_FAILED) {
    ok = true;
    void* m = mmap(nullptr, sizeof *mem, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                   static_cast<off_t>(kBlockBytes));
    if (m != MAP_FAILED) {
      fork_parts::mark(fork_parts::kStats);
      g_live_mem.store(static_cast<alloc::MemStats*>(m));
    }
  } else {
    char path[128];
    live_path(static_cast<unsigned>(geteuid()), b->pid, path, sizeof path);
    ::syscall(SYS_unlink, path);
  }
  ::syscall(SYS_close, fd);
  return ok;
}

} // namespace

std::atomic<StatsBlock*> g_block{nullptr};

void live_dir(unsigned uid, char* out, size_t n) {
  snprintf(out, n, "/dev/shm/xpress-%u", uid);
}

void live_path(unsigned uid, int pid, char* out, size_t n) {
  snprintf(out, n, "/dev/shm/xpress-%u/%d.stats", uid, pid);
}

void take_requests() {
  StatsBlock* b = g_block.load(std::memory_order_acquire);
  if (b == nullptr || b->request.load(std::memory_order_relaxed) == 0) return;
  uint32_t r = b->request.exchange(0, std::memory_order_acq_rel);
  if (r & kRequestLevel) {
    auto l = static_cast<LogLevel>((r >> kRequestLevelShift) & 0xff);
    if (static_cast<int>(l) <= static_cast<int>(LogLevel::trace)) {
      log::set_level(l);
      XP_LOG(warn, "log level set to %d by xpress-stat", static_cast<int>(l));
    }
  }
  if (r & kRequestReset) {
    auto* raw = reinterpret_cast<Counter*>(&b->c);
    for (size_t i = 0; i < sizeof(Counters) / sizeof(Counter); ++i)
      raw[i].store(0, std::memory_order_relaxed);
    for (ConnSlot& s : b->slots) {
      for (Counter* x : {&s.bytes_tx, &s.bytes_rx, &s.msgs_tx, &s.msgs_rx})
        x->store(0, std::memory_order_relaxed);
    }
    alloc::mem_stats_after_fork_child(); // events start over, gauges stay
    XP_LOG(info, "statistics reset by xpress-stat");
  }
}

void on_tick() {
  take_requests();
  alloc::MemStats* dst = g_live_mem.load(std::memory_order_acquire);
  if (dst == nullptr) return;
  const alloc::MemStats& src = alloc::mem_stats();
  const auto* from = reinterpret_cast<const MemCounterArray*>(&src);
  auto* to = reinterpret_cast<MemCounterArray*>(dst);
  for (size_t i = 0; i < kMemCounters; ++i)
    (*to)[i].store((*from)[i].load(std::memory_order_relaxed), std::memory_order_relaxed);
}

StatsBlock& block() {
  StatsBlock* b = g_block.load(std::memory_order_acquire);
  if (__builtin_expect(b != nullptr, 1)) return *b;
  void* mem =
      mmap(nullptr, kBlockBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    // Cannot happen in practice; keep counting into a static block.
    static StatsBlock fallback;
    mem = &fallback;
  }
  auto* fresh = static_cast<StatsBlock*>(mem);
  fork_parts::mark(fork_parts::kStats);
  fill_identity(fresh);
  if (g_block.compare_exchange_strong(b, fresh, std::memory_order_acq_rel)) return *fresh;
  munmap(mem, kBlockBytes);
  return *b;
}

// Once per process image (a fork child starts over: see after_fork_child).
std::atomic<bool> g_publish_tried{false};

void publish_live() {
  if (g_live.load(std::memory_order_acquire)) return;
  fork_parts::mark(fork_parts::kStats); // the child clears g_publish_tried
  if (g_publish_tried.exchange(true)) return;
  if (!config().stats_live) return;
  if (map_live_file(&block())) g_live.store(true, std::memory_order_release);
}

// Gives a page mapped from the parent's live file a private copy of itself.
void make_private(void* page, size_t n) {
  void* copy = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (copy == MAP_FAILED) return;
  memcpy(copy, page, n);
  mmap(page, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  memcpy(page, copy, n);
  munmap(copy, n);
}

void after_fork_child() {
  if (!fork_parts::used(fork_parts::kStats)) return; // nothing of the parent's to clear
  StatsBlock* b = g_block.load(std::memory_order_acquire);
  if (alloc::MemStats* m = g_live_mem.exchange(nullptr)) munmap(m, sizeof *m); // the parent's file
  alloc::mem_stats_after_fork_child();
  if (b == nullptr) return;
  b->pid = raw_pid();
  b->started_unix_ms = unix_ms();
  // The child's totals start at zero; rows of inherited sockets stay.
  auto* raw = reinterpret_cast<char*>(&b->c);
  if (g_live.load(std::memory_order_acquire)) {
    // Still the parent's shared pages: leave a private copy before changing
    // anything; the child publishes its own file.
    make_private(b, kBlockBytes);
    b->pid = raw_pid();
    g_live.store(false, std::memory_order_release);
  }
  memset(raw, 0, sizeof(Counters));
  // The child publishes its own file on its first new connection, not now:
  // most fork children exec or _exit at once, and a file made here would
  // outlive them (no destructor runs on _exit).
  g_publish_tried.store(false, std::memory_order_release);
}

ConnSlot* claim_slot(int fd) {
  take_requests(); // also without an engine thread (no RDMA device)
  StatsBlock& b = block();
  uint32_t start = g_slot_hint.load(std::memory_order_relaxed);
  for (uint32_t i = 0; i < sw::kStatsConnSlots; ++i) {
    ConnSlot& s = b.slots[(start + i) % sw::kStatsConnSlots];
    uint32_t expected = 0;
    if (s.in_use.load(std::memory_order_relaxed) == 0 &&
        s.in_use.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
      g_slot_hint.store((start + i + 1) % sw::kStatsConnSlots, std::memory_order_relaxed);
      s.fd = fd;
      s.mode = s.reason = s.role = s.family = 0;
      memset(s.local, 0, sizeof s.local);
      memset(s.peer, 0, sizeof s.peer);
      s.local_port = s.peer_port = 0;
      s.bytes_tx.store(0, std::memory_order_relaxed);
      s.bytes_rx.store(0, std::memory_order_relaxed);
      s.msgs_tx.store(0, std::memory_order_relaxed);
      s.msgs_rx.store(0, std::memory_order_relaxed);
      s.tx_switch_at.store(0, std::memory_order_relaxed);
      s.rx_switch_at.store(0, std::memory_order_relaxed);
      s.opened_unix_ms = unix_ms();
      s.calls_gen.fetch_add(1, std::memory_order_seq_cst);
      s.calls_done.store(s.calls_begun.load(std::memory_order_seq_cst), std::memory_order_seq_cst);
      return &s;
    }
  }
  b.c.conn_slots_full.fetch_add(1, std::memory_order_relaxed);
  return nullptr;
}

namespace {
// A row's bytes, split at its switches: {on TCP before, the rest}.
struct RowBytes {
  uint64_t tx_before, tx, rx_before, rx;
};
RowBytes split(const ConnSlot& s) {
  auto part = [](uint64_t all, uint64_t at, uint64_t* before) {
    *before = at < all ? at : all;
    return all - *before;
  };
  RowBytes r{};
  r.tx = part(s.bytes_tx.load(std::memory_order_relaxed),
              s.tx_switch_at.load(std::memory_order_relaxed), &r.tx_before);
  r.rx = part(s.bytes_rx.load(std::memory_order_relaxed),
              s.rx_switch_at.load(std::memory_order_relaxed), &r.rx_before);
  return r;
}

// Adds the row's counts to the totals (Counters), under the mode the row
// has now; with restart, the row's counts start over (its connection goes
// on under another mode).
void fold_row(ConnSlot* s, bool restart) {
  Counters& c = block().c;
  int m = s->mode < 2 ? s->mode : 0;
  RowBytes rb = split(*s);
  c.bytes_tx[m].fetch_add(rb.tx, std::memory_order_relaxed);
  c.bytes_rx[m].fetch_add(rb.rx, std::memory_order_relaxed);
  c.tx_before_switch.fetch_add(rb.tx_before, std::memory_order_relaxed);
  c.rx_before_switch.fetch_add(rb.rx_before, std::memory_order_relaxed);
  if (!restart) {
    c.msgs_tx[m].fetch_add(s->msgs_tx.load(std::memory_order_relaxed), std::memory_order_relaxed);
    c.msgs_rx[m].fetch_add(s->msgs_rx.load(std::memory_order_relaxed), std::memory_order_relaxed);
    return;
  }
  c.msgs_tx[m].fetch_add(s->msgs_tx.exchange(0, std::memory_order_relaxed),
                         std::memory_order_relaxed);
  c.msgs_rx[m].fetch_add(s->msgs_rx.exchange(0, std::memory_order_relaxed),
                         std::memory_order_relaxed);
  s->bytes_tx.fetch_sub(rb.tx + rb.tx_before, std::memory_order_relaxed);
  s->bytes_rx.fetch_sub(rb.rx + rb.rx_before, std::memory_order_relaxed);
  s->tx_switch_at.store(0, std::memory_order_relaxed);
  s->rx_switch_at.store(0, std::memory_order_relaxed);
}
} // namespace

void rebase_slot(ConnSlot* s, Mode now) {
  if (s == nullptr) return;
  fold_row(s, true);
  s->mode = static_cast<uint8_t>(now);
}

void release_slot(ConnSlot* s) {
  if (s == nullptr) return;
  fold_row(s, false);
  s->in_use.store(0, std::memory_order_release);
}

void totals(const StatsBlock& b, Totals* t) {
  for (int m = 0; m < 2; ++m) {
    t->bytes_tx[m] = b.c.bytes_tx[m].load(std::memory_order_relaxed);
    t->bytes_rx[m] = b.c.bytes_rx[m].load(std::memory_order_relaxed);
    t->msgs_tx[m] = b.c.msgs_tx[m].load(std::memory_order_relaxed);
    t->msgs_rx[m] = b.c.msgs_rx[m].load(std::memory_order_relaxed);
  }
  t->tx_before_switch = b.c.tx_before_switch.load(std::memory_order_relaxed);
  t->rx_before_switch = b.c.rx_before_switch.load(std::memory_order_relaxed);
  for (const ConnSlot& s : b.slots) {
    if (s.in_use.load(std::memory_order_acquire) == 0) continue;
    int m = s.mode < 2 ? s.mode : 0;
    RowBytes rb = split(s);
    t->bytes_tx[m] += rb.tx;
    t->bytes_rx[m] += rb.rx;
    t->tx_before_switch += rb.tx_before;
    t->rx_before_switch += rb.rx_before;
    t->msgs_tx[m] += s.msgs_tx.load(std::memory_order_relaxed);
    t->msgs_rx[m] += s.msgs_rx.load(std::memory_order_relaxed);
  }
}

namespace {
void format_addr(const ConnSlot& s, bool local, char* out, size_t n) {
  const uint8_t* a = local ? s.local : s.peer;
  uint16_t port = local ? s.local_port : s.peer_port;
  char ip[INET6_ADDRSTRLEN] = "?";
  if (s.family == 4) inet_ntop(AF_INET, a, ip, sizeof ip);
  if (s.family == 6) inet_ntop(AF_INET6, a, ip, sizeof ip);
  snprintf(out, n, s.family == 6 ? "[%s]:%u" : "%s:%u", ip, port);
}

uint64_t get(const Counter& c) {
  return c.load(std::memory_order_relaxed);
}
constexpr int kTcp = static_cast<int>(Mode::tcp);
constexpr int kRdma = static_cast<int>(Mode::rdma);
const char* role_name(uint8_t r) {
  return r == 1 ? "client" : (r == 2 ? "server" : "-");
}
} // namespace

namespace {
// Up to three reasons by count, "name=count" separated by spaces.
void top_reasons(const Counters& c, char* out, size_t n) {
  bool used[static_cast<int>(Reason::count)] = {};
  size_t o = 0;
  out[0] = '\0';
  for (int k = 0; k < 3; ++k) {
    int best = 0;
    for (int r = 1; r < static_cast<int>(Reason::count); ++r)
      if (!used[r] && get(c.fallbacks[r]) > (best ? get(c.fallbacks[best]) : 0)) best = r;
    if (best == 0) break;
    used[best] = true;
    int w = snprintf(out + o, n - o, "%s%s=%lu", o ? " " : "",
                     reason_name(static_cast<Reason>(best)), get(c.fallbacks[best]));
    if (w < 0 || static_cast<size_t>(w) >= n - o) break;
    o += static_cast<size_t>(w);
  }
}

void dump_mem_json(FILE* out, const alloc::MemStats& m) {
  fprintf(out,
          "\"memory\":{\"arena\":{\"committed\":%lu,\"in_use\":%lu,\"registered\":%lu,"
          "\"dirty\":%lu,\"purged\":%lu,\"decommits\":%lu,"
          "\"allocs\":%lu,\"glibc_fallbacks\":%lu},\"domains\":%lu,\"registrations\":%lu,"
          "\"registration_failures\":%lu,",
          get(m.arena_committed_bytes), get(m.arena_in_use_bytes), get(m.arena_registered_bytes),
          get(m.arena_dirty_bytes), get(m.arena_purged_bytes), get(m.arena_decommits),
          get(m.arena_allocs), get(m.arena_fallbacks), get(m.domains), get(m.registrations),
          get(m.registration_failures));
  fprintf(out,
          "\"registration_cache\":{\"hits\":%lu,\"misses\":%lu,\"invalidations\":%lu,"
          "\"evictions\":%lu,\"entries\":%lu,\"bytes\":%lu},",
          get(m.cache_hits), get(m.cache_misses), get(m.cache_invalidations),
          get(m.cache_evictions), get(m.cache_entries), get(m.cache_bytes));
  fprintf(out,
          "\"zero_copy\":{\"tx\":%lu,\"rx\":%lu,\"tx_staged\":%lu},"
          "\"copied\":{\"tx\":%lu,\"rx\":%lu}},",
          get(m.tx_zero_copy_bytes), get(m.rx_zero_copy_bytes), get(m.tx_zero_copy_staged_bytes),
          get(m.tx_copied_bytes), get(m.rx_copied_bytes));
}

void dump_mem_text(FILE* out, const alloc::MemStats& m) {
  fprintf(out, "  %-22s committed %lu, in use %lu, registered %lu (%lu domains, %lu MRs)\n",
          "arena bytes", get(m.arena_committed_bytes), get(m.arena_in_use_bytes),
          get(m.arena_registered_bytes), get(m.domains), get(m.registrations));
  fprintf(out, "  %-22s dirty %lu, purged %lu, decommits %lu\n", "arena free bytes",
          get(m.arena_dirty_bytes), get(m.arena_purged_bytes), get(m.arena_decommits));
  fprintf(out, "  %-22s hits %lu, misses %lu, invalidations %lu, evictions %lu, entries %lu\n",
          "registration cache", get(m.cache_hits), get(m.cache_misses), get(m.cache_invalidations),
          get(m.cache_evictions), get(m.cache_entries));
  fprintf(out, "  %-22s zero-copy %lu/%lu   copied %lu/%lu   (zero-copy tail staged %lu)\n",
          "rdma bytes tx/rx", get(m.tx_zero_copy_bytes), get(m.rx_zero_copy_bytes),
          get(m.tx_copied_bytes), get(m.rx_copied_bytes), get(m.tx_zero_copy_staged_bytes));
}
} // namespace

void dump(FILE* out, const StatsBlock& b, bool json, const alloc::MemStats* mem) {
  const Counters& c = b.c;
  Totals t;
  totals(b, &t);
  if (json) {
    fprintf(out, "{\"pid\":%d,\"program\":\"%s\",\"sockets_tracked\":%lu,\"listeners\":%lu,", b.pid,
            b.comm, get(c.sockets_tracked), get(c.listeners));
    fprintf(out, "\"connections\":{\"rdma\":%lu,\"tcp\":%lu},\"fallback_reasons\":{",
            get(c.connections[kRdma]), get(c.connections[kTcp]));
    bool first = true;
    for (int r = 1; r < static_cast<int>(Reason::count); ++r) {
      fprintf(out, "%s\"%s\":%lu", first ? "" : ",", reason_name(static_cast<Reason>(r)),
              get(c.fallbacks[r]));
      first = false;
    }
    fprintf(out,
            "},\"bytes\":{\"rdma\":{\"tx\":%lu,\"rx\":%lu},\"tcp\":{\"tx\":%lu,\"rx\":%lu},"
            "\"tcp_before_switch\":{\"tx\":%lu,\"rx\":%lu}},",
            t.bytes_tx[kRdma], t.bytes_rx[kRdma], t.bytes_tx[kTcp], t.bytes_rx[kTcp],
            t.tx_before_switch, t.rx_before_switch);
    fprintf(out, "\"messages\":{\"rdma\":{\"tx\":%lu,\"rx\":%lu},\"tcp\":{\"tx\":%lu,\"rx\":%lu}},",
            t.msgs_tx[kRdma], t.msgs_rx[kRdma], t.msgs_tx[kTcp], t.msgs_rx[kTcp]);
    fprintf(out, "\"recovery\":{\"resumed\":{");
    for (int r = 1; r < kResumeCauses; ++r)
      fprintf(out, "%s\"%s\":%lu", r == 1 ? "" : ",",
              stream::resume_cause_name(static_cast<stream::ResumeCause>(r)), get(c.resumed[r]));
    fprintf(out,
            "},\"failed\":%lu,\"resent_bytes\":%lu,\"recover_us\":%lu,\"recover_us_max\":%lu,"
            "\"back_to_rdma\":{\"returned\":%lu,\"attempts\":%lu,\"failed_attempts\":%lu,"
            "\"tcp_us\":%lu}},",
            get(c.resume_failed), get(c.resent_bytes), get(c.recover_us), get(c.recover_us_max),
            get(c.reup_returned), get(c.reup_attempts), get(c.reup_failed), get(c.reup_tcp_us));
    if (mem != nullptr) dump_mem_json(out, *mem);
    fprintf(out, "\"open_connections\":[");
    first = true;
    for (const ConnSlot& s : b.slots) {
      if (s.in_use.load(std::memory_order_acquire) == 0) continue;
      char l[64], p[64];
      format_addr(s, true, l, sizeof l);
      format_addr(s, false, p, sizeof p);
      fprintf(out,
              "%s{\"fd\":%d,\"mode\":\"%s\",\"reason\":\"%s\",\"role\":\"%s\",\"local\":\"%s\","
              "\"peer\":\"%s\",\"bytes_tx\":%lu,\"bytes_rx\":%lu}",
              first ? "" : ",", s.fd, mode_name(static_cast<Mode>(s.mode)),
              reason_name(static_cast<Reason>(s.reason)), role_name(s.role), l, p, get(s.bytes_tx),
              get(s.bytes_rx));
      first = false;
    }
    fprintf(out, "]}\n");
    fflush(out);
    return;
  }
  fprintf(out, "xpress statistics: pid %d (%s)\n", b.pid, b.comm);
  fprintf(out, "  %-22s rdma %-12lu tcp %lu\n", "connections", get(c.connections[kRdma]),
          get(c.connections[kTcp]));
  fprintf(out, "  %-22s", "tcp reasons");
  bool any = false;
  for (int r = 1; r < static_cast<int>(Reason::count); ++r) {
    if (get(c.fallbacks[r]) == 0) continue;
    fprintf(out, " %s=%lu", reason_name(static_cast<Reason>(r)), get(c.fallbacks[r]));
    any = true;
  }
  fprintf(out, "%s\n", any ? "" : " -");
  char why[200];
  if (nothing_accelerated(b, why, sizeof why))
    fprintf(out, "  %-22s no connection went over RDMA (%s; see xpress(7), STATISTICS)\n", "hint",
            why);
  fprintf(out, "  %-22s rdma %lu/%lu   tcp %lu/%lu   tcp before the switch %lu/%lu\n",
          "bytes tx/rx", t.bytes_tx[kRdma], t.bytes_rx[kRdma], t.bytes_tx[kTcp], t.bytes_rx[kTcp],
          t.tx_before_switch, t.rx_before_switch);
  fprintf(out, "  %-22s rdma %lu/%lu   tcp %lu/%lu\n", "messages tx/rx", t.msgs_tx[kRdma],
          t.msgs_rx[kRdma], t.msgs_tx[kTcp], t.msgs_rx[kTcp]);
  fprintf(out, "  %-22s %lu sockets, %lu listeners\n", "tracked", get(c.sockets_tracked),
          get(c.listeners));
  uint64_t resumed = 0;
  for (int r = 1; r < kResumeCauses; ++r)
    resumed += get(c.resumed[r]);
  if (resumed + get(c.resume_failed) > 0) {
    fprintf(out, "  %-22s", "resumed on tcp");
    for (int r = 1; r < kResumeCauses; ++r)
      if (get(c.resumed[r]))
        fprintf(out, " %s=%lu", stream::resume_cause_name(static_cast<stream::ResumeCause>(r)),
                get(c.resumed[r]));
    fprintf(out, "; failed %lu; re-sent %lu bytes; %lu us recovering (max %lu)\n",
            get(c.resume_failed), get(c.resent_bytes), get(c.recover_us), get(c.recover_us_max));
  }
  if (get(c.reup_attempts) + get(c.reup_returned) > 0)
    fprintf(out, "  %-22s %lu streams; %lu attempts, %lu failed; %lu us on tcp before\n",
            "back to rdma", get(c.reup_returned), get(c.reup_attempts), get(c.reup_failed),
            get(c.reup_tcp_us));
  if (mem != nullptr) dump_mem_text(out, *mem);
  bool header = false;
  for (const ConnSlot& s : b.slots) {
    if (s.in_use.load(std::memory_order_acquire) == 0) continue;
    if (!header) {
      fprintf(out, "  open connections:\n  %5s %-5s %-21s %-7s %-24s %-24s %12s %12s\n", "fd",
              "mode", "reason", "role", "local", "peer", "bytes_tx", "bytes_rx");
      header = true;
    }
    char l[64], p[64];
    format_addr(s, true, l, sizeof l);
    format_addr(s, false, p, sizeof p);
    fprintf(out, "  %5d %-5s %-21s %-7s %-24s %-24s %12lu %12lu\n", s.fd,
            mode_name(static_cast<Mode>(s.mode)), reason_name(static_cast<Reason>(s.reason)),
            role_name(s.role), l, p, get(s.bytes_tx), get(s.bytes_rx));
  }
  fflush(out);
}

bool nothing_accelerated(const StatsBlock& b, char* why, size_t n) {
  if (get(b.c.connections[kRdma]) != 0 || get(b.c.connections[kTcp]) == 0) return false;
  top_reasons(b.c, why, n);
  return true;
}

bool exit_hint_warns(const StatsBlock& b, bool device_present) {
  if (!device_present || get(b.c.connections[kRdma]) != 0) return false;
  for (Reason r : {Reason::handshake_failed, Reason::handshake_timeout, Reason::resources_exhausted,
                   Reason::rdma_error_fallback})
    if (get(b.c.fallbacks[static_cast<int>(r)]) != 0) return true;
  return false;
}

void at_exit() {
  StatsBlock* b = g_block.load(std::memory_order_acquire);
  const Config& cfg = config();
  // A process that never touched an inet socket (a shell, a helper) prints
  // nothing: the dump is about connections.  A fork child that counted an
  // inherited connection (it upgraded it: stream/fork_handover.h) did.
  bool saw_sockets = b && (b->c.sockets_tracked.load(std::memory_order_relaxed) != 0 ||
                           b->c.fallbacks[static_cast<int>(Reason::not_stream_socket)].load(
                               std::memory_order_relaxed) != 0 ||
                           get(b->c.connections[kRdma]) != 0 || get(b->c.connections[kTcp]) != 0);
  char why[200];
  // Once per process: at_exit runs once (the destructor, or _exit's wrapper).
  if (saw_sockets && exit_hint_warns(*b, stream::rdma_device_found()) &&
      nothing_accelerated(*b, why, sizeof why))
    XP_LOG(warn, "exit: no connection went over RDMA (%s; see xpress(7), STATISTICS)", why);
  else if (saw_sockets && log::enabled(LogLevel::info) && nothing_accelerated(*b, why, sizeof why))
    XP_LOG(info, "exit: no connection went over RDMA (%s; see xpress(7), STATISTICS)", why);
  if (cfg.stats != StatsFormat::off && saw_sockets) {
    StatsBlock& blk = block();
    FILE* out = stderr;
    if (cfg.stats_file[0] != '\0') {
      int fd = log::open_append(cfg.stats_file);
      FILE* f = fd >= 0 ? fdopen(fd, "a") : nullptr;
      if (f)
        out = f;
      else if (fd >= 0)
        ::syscall(SYS_close, fd);
    }
    dump(out, blk, cfg.stats == StatsFormat::json, &alloc::mem_stats());
    if (out != stderr) fclose(out);
  }
  if (b && g_live.load(std::memory_order_acquire) && b->pid == raw_pid()) {
    char path[128];
    live_path(static_cast<unsigned>(geteuid()), b->pid, path, sizeof path);
    ::syscall(SYS_unlink, path);
  }
}

} // namespace xp::stats
