#include "alloc/heap.h"
#include "common/fork_parts.h"

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <gnu/lib-names.h>
#include <malloc.h>
#include <sys/auxv.h>
#include <sys/single_threaded.h>

#include "alloc/arena.h"
#include "alloc/mem_stats.h"
#include "alloc/reg_cache.h"
#include "common/settings.h"

// glibc's own entry points: no symbol lookup, usable at any time.
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void __libc_free(void*);
void* __libc_memalign(size_t, size_t);
void* __libc_valloc(size_t);
void* __libc_pvalloc(size_t);
extern char** environ;
}

// AddressSanitizer (make test-sanitize) replaces malloc and intercepts some
// __libc_ entry points (memalign) but not others (free): its build uses the
// sanitizer's functions throughout, so blocks and frees stay consistent.
#if defined(__SANITIZE_ADDRESS__)
#define XP_LIBC(name) ::name
#else
#define XP_LIBC(name) __libc_##name
#endif

namespace xp::alloc::heap {
namespace {

enum : int { kUndecided = 0, kOn = 1, kOff = 2 };
std::atomic<int> g_mode{kUndecided};
// Requests below go to glibc.  Until decided: the default, so that the one
// compare in malloc() sends every small request to glibc from the start.
std::atomic<size_t> g_min{kDefaultMinKb << 10};

// The settings as resolved by the one deciding thread (common/settings.h:
// environment, configuration file, profile).
constinit settings::Resolved g_settings;
std::atomic_flag g_deciding = ATOMIC_FLAG_INIT;

const char* env_lookup(const char* name, void*) {
  return getenv(name);
}

// Decides once the environment exists; false while undecided or off.
bool decide() {
  int m = g_mode.load(std::memory_order_acquire);
  if (__builtin_expect(m != kUndecided, 1)) return m == kOn;
  if (environ == nullptr) return false; // the loader's early calls: glibc serves them
  // Another thread deciding (or this one, re-entered): glibc serves meanwhile.
  if (g_deciding.test_and_set(std::memory_order_acq_rel)) return false;
  // Invalid values are reported by preload/config.cc (which then disables
  // xpress); here they simply turn the hook off.  A secure-execution
  // process passes through (preload/config.h).
  settings::Sources src;
  src.env = env_lookup;
  src.read = settings::read_file;
  src.program = program_invocation_short_name != nullptr ? program_invocation_short_name : "";
  src.secure = getauxval(AT_SECURE) != 0;
  const settings::Slot* v = g_settings.slot;
  bool on = settings::resolve(src, &g_settings) && !src.secure && v[settings::kENABLE].num == 1 &&
            v[settings::kALLOC].num == 1;
  size_t min_kb = v[settings::kALLOC_MIN_KB].num;
  arena::Options o;
  o.hugetlb = v[settings::kALLOC_HUGETLB].num == 1;
  if (on) on = arena::init(o);
  g_min.store(on ? min_kb << 10 : SIZE_MAX, std::memory_order_relaxed);
  int expected = kUndecided;
  g_mode.compare_exchange_strong(expected, on ? kOn : kOff, std::memory_order_acq_rel);
  return g_mode.load(std::memory_order_acquire) == kOn;
}

// glibc's malloc_usable_size has no __libc_ alias: looked up once, in libc
// itself (RTLD_NEXT could find another allocator's, e.g. a jemalloc the
// program links, or a sanitizer's, which do not know glibc's blocks).  dlopen
// and dlsym may allocate; those small requests never come back here.
using usable_fn = size_t (*)(void*);
std::atomic<usable_fn> g_libc_usable{nullptr};
size_t libc_usable_size(void* p) {
#if defined(__SANITIZE_ADDRESS__)
  return ::malloc_usable_size(p);
#endif
  usable_fn f = g_libc_usable.load(std::memory_order_acquire);
  if (f == nullptr) {
    void* libc = dlopen(LIBC_SO, RTLD_LAZY | RTLD_NOLOAD);
    if (libc != nullptr) f = reinterpret_cast<usable_fn>(dlsym(libc, "malloc_usable_size"));
    if (f == nullptr) return 0;
    g_libc_usable.store(f, std::memory_order_release);
  }
  return f(p);
}

// An arena block, or null when the arena does not serve this request (off,
// in a cold path, full): the caller then uses glibc.
void* from_arena(size_t n, size_t align, bool* zeroed) {
  *zeroed = false;
  if (!decide() || arena::in_cold_path()) return nullptr;
  if (n < g_min.load(std::memory_order_relaxed)) return nullptr; // undecided before
  void* p = arena::allocate(n, align, zeroed);
  if (p == nullptr) mem_stats().arena_fallbacks.fetch_add(1, std::memory_order_relaxed);
  return p;
}

bool mul_overflows(size_t a, size_t b, size_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

size_t round_pow2(size_t a) {
  if (a <= 1) return 1;
  if (a > (SIZE_MAX >> 1) + 1) return 0;
  return size_t{1} << (64 - __builtin_clzl(a - 1));
}

void* aligned(size_t align, size_t size) {
  if (size >= g_min.load(std::memory_order_relaxed)) {
    bool z;
    if (void* p = from_arena(size, align, &z)) return p;
  }
  return XP_LIBC(memalign)(align, size);
}

} // namespace

void* malloc(size_t n) {
  if (__builtin_expect(n < g_min.load(std::memory_order_relaxed), 1)) return XP_LIBC(malloc)(n);
  bool z;
  if (void* p = from_arena(n, 0, &z)) return p;
  return XP_LIBC(malloc)(n);
}

void* calloc(size_t n, size_t size) {
  size_t total;
  if (mul_overflows(n, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  if (__builtin_expect(total < g_min.load(std::memory_order_relaxed), 1))
    return XP_LIBC(calloc)(n, size);
  bool zeroed;
  if (void* p = from_arena(total, 0, &zeroed)) {
    if (!zeroed) memset(p, 0, total);
    return p;
  }
  return XP_LIBC(calloc)(n, size);
}

void free(void* p) {
  if (arena::contains(p)) {
    arena::release(p);
    return;
  }
  XP_LIBC(free)(p);
}

void* realloc(void* p, size_t n) {
  if (p == nullptr) return heap::malloc(n);
  size_t min = g_min.load(std::memory_order_relaxed);
  if (!arena::contains(p)) {
    if (n < min) return XP_LIBC(realloc)(p, n);
    // Growing across the threshold: the block moves into the arena.
    size_t have = libc_usable_size(p);
    bool z;
    void* q = have != 0 ? from_arena(n, 0, &z) : nullptr;
    if (q == nullptr) return XP_LIBC(realloc)(p, n);
    memcpy(q, p, have < n ? have : n);
    XP_LIBC(free)(p);
    return q;
  }
  if (n == 0) { // glibc: realloc(p, 0) frees p and returns null
    arena::release(p);
    return nullptr;
  }
  size_t cap = arena::usable_size(p);
  // Stay in place unless the block would waste more than half of itself.
  if (n <= cap && n >= min && n > cap / 2) return p;
  // Growing: the free pages after it, if any, save the copy.
  if (n > cap && arena::grow_in_place(p, n)) return p;
  void* q = heap::malloc(n); // below the threshold: back to glibc
  if (q == nullptr) return nullptr;
  memcpy(q, p, cap < n ? cap : n);
  arena::release(p);
  return q;
}

void* reallocarray(void* p, size_t n, size_t size) {
  size_t total;
  if (mul_overflows(n, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  return heap::realloc(p, total);
}

int posix_memalign(void** out, size_t align, size_t size) {
  if (align < sizeof(void*) || (align & (align - 1)) != 0) return EINVAL;
  int saved = errno;
  void* p = aligned(align, size);
  if (p == nullptr) return ENOMEM;
  errno = saved;
  *out = p;
  return 0;
}

void* aligned_alloc(size_t align, size_t size) {
  // glibc 2.36 accepts any alignment here, as memalign does.
  return heap::memalign(align, size);
}

void* memalign(size_t align, size_t size) {
  size_t a = round_pow2(align); // glibc rounds a non-power of two up
  if (a == 0) {
    errno = EINVAL;
    return nullptr;
  }
  return aligned(a, size);
}

void* valloc(size_t size) {
  if (size < g_min.load(std::memory_order_relaxed)) return XP_LIBC(valloc)(size);
  return aligned(arena::kPage, size);
}

void* pvalloc(size_t size) {
  size_t rounded;
  if (__builtin_add_overflow(size, arena::kPage - 1, &rounded)) {
    errno = ENOMEM;
    return nullptr;
  }
  rounded &= ~(arena::kPage - 1);
  if (rounded == 0) rounded = arena::kPage;
  if (rounded < g_min.load(std::memory_order_relaxed)) return XP_LIBC(pvalloc)(size);
  return aligned(arena::kPage, rounded);
}

size_t malloc_usable_size(void* p) {
  if (p == nullptr) return 0;
  if (arena::contains(p)) return arena::usable_size(p);
  return libc_usable_size(p);
}

bool hook_enabled() {
  return decide();
}

size_t threshold() {
  return decide() ? g_min.load(std::memory_order_relaxed) : SIZE_MAX;
}

// Nothing until the arenas or the registration cache were used
// (common/fork_parts.h).  A process with more than one thread counts as
// using them at its first fork: another thread may be making the first
// allocation from the arenas while it forks, after the prepare handler
// found them unused; locked from then on, the locks are always held across
// the fork.  The parent's handler unlocks only what the prepare handler
// locked: another library's fork handler (or a signal handler) may make the
// process's first arena allocation in between (fork_parts::take_prepared).
void before_fork() {
  if (!fork_parts::used(fork_parts::kAlloc)) {
    if (__libc_single_threaded) return;
    fork_parts::mark(fork_parts::kAlloc);
  }
  reg_cache::before_fork();
  arena::before_fork();
  fork_parts::set_prepared(fork_parts::kAlloc);
}

void after_fork_parent() {
  if (!fork_parts::take_prepared(fork_parts::kAlloc)) return;
  arena::after_fork_parent();
  reg_cache::after_fork_parent();
}

void after_fork_child() {
  // The stream layer counts its copies here too, with or without arenas.
  if (fork_parts::used(fork_parts::kAlloc) || fork_parts::used(fork_parts::kEngine))
    mem_stats_after_fork_child();
  if (!fork_parts::used(fork_parts::kAlloc)) return;
  fork_parts::take_prepared(fork_parts::kAlloc); // the child re-makes the locks, held or not
  // The parent's registrations belong to its protection domains: forget
  // them (never deregister: the uverbs file is shared with the parent).
  arena::after_fork_child();
  reg_cache::after_fork_child();
}

void configure_for_test(bool on, size_t min_bytes) {
  if (on) on = arena::init(arena::Options{});
  g_min.store(on ? min_bytes : SIZE_MAX, std::memory_order_relaxed);
  g_mode.store(on ? kOn : kOff, std::memory_order_release);
}

} // namespace xp::alloc::heap
