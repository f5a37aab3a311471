// Copies of stream payload on the RDMA data path: a send into the staging
// mirror, a receive out of the ring.  Large ones go through a routine chosen
// once by timing, when the engine is first idle (XPRESS_COPY; memcpy until
// then): glibc's memcpy, or a plain
// vector loop when that is decisively faster on this CPU.
//
// Why: glibc picks `rep movsb` for copies from a few KiB up, which is the
// fastest on CPUs with ERMS; under an emulating hypervisor (qemu TCG, our
// Soft-RoCE test bed) the same instruction runs several times slower than
// 16/32-byte vector moves (docs/results/tuning.md).  A real CPU keeps
// memcpy (it wins or ties the timing).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace xp {

enum class CopyMode : uint8_t { automatic, libc, vector };

using CopyFn = void* (*)(void*, const void*, size_t);

namespace copy_detail {
// Below this, memcpy's own small-size paths are used as they are.
constexpr size_t kLargeMin = 1024;
extern std::atomic<CopyFn> g_large;
} // namespace copy_detail

// n may be 0 with a null buffer (an empty send, a ring not yet mapped):
// memcpy's arguments must not be null even then (C11 7.24.1p2).
inline void bulk_copy(void* dst, const void* src, size_t n) {
  if (n < copy_detail::kLargeMin) {
    if (n != 0) memcpy(dst, src, n);
    return;
  }
  copy_detail::g_large.load(std::memory_order_relaxed)(dst, src, n);
}

// One candidate routine; index 0 is always glibc's memcpy.
struct CopyImpl {
  const char* name;
  CopyFn fn;
};
// The candidates this CPU can run (libc first, then vector loops by width).
size_t copy_impls(const CopyImpl** out);

// Which candidate to use given each one's best time for the same copy
// (ns[0] is libc's): the fastest, but another than libc only when libc takes
// at least kCopyMargin times as long, so timing noise on a real CPU never
// moves it off memcpy.  Pure, for the tests.
constexpr double kCopyMargin = 1.5;
size_t pick_copy(const uint64_t* ns, size_t n);

struct CopyChoice {
  const char* name = "libc";
  uint64_t libc_ns = 0;   // best time of a 64 KiB copy with memcpy (0: not timed)
  uint64_t chosen_ns = 0; // and with the chosen routine
};

// Sets the routine bulk_copy uses for large copies.  automatic: time every
// candidate on a 64 KiB copy (about 1 ms under TCG, microseconds on a real
// CPU) and pick_copy; libc: memcpy; vector: the widest vector loop.  Call
// once (the engine thread does, before its first channel); until then
// large copies use memcpy.
CopyChoice select_bulk_copy(CopyMode mode);

// The routine large copies use now ("libc", "sse2", "avx2"); the engine logs
// select_bulk_copy's answer, the tests read this.
const char* bulk_copy_name();

} // namespace xp
