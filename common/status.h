// One status type for every layer (UCX's ucs_status_t idea): internal code
// returns Status; only the extern "C" boundary in preload/ turns it into -1/errno.
#pragma once
#include <cerrno>
#include <cstdint>

namespace xp {

enum class Status : int32_t {
  ok = 0,
  no_resource, // back-pressure: retry later from the pending queue (send window full)
  would_block, // the caller asked not to block and nothing can proceed now
  in_progress, // started; completion is reported later
  closed,      // orderly end of stream
  unsupported, // this path cannot serve the request; the caller falls back
  invalid,     // bad argument or malformed input
  io_error,    // transport failure; recovery decides what happens next
  timed_out,
  errno_value, // carry a kernel errno unchanged (stored next to the status)
};

const char* status_name(Status s);

// The errno a socket call reports for a status (used once, at the boundary).
inline int status_errno(Status s) {
  switch (s) {
  case Status::ok:
    return 0;
  case Status::no_resource:
  case Status::would_block:
    return EAGAIN;
  case Status::in_progress:
    return EINPROGRESS;
  case Status::closed:
    return EPIPE;
  case Status::unsupported:
    return EOPNOTSUPP;
  case Status::invalid:
    return EINVAL;
  case Status::io_error:
    return EIO;
  case Status::timed_out:
    return ETIMEDOUT;
  case Status::errno_value:
    return EIO;
  }
  return EIO;
}

} // namespace xp
