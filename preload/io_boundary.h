// The extern "C" boundary of the data calls: the one place a data call's
// IoResult (common/io_result.h) becomes the libc return, -1 with errno for
// a failure.
#pragma once
#include <cerrno>
#include <sys/types.h>

#include "common/io_result.h"

namespace xp::preload {

inline ssize_t libc_return(const IoResult& r) {
  if (r.ok()) return r.n;
  errno = r.error();
  return -1;
}

// A data call's result as the libc call returns it; *kernel (nothing
// done, 0 returned) when the kernel must make the call (Status::to_kernel).
inline ssize_t served(const IoResult& r, bool* kernel) {
  *kernel = r.is(Status::to_kernel);
  return *kernel ? 0 : libc_return(r);
}

// ioctl(FIONREAD/SIOCINQ) from a count (stream::io::readable_bytes): the
// count in *arg and 0, as the kernel's.
inline int ioctl_count_return(const IoResult& r, int* arg) {
  if (!r.ok()) return static_cast<int>(libc_return(r));
  *arg = static_cast<int>(r.n);
  return 0;
}

} // namespace xp::preload
