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

} // namespace xp::preload
