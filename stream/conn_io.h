// The socket data calls on a connection xpress carries (phase upgrading or
// rdma): reads and writes go to TCP below each direction's switch offset
// and to the stream above it, with the kernel's blocking, timeout, EOF and
// error behaviour.  Each says what the libc call would (common/io_result.h:
// a count, or the status whose errno it reports); Status::to_kernel means
// the connection is (now) plain TCP: nothing was done and the caller makes
// the kernel call itself.
#pragma once
#include <sys/types.h>
#include <sys/uio.h>

#include "common/io_result.h"
#include "stream/conn.h"

namespace xp::stream::io {

IoResult recv(Conn* c, const iovec* iov, int iovcnt, int flags);
IoResult send(Conn* c, const iovec* iov, int iovcnt, int flags);
IoResult shutdown(Conn* c, int how); // 0 bytes when done
// FIONREAD / SIOCINQ: the count in bytes.
IoResult readable_bytes(Conn* c);
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
