// The large-copy routine of the data path, chosen once (common/bulk_copy.h).
#include "common/bulk_copy.h"

#include <sys/mman.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#if defined(__clang__)
// glibc's header is C (_Bool); g++ takes it as an extension, clang++ (the
// fuzz targets' compiler) does not.
#define _Bool bool
#include <sys/platform/x86.h>
#undef _Bool
#else
#include <sys/platform/x86.h>
#endif
#endif

namespace xp {

namespace copy_detail {
std::atomic<CopyFn> g_large{&memcpy};
} // namespace copy_detail

namespace {

#if defined(__x86_64__)
// Unaligned 16-byte moves, four per step; the tail (< 64 bytes) goes to
// memcpy, whose small-size path is plain moves.
void* copy_sse2(void* dst, const void* src, size_t n) {
  auto* d = static_cast<uint8_t*>(dst);
  auto* s = static_cast<const uint8_t*>(src);
  for (; n >= 64; n -= 64, d += 64, s += 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 48), e);
  }
  if (n) memcpy(d, s, n);
  return dst;
}

// The same with 32-byte moves; only offered when the CPU has AVX2.  The
// compiler ends the function (and precedes the memcpy call) with vzeroupper.
__attribute__((target("avx2"))) void* copy_avx2(void* dst, const void* src, size_t n) {
  auto* d = static_cast<uint8_t*>(dst);
  auto* s = static_cast<const uint8_t*>(src);
  for (; n >= 128; n -= 128, d += 128, s += 128) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32));
    __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 64));
    __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 96));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), a);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + 32), b);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + 64), c);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + 96), e);
  }
  if (n) memcpy(d, s, n);
  return dst;
}
#endif

struct Impls {
  CopyImpl v[3];
  size_t n = 0;
  Impls() {
    v[n++] = {"libc", &memcpy};
#if defined(__x86_64__)
    v[n++] = {"sse2", &copy_sse2};
    // glibc's own CPU feature table (filled at start-up anyway), not
    // __builtin_cpu_supports: that links libgcc's cpuinfo, whose
    // constructor runs cpuid at every exec (a trap under virtualisation).
    if (CPU_FEATURE_ACTIVE(AVX2)) v[n++] = {"avx2", &copy_avx2};
#endif
  }
};

const Impls& impls() {
  static const Impls i;
  return i;
}

uint64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000000u + static_cast<uint64_t>(t.tv_nsec);
}

// Best of a few 64 KiB copies between two page-aligned buffers (the data
// path's typical record), after one untimed copy to warm caches and code.
uint64_t time_copy(CopyFn fn, uint8_t* dst, const uint8_t* src) {
  constexpr size_t kLen = 64u << 10;
  constexpr int kReps = 4;
  fn(dst, src, kLen);
  uint64_t best = UINT64_MAX;
  for (int r = 0; r < kReps; ++r) {
    uint64_t t0 = now_ns();
    fn(dst + (r & 1) * 64, src, kLen); // an odd and an even destination alignment
    asm volatile("" ::"r"(dst) : "memory");
    uint64_t t = now_ns() - t0;
    if (t < best) best = t;
  }
  return best ? best : 1;
}

void use(const CopyImpl& i) {
  copy_detail::g_large.store(i.fn, std::memory_order_relaxed);
}

} // namespace

size_t copy_impls(const CopyImpl** out) {
  *out = impls().v;
  return impls().n;
}

size_t pick_copy(const uint64_t* ns, size_t n) {
  size_t best = 0;
  for (size_t i = 1; i < n; ++i)
    if (ns[i] < ns[best]) best = i;
  if (best != 0 && static_cast<double>(ns[0]) < kCopyMargin * static_cast<double>(ns[best]))
    return 0;
  return best;
}

CopyChoice select_bulk_copy(CopyMode mode) {
  const Impls& im = impls();
  CopyChoice c;
  if (mode == CopyMode::libc || im.n == 1) {
    use(im.v[0]);
    return c;
  }
  if (mode == CopyMode::vector) {
    use(im.v[im.n - 1]);
    c.name = im.v[im.n - 1].name;
    return c;
  }
  // Own pages (not the hooked allocator): 64 KiB source, 64 KiB + 64 target.
  constexpr size_t kMap = 256u << 10;
  void* m = mmap(nullptr, kMap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    use(im.v[0]);
    return c;
  }
  auto* src = static_cast<uint8_t*>(m);
  uint8_t* dst = src + (128u << 10);
  memset(m, 0x5a, kMap);
  uint64_t ns[3] = {};
  for (size_t i = 0; i < im.n; ++i)
    ns[i] = time_copy(im.v[i].fn, dst, src);
  munmap(m, kMap);
  size_t k = pick_copy(ns, im.n);
  use(im.v[k]);
  c.name = im.v[k].name;
  c.libc_ns = ns[0];
  c.chosen_ns = ns[k];
  return c;
}

const char* bulk_copy_name() {
  // Named by the routine itself: no second variable to keep in step.
  const CopyFn f = copy_detail::g_large.load(std::memory_order_relaxed);
  const Impls& im = impls();
  for (size_t i = 0; i < im.n; ++i)
    if (im.v[i].fn == f) return im.v[i].name;
  return im.v[0].name;
}

} // namespace xp
