#include "stream/wake.h"
#include "common/fork_parts.h"

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

namespace {
// The watch locks: a source's list is guarded by the stripe its address
// hashes to (a mutex per source would have to be re-made in a fork child,
// and there is no list of every source to do it from).
constexpr int kWatchStripes = 64;
std::mutex g_watch_mu[kWatchStripes];
std::mutex& watch_mu_of(const ReadySource* s) {
  fork_parts::mark(fork_parts::kWatch); // before a lock is first taken
  auto k = reinterpret_cast<uintptr_t>(s);
  return g_watch_mu[((k >> 6) ^ (k >> 12)) & (kWatchStripes - 1)];
}
} // namespace

void ReadySource::watch(ReadyWatch& w) {
  std::lock_guard<std::mutex> g(watch_mu_of(this));
  watchers_.push_back(w);
  // seq_cst: the watcher's owner looks at the readiness after this, and
  // tell_watchers() loads the count after a change behind a seq_cst fence:
  // either the owner sees the change or the change sees the watcher.
  n_watchers_.fetch_add(1, std::memory_order_seq_cst);
}

void ReadySource::unwatch(ReadyWatch& w) {
  std::lock_guard<std::mutex> g(watch_mu_of(this));
  if (!w.is_linked()) return; // the source's end unlinked it (tests' sources go first)
  watchers_.erase(watchers_.iterator_to(w));
  n_watchers_.fetch_sub(1, std::memory_order_relaxed);
}

void ReadySource::tell_watchers() const {
  std::atomic_thread_fence(std::memory_order_seq_cst); // pairs with watch()
  tell_watchers_fenced();
}

void ReadySource::tell_watchers_fenced() const {
  if (n_watchers_.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard<std::mutex> g(watch_mu_of(this));
  bool exclusive_woken = false;
  for (ReadyWatch& w : watchers_)
    if (w.on_change(!exclusive_woken)) exclusive_woken = true;
}

XP_FORK_TEXT void ReadySource::after_fork_child_watch() {
  if (!fork_parts::used(fork_parts::kWatch)) return;
  for (std::mutex& m : g_watch_mu)
    new (&m) std::mutex;
}

namespace wake {
namespace {

// A registration: efd waits for key (null: for anything).  Each thread
// keeps its own in a block made on its first sleep (kPerThread: a poll over
// 16 epoll sets and its own connections, an epoll_wait over 8 sets of 8
// members each), linked into the list of its key's bucket, so that
// notify(key) looks only at that bucket's list and the list of sleepers
// for anything, each under its own lock: no process-wide lock, no scan of
// every registration.  remove() unlinks the calling thread's own entries
// only: threads sleeping on one epoll set share its wake eventfd, and the
// first to wake must not take the others' registrations with it.
struct Entry {
  const void* key = nullptr;
  Entry* prev = nullptr;
  Entry* next = nullptr;
  int efd = -1;
  int16_t shard = -1; // -1: not linked
  bool watch = false;
};
constexpr int kPerThread = 128;
constexpr int kKeyBuckets = 256;
constexpr int kAnyShard = kKeyBuckets; // the sleepers for anything
struct Shard {
  std::mutex mu;
  Entry* head = nullptr;
};
Shard g_shards[kKeyBuckets + 1];
// Which sleepers there are, without a lock: all of them, those for
// anything (poll, select, epoll over many members) and, per bucket of
// keys, those for a key that hashes there.  notify(key) returns after three
// loads when neither its bucket nor the sleepers for anything have any: a
// data call that changed its own connection's readiness takes no lock
// merely because some other connection's caller sleeps.
std::atomic<int> g_count{0};
std::atomic<int> g_any{0};
std::atomic<int> g_bucket[kKeyBuckets];
// Registrations of watchers, keyed or not (any_sleepers()).
std::atomic<int> g_watchers{0};
// notify() calls without a key (a change of any connection): a watcher
// that keeps a list of what changed looks at everything again (all_gen()).
std::atomic<uint32_t> g_all_gen{0};
std::atomic<uint64_t> g_scans{0};   // notify() calls that took a lock (tests)
std::atomic<uint64_t> g_visited{0}; // registrations they looked at (tests)

int bucket_of(const void* key) {
  auto k = reinterpret_cast<uintptr_t>(key);
  return static_cast<int>(((k >> 6) ^ (k >> 14)) & (kKeyBuckets - 1));
}
int shard_of(const void* key) {
  return key ? bucket_of(key) : kAnyShard;
}
std::atomic<int>& counter_of(int shard) {
  return shard == kAnyShard ? g_any : g_bucket[shard];
}
std::atomic<void (*)()> g_before_sleep{nullptr};
std::atomic<bool> g_no_waker{false};

void unlink_entry(Entry& e);

// Heap blocks, not static TLS: the library's TLS stays small (tests/unit/tls.sh).
// Once destroyed (the thread's TLS destructors, which exit() runs before
// atexit handlers and static destructors that may still make socket calls)
// it registers nothing and has no eventfd: such a call sleeps in slices.
struct ThreadState {
  int fd = -1;
  Entry* regs = nullptr; // kPerThread entries
  int n = 0;             // entries in use, regs[0..n)
  bool dead = false;
  ~ThreadState() {
    if (regs) {
      for (int i = 0; i < n; ++i)
        unlink_entry(regs[i]);
      delete[] regs;
    }
    if (fd >= 0) syscall(SYS_close, fd);
    regs = nullptr;
    n = 0;
    fd = -1;
    dead = true;
  }
};
thread_local ThreadState t_st;
thread_local bool t_self_awake = false;

void unlink_entry(Entry& e) {
  if (e.shard < 0) return;
  Shard& sh = g_shards[e.shard];
  {
    std::lock_guard<std::mutex> g(sh.mu);
    if (e.prev)
      e.prev->next = e.next;
    else
      sh.head = e.next;
    if (e.next) e.next->prev = e.prev;
  }
  counter_of(e.shard).fetch_sub(1, std::memory_order_relaxed);
  if (e.watch) g_watchers.fetch_sub(1, std::memory_order_relaxed);
  g_count.fetch_sub(1, std::memory_order_relaxed);
  e.shard = -1;
  e.prev = e.next = nullptr;
}

} // namespace

int thread_fd() {
  // Raw system calls: this layer sits below the interposed libc functions.
  if (t_st.fd < 0 && !t_st.dead)
    t_st.fd = static_cast<int>(place_high(syscall(SYS_eventfd2, 0, EFD_NONBLOCK | EFD_CLOEXEC)));
  return t_st.fd;
}

namespace {
// A fork child has one thread and none of the parent's sleepers (the
// forking thread had none registered: it was not asleep); another parent
// thread may have held a lock at the fork.  Its eventfd is its own: the
// inherited one is the parent thread's, whose wake-ups the child would
// drain (and the parent's sleeps take the child's).
void atfork_child() {
  if (t_st.fd >= 0) syscall(SYS_close, t_st.fd);
  t_st.fd = -1;
  for (Shard& sh : g_shards) {
    new (&sh.mu) std::mutex;
    sh.head = nullptr;
  }
  for (int i = 0; i < t_st.n; ++i)
    t_st.regs[i] = Entry{};
  t_st.n = 0;
  g_count.store(0, std::memory_order_relaxed);
  g_any.store(0, std::memory_order_relaxed);
  g_watchers.store(0, std::memory_order_relaxed);
  for (auto& b : g_bucket)
    b.store(0, std::memory_order_relaxed);
}

bool add_entries(int efd, const void* const* keys, int nkeys, bool watch) {
  static const bool atfork = pthread_atfork(nullptr, nullptr, atfork_child) == 0;
  (void)atfork;
  if (g_no_waker.load(std::memory_order_acquire)) return false;
  ThreadState& st = t_st;
  if (st.dead) return false;
  if (st.regs == nullptr) {
    st.regs = new (std::nothrow) Entry[kPerThread];
    if (st.regs == nullptr) return false;
  }
  if (st.n + nkeys > kPerThread) return false;
  for (int i = 0; i < nkeys; ++i) {
    Entry& e = st.regs[st.n++];
    e.key = keys[i];
    e.efd = efd;
    e.watch = watch;
    e.shard = static_cast<int16_t>(shard_of(keys[i]));
    Shard& sh = g_shards[e.shard];
    std::lock_guard<std::mutex> g(sh.mu);
    e.prev = nullptr;
    e.next = sh.head;
    if (sh.head) sh.head->prev = &e;
    sh.head = &e;
    // seq_cst, inside the lock: a notify() that sees the count takes the
    // lock after us and finds the entry; the sleeper's next load of the
    // readiness it waits for is not ordered before these stores (notify()
    // reads the counts after the change it publishes, behind a seq_cst
    // fence; the engine reads g_watchers after publishing a channel unarmed).
    g_count.fetch_add(1, std::memory_order_seq_cst);
    counter_of(e.shard).fetch_add(1, std::memory_order_seq_cst);
    if (watch) g_watchers.fetch_add(1, std::memory_order_seq_cst);
  }
  if (void (*fn)() = g_before_sleep.load(std::memory_order_acquire)) fn();
  return true;
}

// Writes each eventfd of shard's list that waits for key (null: any key)
// once per call, as far as `seen` can tell.
struct Writes {
  static constexpr int kSeen = 16;
  int seen[kSeen];
  int n = 0;
  int self = -1;
  bool fresh(int efd) {
    if (efd == self) return false;
    for (int i = 0; i < n; ++i)
      if (seen[i] == efd) return false;
    if (n < kSeen) seen[n++] = efd;
    return true;
  }
  void scan(int shard, const void* key) {
    Shard& sh = g_shards[shard];
    std::lock_guard<std::mutex> g(sh.mu);
    uint64_t visited = 0;
    uint64_t one = 1;
    for (Entry* e = sh.head; e; e = e->next) {
      ++visited;
      if (key != nullptr && e->key != nullptr && e->key != key) continue;
      if (!fresh(e->efd)) continue;
      long r = syscall(SYS_write, e->efd, &one, sizeof one);
      (void)r; // EAGAIN: the counter is saturated, the sleeper wakes anyway
    }
    g_visited.fetch_add(visited, std::memory_order_relaxed);
  }
};
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
  ThreadState& st = t_st;
  int kept = 0;
  for (int i = 0; i < st.n; ++i) {
    Entry& e = st.regs[i];
    if (e.efd == efd) {
      unlink_entry(e);
      continue;
    }
    if (kept != i) {
      // Moves a linked entry: its neighbours point at the new place.
      Entry& to = st.regs[kept];
      Shard& sh = g_shards[e.shard];
      std::lock_guard<std::mutex> g(sh.mu);
      to = e;
      if (to.prev)
        to.prev->next = &to;
      else
        sh.head = &to;
      if (to.next) to.next->prev = &to;
    }
    ++kept;
  }
  st.n = kept;
}

namespace {
// notify_set() after its fence.
void notify_fenced(const void* key) {
  if (g_count.load(std::memory_order_relaxed) == 0) return;
  Writes w;
  w.self = t_self_awake ? t_st.fd : -1;
  if (key != nullptr) {
    int b = bucket_of(key);
    bool in_bucket = g_bucket[b].load(std::memory_order_relaxed) != 0;
    bool any = g_any.load(std::memory_order_relaxed) != 0;
    if (!in_bucket && !any) return; // nobody waits for key, nor for anything
    g_scans.fetch_add(1, std::memory_order_relaxed);
    if (in_bucket) w.scan(b, key);
    if (any) w.scan(kAnyShard, key);
    return;
  }
  // Every sleeper: a change announced to all (a mode change, a failure).
  g_scans.fetch_add(1, std::memory_order_relaxed);
  for (int s = 0; s <= kKeyBuckets; ++s)
    if (counter_of(s).load(std::memory_order_relaxed) != 0) w.scan(s, nullptr);
}
} // namespace

void notify(const void* key) {
  if (key == nullptr) g_all_gen.fetch_add(1, std::memory_order_seq_cst);
  // One fence for both pairings.  What it orders: the change the caller
  // published (a readiness level, bytes, a generation; with no key, also
  // all_gen) before the two loads that decide whom to tell, the source's
  // watcher count (pairs with ReadySource::watch(): a watcher linked after
  // this load looks at the readiness after linking) and the sleeper counts
  // (pairs with add_entries(): a sleeper counted after this load looks
  // after counting).  A second fence between the two loads would order
  // nothing more: the watchers' work in between (ready lists, eventfd
  // writes, each set's own notify_set) publishes no change a sleeper
  // must see before it is counted, and the one change it must see is
  // already behind this fence.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // A connection's key is its ReadySource (wake.h): its epoll sets queue it
  // on their ready lists and wake their own sleepers (notify_set).
  if (key != nullptr) static_cast<const ReadySource*>(key)->tell_watchers_fenced();
  notify_fenced(key);
}

uint32_t all_gen() {
  return g_all_gen.load(std::memory_order_seq_cst);
}

void notify_set(const void* key) {
  // Pairs with add(): a change published before this load is seen by any
  // sleeper that registered after it.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  notify_fenced(key);
}

uint64_t scans_for_tests() {
  return g_scans.load(std::memory_order_relaxed);
}

uint64_t visited_for_tests() {
  return g_visited.load(std::memory_order_relaxed);
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
