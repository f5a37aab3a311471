#include "stream/spin_gate.h"

#include <atomic>
#include <cstdio>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/load_once.h"
#include "stream/engine.h"

namespace xp::stream::spin_gate {
namespace {

constexpr int kSlots = 64;
// A ticket's holder refreshes it every kBeatNs while it spins; one not
// refreshed for kStaleNs is free again.
constexpr uint64_t kBeatNs = 200'000;
constexpr uint64_t kStaleNs = 5'000'000;
// A gap this long between two rounds: the spinner was descheduled.
constexpr uint64_t kGapNs = 300'000;

struct Table {
  std::atomic<uint64_t> beat[kSlots]; // CLOCK_MONOTONIC ns of the last refresh, 0: free
};
static_assert(sizeof(Table) <= 4096);

Table g_private;
std::atomic<Table*> g_table{nullptr};
std::atomic<int> g_limit{0};
std::atomic<bool> g_forced{false}; // tests: on whatever the setting says

// The shared table: one per user (mode 0600, no symlinks followed), so
// another user's processes cannot steer this one's spinning.  Any failure
// leaves the process's own table.
Table* open_shared() {
  char path[64];
  snprintf(path, sizeof path, "/dev/shm/xpress-spin.%u",
           static_cast<unsigned>(syscall(SYS_getuid)));
  long fd = syscall(SYS_openat, AT_FDCWD, path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return &g_private;
  struct stat st;
  void* m = MAP_FAILED;
  if (syscall(SYS_fstat, fd, &st) == 0 && S_ISREG(st.st_mode) &&
      st.st_uid == static_cast<uid_t>(syscall(SYS_getuid)) &&
      (st.st_size >= 4096 || syscall(SYS_ftruncate, fd, 4096) == 0))
    m = reinterpret_cast<void*>(
        syscall(SYS_mmap, nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  syscall(SYS_close, fd);
  return m == MAP_FAILED ? &g_private : static_cast<Table*>(m);
}

Table* table() {
  Table* t = g_table.load(std::memory_order_acquire);
  if (t) return t;
  static LoadOnce once;
  once.get([] {
    g_table.store(open_shared(), std::memory_order_release);
    return true;
  });
  t = g_table.load(std::memory_order_acquire);
  return t ? t : &g_private;
}

int limit() {
  int l = g_limit.load(std::memory_order_relaxed);
  if (l > 0) return l;
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  l = n > 0 ? static_cast<int>(n > kSlots ? kSlots : n) : 1;
  g_limit.store(l, std::memory_order_relaxed);
  return l;
}

bool live(uint64_t beat, uint64_t now) {
  return beat != 0 && now - beat < kStaleNs;
}

} // namespace

bool Ticket::acquire(uint64_t now) {
  if (slot_ >= 0 || off_) return true;
  if (!engine::params().spin_share && !g_forced.load(std::memory_order_relaxed)) {
    off_ = true;
    return true;
  }
  Table* t = table();
  int busy = 0, free_slot = -1;
  for (int i = 0; i < kSlots; ++i) {
    uint64_t b = t->beat[i].load(std::memory_order_relaxed);
    if (live(b, now))
      ++busy;
    else if (free_slot < 0)
      free_slot = i;
  }
  if (busy >= limit() || free_slot < 0) return false;
  uint64_t seen = t->beat[free_slot].load(std::memory_order_relaxed);
  if (live(seen, now) ||
      !t->beat[free_slot].compare_exchange_strong(seen, now, std::memory_order_acq_rel))
    return false; // taken meanwhile: treat as a full table this time
  slot_ = free_slot;
  last_ns_ = beat_ns_ = now;
  return true;
}

bool Ticket::keep(uint64_t now) {
  if (off_) return true;
  if (slot_ < 0) return false;
  const uint64_t gap = now - last_ns_;
  last_ns_ = now;
  if (gap > kGapNs) return false;
  if (now - beat_ns_ >= kBeatNs) {
    uint64_t mine = beat_ns_;
    // Lost to another spinner after going stale: this one stops.
    if (!table()->beat[slot_].compare_exchange_strong(mine, now, std::memory_order_acq_rel)) {
      slot_ = -1;
      return false;
    }
    beat_ns_ = now;
  }
  return true;
}

void Ticket::release() {
  off_ = false;
  if (slot_ < 0) return;
  uint64_t mine = beat_ns_;
  table()->beat[slot_].compare_exchange_strong(mine, 0, std::memory_order_acq_rel);
  slot_ = -1;
}

void set_limit_for_tests(int l) {
  g_limit.store(l, std::memory_order_relaxed);
  g_forced.store(l > 0, std::memory_order_relaxed);
  g_table.store(&g_private, std::memory_order_release);
}

} // namespace xp::stream::spin_gate
