#include "stream/wake.h"

#include "common/fd_place.h"

#include <atomic>
#include <cstdint>
#include <fcntl.h>
#include <mutex>
#include <new>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "stream/ready_source.h"

namespace xp::stream {

namespace {
std::atomic<ModeHook> g_mode_hook{nullptr};
} // namespace

void set_mode_hook(ModeHook h) {
  g_mode_hook.store(h, std::memory_order_release);
}
void notify_mode(int fd, ReadySource* now) {
  if (ModeHook h = g_mode_hook.load(std::memory_order_acquire)) h(fd, now);
}

namespace wake {
namespace {

constexpr int kMaxSleepers = 1024;
std::mutex g_mu;
int g_fds[kMaxSleepers];
const void* g_keys[kMaxSleepers];
bool g_watch[kMaxSleepers]; // a watcher's registration (any_sleepers)
std::atomic<int> g_count{0};
// Which sleepers there are, without the lock: how many wait for anything
// (key null: poll, select, epoll) and, per bucket of keys, how many wait for
// a key that hashes there.  notify(key) looks at these two and returns when
// both are zero: a data call that changed its own connection's readiness
// takes no process-wide lock merely because some other connection's caller
// sleeps (xpress-bench's idle control connection; a thread-per-connection
// server, where all but the running threads sleep, took g_mu on every call).
// Another key in the same bucket costs only the scan it costs anyway.
constexpr int kKeyBuckets = 256;
std::atomic<int> g_any{0};
std::atomic<int> g_bucket[kKeyBuckets];
// Registrations of watchers, keyed or not (any_sleepers()).
std::atomic<int> g_watchers{0};
uint64_t g_scans = 0; // notify() calls that scanned, under g_mu (tests)

int bucket_of(const void* key) {
  auto k = reinterpret_cast<uintptr_t>(key);
  return static_cast<int>(((k >> 6) ^ (k >> 14)) & (kKeyBuckets - 1));
}
std::atomic<int>& counter_of(const void* key) {
  return key ? g_bucket[bucket_of(key)] : g_any;
}
std::atomic<void (*)()> g_before_sleep{nullptr};
std::atomic<bool> g_no_waker{false};

struct ThreadFd {
  int fd = -1;
  ~ThreadFd() {
    if (fd >= 0) syscall(SYS_close, fd);
  }
};
thread_local ThreadFd t_fd;
thread_local bool t_self_awake = false;

} // namespace

int thread_fd() {
  // Raw system calls: this layer sits below the interposed libc functions.
  if (t_fd.fd < 0)
    t_fd.fd = static_cast<int>(place_high(syscall(SYS_eventfd2, 0, EFD_NONBLOCK | EFD_CLOEXEC)));
  return t_fd.fd;
}

namespace {
// A fork child has one thread and none of the parent's sleepers; another
// parent thread may have held the lock at the fork.
void atfork_child() {
  new (&g_mu) std::mutex;
  g_count.store(0, std::memory_order_relaxed);
  g_any.store(0, std::memory_order_relaxed);
  g_watchers.store(0, std::memory_order_relaxed);
  for (auto& b : g_bucket)
    b.store(0, std::memory_order_relaxed);
}

bool add_locked(int efd, const void* const* keys, int nkeys, bool watch) {
  static const bool atfork = pthread_atfork(nullptr, nullptr, atfork_child) == 0;
  (void)atfork;
  std::lock_guard<std::mutex> g(g_mu);
  int n = g_count.load(std::memory_order_relaxed);
  if (n + nkeys > kMaxSleepers) return false;
  for (int i = 0; i < nkeys; ++i) {
    g_fds[n + i] = efd;
    g_keys[n + i] = keys[i];
    g_watch[n + i] = watch;
    // seq_cst: the sleeper's next load of the readiness it waits for must
    // not be ordered before these stores (notify() reads the counts after
    // the change it publishes, behind a seq_cst fence; the engine reads
    // g_watchers after publishing a channel unarmed).
    counter_of(keys[i]).fetch_add(1, std::memory_order_seq_cst);
    if (watch) g_watchers.fetch_add(1, std::memory_order_seq_cst);
  }
  g_count.store(n + nkeys, std::memory_order_seq_cst);
  return true;
}

bool add_entries(int efd, const void* const* keys, int nkeys, bool watch) {
  if (g_no_waker.load(std::memory_order_acquire)) return false;
  bool ok = add_locked(efd, keys, nkeys, watch);
  if (ok)
    if (void (*fn)() = g_before_sleep.load(std::memory_order_acquire)) fn();
  return ok;
}
} // namespace

bool add(int efd, const void* key) {
  return add_entries(efd, &key, 1, key == nullptr);
}

bool add_watch(int efd, const void* const* keys, int n) {
  if (n <= 0 || n > kMaxWatchKeys) return false;
  return add_entries(efd, keys, n, true);
}

bool any_sleepers() {
  return g_watchers.load(std::memory_order_seq_cst) > 0;
}

void set_no_waker(bool none) {
  g_no_waker.store(none, std::memory_order_release);
}

void set_before_sleep(void (*fn)()) {
  g_before_sleep.store(fn, std::memory_order_release);
}

void remove(int efd) {
  std::lock_guard<std::mutex> g(g_mu);
  int n = g_count.load(std::memory_order_relaxed);
  for (int i = 0; i < n;) {
    if (g_fds[i] != efd) {
      ++i;
      continue;
    }
    counter_of(g_keys[i]).fetch_sub(1, std::memory_order_relaxed);
    if (g_watch[i]) g_watchers.fetch_sub(1, std::memory_order_relaxed);
    --n;
    g_fds[i] = g_fds[n];
    g_keys[i] = g_keys[n];
    g_watch[i] = g_watch[n];
  }
  g_count.store(n, std::memory_order_relaxed);
}

void notify(const void* key) {
  // Pairs with add(): a change published before this load is seen by any
  // sleeper that registered after it.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (g_count.load(std::memory_order_relaxed) == 0) return;
  if (key != nullptr && g_any.load(std::memory_order_relaxed) == 0 &&
      g_bucket[bucket_of(key)].load(std::memory_order_relaxed) == 0)
    return; // nobody waits for key, nor for anything
  std::lock_guard<std::mutex> g(g_mu);
  ++g_scans;
  int n = g_count.load(std::memory_order_relaxed);
  uint64_t one = 1;
  int self = t_self_awake ? t_fd.fd : -1;
  int last = -1; // a watcher's keys sit side by side, mostly: one write
  for (int i = 0; i < n; ++i) {
    if (key != nullptr && g_keys[i] != nullptr && g_keys[i] != key) continue;
    if (g_fds[i] == self || g_fds[i] == last) continue;
    last = g_fds[i];
    long r = syscall(SYS_write, g_fds[i], &one, sizeof one);
    (void)r; // EAGAIN: the counter is saturated, the sleeper wakes anyway
  }
}

uint64_t scans_for_tests() {
  std::lock_guard<std::mutex> g(g_mu);
  return g_scans;
}

void SelfAwake::start() {
  on = t_self_awake = true;
}
SelfAwake::~SelfAwake() {
  if (on) t_self_awake = false;
}

void drain(int efd) {
  uint64_t v;
  long r = syscall(SYS_read, efd, &v, sizeof v);
  (void)r;
}

} // namespace wake
} // namespace xp::stream
