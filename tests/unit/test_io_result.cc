// One result type for the data calls (common/io_result.h): each outcome
// names the errno the kernel's call would report, and only the boundary
// (preload/io_boundary.h) writes errno.
#include <doctest/doctest.h>

#include <cerrno>
#include <cstring>

#include "common/io_result.h"
#include "preload/io_boundary.h"

using xp::IoResult;
using xp::Status;

TEST_CASE("io result: the data calls' outcomes report the kernel's errno") {
  CHECK(IoResult::fail(Status::would_block).error() == EAGAIN);
  CHECK(IoResult::fail(Status::reset).error() == ECONNRESET);
  CHECK(IoResult::fail(Status::closed).error() == EPIPE);
  CHECK(IoResult::fail(Status::shut_down).error() == EPIPE);
  CHECK(IoResult::fail(Status::interrupted).error() == EINTR);
  CHECK(IoResult::fail(Status::bad_fd).error() == EBADF);
  CHECK(IoResult::fail(Status::invalid).error() == EINVAL);
  // A system call's errno: the two the loops act on are named, the rest
  // travel unchanged.
  CHECK(IoResult::from_errno(EAGAIN).is(Status::would_block));
  CHECK(IoResult::from_errno(EWOULDBLOCK).is(Status::would_block));
  CHECK(IoResult::from_errno(EINTR).is(Status::interrupted));
  IoResult refused = IoResult::from_errno(ECONNREFUSED);
  CHECK(refused.is(Status::errno_value));
  CHECK(refused.error() == ECONNREFUSED);
  // Returned in two registers on the data path.
  static_assert(sizeof(IoResult) == 16);
}

TEST_CASE("io result: every status has a name") {
  for (int s = 0; s <= static_cast<int>(Status::look_again); ++s)
    CHECK(std::strcmp(xp::status_name(static_cast<Status>(s)), "unknown") != 0);
}

TEST_CASE("io result: the boundary sets errno for a failure only") {
  errno = 1234;
  CHECK(xp::preload::libc_return(IoResult::bytes(5)) == 5);
  CHECK(xp::preload::libc_return(IoResult::bytes(0)) == 0);
  CHECK(errno == 1234); // a success leaves the program's errno alone
  CHECK(xp::preload::libc_return(IoResult::fail(Status::reset)) == -1);
  CHECK(errno == ECONNRESET);
  CHECK(xp::preload::libc_return(IoResult::from_errno(EHOSTUNREACH)) == -1);
  CHECK(errno == EHOSTUNREACH);
}

TEST_CASE("io result: FIONREAD returns 0 with the count in its argument") {
  int n = -1;
  CHECK(xp::preload::ioctl_count_return(IoResult::bytes(1234), &n) == 0);
  CHECK(n == 1234);
  n = -1;
  CHECK(xp::preload::ioctl_count_return(IoResult::bytes(0), &n) == 0);
  CHECK(n == 0);
  n = 7;
  CHECK(xp::preload::ioctl_count_return(IoResult::fail(Status::bad_fd), &n) == -1);
  CHECK(errno == EBADF);
  CHECK(n == 7); // untouched on failure
}
