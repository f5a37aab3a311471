// The data calls as the program sees them through the wrappers: the libc
// return (-1 with errno set, preload/io_boundary.h) and *kernel when the
// kernel must serve the call (Status::to_kernel).
#pragma once
#include "preload/io_boundary.h"
#include "stream/conn_io.h"

namespace xp::test {

inline ssize_t call_recv(stream::Conn* c, const iovec* v, int n, int flags, bool* kernel) {
  return preload::served(stream::io::recv(c, v, n, flags), kernel);
}
inline ssize_t call_send(stream::Conn* c, const iovec* v, int n, int flags, bool* kernel) {
  return preload::served(stream::io::send(c, v, n, flags), kernel);
}
inline int call_shutdown(stream::Conn* c, int how, bool* kernel) {
  return static_cast<int>(preload::served(stream::io::shutdown(c, how), kernel));
}

} // namespace xp::test
