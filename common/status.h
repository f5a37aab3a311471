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
  // The data calls' outcomes (stream/conn_io.h, common/io_result.h):
  reset,       // the connection was reset: reported once, as the kernel's ECONNRESET
  shut_down,   // the program shut this direction down (EPIPE)
  interrupted, // a signal ended the wait (EINTR)
  bad_fd,      // another thread closed the descriptor under the call (EBADF)
  to_kernel,   // nothing done: the kernel serves this call (the socket is plain TCP)
  look_again,  // the connection changed state under the call; internal, never returned
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
  case Status::reset:
    return ECONNRESET;
  case Status::shut_down:
    return EPIPE;
  case Status::interrupted:
    return EINTR;
  case Status::bad_fd:
    return EBADF;
  case Status::to_kernel:
  case Status::look_again:
    return EIO; // never reach the boundary as errors
  }
  return EIO;
}

} // namespace xp
