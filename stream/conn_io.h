// The socket data calls on a connection xpress carries (phase upgrading or
// rdma): reads and writes go to TCP below each direction's switch offset
// and to the stream above it, with the kernel's blocking, timeout, EOF and
// error behaviour.  Each returns like the libc call (-1 with errno set).
// *kernel = true means the connection is (now) plain TCP: nothing was done
// and the caller makes the kernel call itself.
#pragma once
#include <sys/types.h>
#include <sys/uio.h>

#include "stream/conn.h"

namespace xp::stream::io {

ssize_t recv(Conn* c, const iovec* iov, int iovcnt, int flags, bool* kernel);
ssize_t send(Conn* c, const iovec* iov, int iovcnt, int flags, bool* kernel);
int shutdown(Conn* c, int how, bool* kernel);
// FIONREAD / SIOCINQ.
int readable_bytes(Conn* c, int* out, bool* kernel);
// The program changed some fd's O_NONBLOCK or socket timeouts (fcntl F_SETFL,
// FIONBIO, setsockopt SOL_SOCKET), or forked: the per-connection copies of
// them the blocking calls use are stale.  One atomic increment.
void fd_options_changed();

// For the data calls of resumed connections (stream/resume_io.cc): the
// file's O_NONBLOCK and SO_RCVTIMEO/SO_SNDTIMEO (ms, -1: none) as cached
// here.
bool conn_nonblocking(Conn* c);
int64_t conn_timeout_ms(Conn* c, int opt);

// recv's end of the TCP part (stream/conn_tcp_end.cc), under Conn::mu: the
// kernel said end of stream before any SWITCH from a peer that had our
// PROOF.  True: the peer's direction really ended on TCP; false: the state
// moved (its SWITCH, a failure, a fallback), look again.
bool peer_ended_on_tcp(Conn* c);

} // namespace xp::stream::io
