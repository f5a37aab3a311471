// Walking a caller's iovec array: the total length, and the part after a
// number of bytes already done (a send or recv that resumes after a partial
// transfer, on RDMA or on TCP after recovery).
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

namespace xp::stream {

// At most this many elements are handed on at once; larger arrays are
// transferred in several passes (like the kernel's UIO_MAXIOV, but smaller so
// the copies live on the stack).
constexpr int kMaxIov = 64;

inline size_t iov_total_len(const iovec* iov, int n) {
  size_t t = 0;
  for (int i = 0; i < n; ++i)
    t += iov[i].iov_len;
  return t;
}

// The iovec tail after skipping `skip` bytes, capped at `cap` bytes and at
// kMaxIov elements, into `out`; returns the number of elements.
inline int iov_slice(const iovec* iov, int n, size_t skip, iovec* out, size_t cap = SIZE_MAX) {
  int k = 0;
  for (int i = 0; i < n && k < kMaxIov && cap > 0; ++i) {
    size_t len = iov[i].iov_len;
    if (skip >= len) {
      skip -= len;
      continue;
    }
    size_t take = len - skip;
    if (take > cap) take = cap;
    out[k].iov_base = static_cast<char*>(iov[i].iov_base) + skip;
    out[k].iov_len = take;
    ++k;
    cap -= take;
    skip = 0;
  }
  return k;
}

} // namespace xp::stream
