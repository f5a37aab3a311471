// What a data call below the extern "C" boundary did: moved n bytes (a
// count, 0 for end of stream), or a Status saying what happened instead,
// with the kernel's own errno for Status::errno_value.  Only preload/ turns
// it into the libc return (-1 and errno, preload/io_boundary.h), once.
// Sixteen bytes: returned in two registers on the data path.
#pragma once
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <sys/types.h>

#include "common/status.h"

namespace xp {

struct IoResult {
  ssize_t n = 0;
  Status st = Status::ok;
  int32_t err = 0; // st == Status::errno_value only

  static constexpr IoResult bytes(size_t n) { return {static_cast<ssize_t>(n), Status::ok, 0}; }
  static constexpr IoResult fail(Status s) { return {0, s, 0}; }
  // A failed system call's errno, with the two the data path acts on named.
  static IoResult from_errno(int e) {
    if (e == EAGAIN || e == EWOULDBLOCK) return fail(Status::would_block);
    if (e == EINTR) return fail(Status::interrupted);
    return {0, Status::errno_value, e};
  }

  constexpr bool ok() const { return st == Status::ok; }
  constexpr bool is(Status s) const { return st == s; }
  // The errno the libc call reports for a failure.
  int error() const { return st == Status::errno_value ? err : status_errno(st); }
};

} // namespace xp
