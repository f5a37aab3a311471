#include "common/status.h"

namespace xp {

const char* status_name(Status s) {
  switch (s) {
  case Status::ok:
    return "ok";
  case Status::no_resource:
    return "no_resource";
  case Status::would_block:
    return "would_block";
  case Status::in_progress:
    return "in_progress";
  case Status::closed:
    return "closed";
  case Status::unsupported:
    return "unsupported";
  case Status::invalid:
    return "invalid";
  case Status::io_error:
    return "io_error";
  case Status::timed_out:
    return "timed_out";
  case Status::errno_value:
    return "errno_value";
  case Status::reset:
    return "reset";
  case Status::shut_down:
    return "shut_down";
  case Status::interrupted:
    return "interrupted";
  case Status::bad_fd:
    return "bad_fd";
  case Status::to_kernel:
    return "to_kernel";
  case Status::look_again:
    return "look_again";
  }
  return "unknown";
}

} // namespace xp
