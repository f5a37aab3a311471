// The socket data calls of a resumed connection (docs/protocol.md §7): the
// stream continues on the kernel TCP socket, in frames after each
// switched direction's S, with the kernel's blocking, timeout, EOF and
// error behaviour.  Runs at TCP speed under Conn::mu; the sleeps are in
// poll(), outside the lock.
#include <cerrno>
#include <climits>
#include <csignal>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/lock_check.h"
#include "common/logsink.h"
#include "stream/conn_io.h"
#include "stream/engine_internal.h"
#include "stream/iov_slice.h"
#include "stream/reattach.h"
#include "stream/resume_internal.h"
#include "stream/signal_gate.h"
#include "stream/wake.h"

namespace xp::stream::resume {
namespace {

// Raw bytes below the peer's S first, then (once none is left in the
// kernel) the stream bytes.
size_t take(Resume* r, const iovec* iov, int iovcnt, size_t skip, bool peek) {
  iovec v[kMaxIov];
  int k = iov_slice(iov, iovcnt, skip, v);
  size_t got = 0, pre_off = 0, buf_off = 0;
  for (int i = 0; i < k; ++i) {
    auto* dst = static_cast<uint8_t*>(v[i].iov_base);
    size_t len = v[i].iov_len, filled = 0;
    while (filled < len) {
      size_t g = 0;
      if (r->pre.size() > pre_off) {
        g = r->pre.get(dst + filled, len - filled, peek, pre_off);
        if (peek) pre_off += g;
      } else if (r->raw_left == 0 && r->buf.size() > buf_off) {
        g = r->buf.get(dst + filled, len - filled, peek, buf_off);
        if (peek) buf_off += g;
      }
      if (g == 0) break;
      filled += g;
    }
    got += filled;
    if (filled < len) break;
  }
  return got;
}

bool drained(const Resume* r) {
  return r->pre.size() == 0 && (r->buf.size() == 0 || r->raw_left > 0);
}

// The end of the stream once everything before it was delivered: 0 (EOF),
// or ECONNRESET once (then 0) when it ended abnormally; -1 when not at the
// end.
int at_end(Conn* c, Resume* r) {
  if (!drained(r)) return -1;
  if (r->broken) return c->err_pending.exchange(false) ? ECONNRESET : 0;
  if (r->fin && r->buf.size() == 0) return 0; // the peer's FIN came over RDMA
  if (!r->eof) return -1;
  // TCP ended: before the peer's S, or in a framed direction without the
  // peer ever resuming (its process died, or it reset), bytes may be
  // missing: an error, as TCP reports a connection that broke.
  if (r->raw_left > 0 || (r->rx_framed && !r->peer_resumed)) {
    XP_SLOG(XP_SLOG_INFO, "fd %d: resumed stream: TCP ended before the peer resumed: reset",
            c->sock());
    r->broken = true;
    c->err_pending.store(false); // reported now
    return ECONNRESET;
  }
  return 0;
}

// Sleep until a wake-up for c, the socket's `ev` or 100 ms (every state
// change is re-checked by the caller).  The first call only holds signals
// (signal_gate.h) and returns for that re-check.  Otherwise the call ends:
// would_block at the deadline, interrupted.
IoResult wait(Conn* c, short ev, int64_t deadline_ms, SignalGate* gate) {
  if (!gate->held()) {
    gate->hold();
    return {};
  }
  int timeout = 100;
  if (!sleep_timeout(deadline_ms, static_cast<int64_t>(engine::now_ms()), 100, &timeout))
    return IoResult::fail(Status::would_block);
  int efd = wake::thread_fd();
  bool reg = efd >= 0 && wake::add(efd, c);
  pollfd p[2] = {{reg ? efd : -1, POLLIN, 0}, {ev ? c->sock() : -1, ev, 0}};
  long n = gate->sleep_call(p, 2, timeout, deadline_ms >= 0);
  int saved = errno;
  if (reg) {
    wake::drain(efd);
    wake::remove(efd);
  }
  if (n < 0) return IoResult::from_errno(saved); // EINTR
  return {};
}

int64_t deadline_for(Conn* c, int opt) {
  int64_t t = io::conn_timeout_ms(c, opt);
  return t < 0 ? -1 : static_cast<int64_t>(engine::now_ms()) + t;
}

// The program's bytes into `out` (framed or raw, as the direction goes).
size_t put_app(Resume* r, const iovec* iov, int iovcnt, size_t skip) {
  const bool framed = r->tx == Resume::Tx::framed;
  const size_t hdr = framed ? recover::kFrameHeaderBytes : 0;
  iovec v[kMaxIov];
  int k = iov_slice(iov, iovcnt, skip, v);
  size_t took = 0;
  for (int i = 0; i < k; ++i) {
    const auto* p = static_cast<const uint8_t*>(v[i].iov_base);
    size_t left = v[i].iov_len;
    while (left > 0) { // one frame at a time: its header must fit too
      size_t room = r->out.space();
      if (room <= hdr) return took;
      size_t n = left < room - hdr ? left : room - hdr;
      if (n > kFrameChunk) n = kFrameChunk;
      queue_data(r, p, n, r->tx_next, framed);
      r->tx_next += n;
      took += n;
      p += n;
      left -= n;
    }
  }
  return took;
}

} // namespace

IoResult recv(Conn* c, const iovec* iov, int iovcnt, int flags, size_t* done) {
  const size_t want = iov_total_len(iov, iovcnt);
  const bool peek = flags & MSG_PEEK;
  const bool waitall = (flags & MSG_WAITALL) && !peek;
  const bool nonblock = (flags & MSG_DONTWAIT) || io::conn_nonblocking(c);
  int64_t deadline = -2;
  SignalGate gate;
  size_t got = *done;
  while (true) {
    size_t n = 0;
    int end = -1;
    bool to_kernel = false;
    {
      std::lock_guard<std::mutex> l(c->mu);
      Resume* r = c->rs;
      if (r == nullptr || c->rx_rdma.load()) {
        // Back on RDMA (stream/reattach.cc): the stream serves the rest.
        if (!c->closed.load() && (r != nullptr || !c->resumed.load())) {
          *done = got;
          return IoResult::fail(Status::look_again);
        }
        return got > 0 ? IoResult::bytes(got) : IoResult::fail(Status::bad_fd); // closed under us
      }
      if (c->phase.load() == Phase::tcp) { // a moved stream, handed back
        *done = got;
        return IoResult::fail(Status::to_kernel);
      }
      n = take(r, iov, iovcnt, got, peek);
      bool moved = false;
      if (n == 0) {
        moved = fill_rx(c, r);
        flush_out(c, r); // the peer's RESUME may have released our bytes
        n = take(r, iov, iovcnt, got, peek);
      }
      if (n == 0) end = at_end(c, r);
      settle(c, r, moved);
      to_kernel = n == 0 && end < 0 && c->phase.load() == Phase::tcp;
      if (n == 0 && end < 0 && !to_kernel) {
        // Everything before the peer's SWITCHBACK read: its direction may
        // go back to the stream now (r may be gone after this).
        reattach::advance(c);
        if (c->rs != r || c->rx_rdma.load()) {
          *done = got;
          return IoResult::fail(Status::look_again);
        }
      }
    }
    if (to_kernel) {
      *done = got;
      return IoResult::fail(Status::to_kernel);
    }
    if (n > 0) {
      got += n;
      if (!waitall || got >= want) return IoResult::bytes(got);
      continue;
    }
    if (end >= 0) {
      if (got > 0 || end == 0) return IoResult::bytes(got);
      return IoResult::fail(Status::reset); // at_end's ECONNRESET
    }
    if (nonblock) {
      c->ready.last_ready.fetch_and(~static_cast<uint32_t>(POLLIN), std::memory_order_acq_rel);
      return got > 0 ? IoResult::bytes(got) : IoResult::fail(Status::would_block);
    }
    if (deadline == -2) deadline = deadline_for(c, SO_RCVTIMEO);
    IoResult slept = wait(c, POLLIN, deadline, &gate);
    if (!slept.ok()) return got > 0 ? IoResult::bytes(got) : slept;
  }
}

IoResult send(Conn* c, const iovec* iov, int iovcnt, int flags, size_t* done) {
  const size_t want = iov_total_len(iov, iovcnt);
  const bool nonblock = (flags & MSG_DONTWAIT) || io::conn_nonblocking(c);
  int64_t deadline = -2;
  SignalGate gate;
  size_t sent = *done;
  while (true) {
    Status err = Status::ok;
    bool waiting = false, empty = false;
    {
      std::lock_guard<std::mutex> l(c->mu);
      Resume* r = c->rs;
      if (r == nullptr || r->tx == Resume::Tx::back) {
        // Our direction is back on RDMA (stream/reattach.cc): the stream
        // takes the rest.
        if (!c->closed.load() && (r != nullptr || !c->resumed.load())) {
          *done = sent;
          return IoResult::fail(Status::look_again);
        }
        return sent > 0 ? IoResult::bytes(sent) : IoResult::fail(Status::bad_fd);
      }
      // A moved stream's bytes go on raw (after its RESUME): the kernel's
      // call, exactly.
      if (r->moved && r->tx != Resume::Tx::dead && r->out.size() == 0) {
        *done = sent;
        return IoResult::fail(Status::to_kernel);
      }
      flush_out(c, r);
      if (r->tx == Resume::Tx::wait) { // the peer's RESUME may be in the kernel
        bool moved = fill_rx(c, r);
        flush_out(c, r);
        settle(c, r, moved);
      }
      switch (r->tx) {
      case Resume::Tx::dead:
        err = c->err_pending.exchange(false) ? Status::reset : Status::closed;
        break;
      case Resume::Tx::shut:
        err = Status::shut_down;
        break;
      case Resume::Tx::wait:
        waiting = true;
        break;
      default:
        if (r->tx_eof || r->app_shut) {
          err = Status::shut_down;
          break;
        }
        sent += put_app(r, iov, iovcnt, sent);
        flush_out(c, r);
      }
      empty = r->out.size() == 0;
      settle(c, r, false);
      reattach::advance(c); // our frames left: our direction may go back (r may be gone)
    }
    if (err != Status::ok) {
      if (sent > 0) return IoResult::bytes(sent);
      if (err != Status::reset && !(flags & MSG_NOSIGNAL)) raise(SIGPIPE); // EPIPE
      return IoResult::fail(err);
    }
    // A blocking send returns once its bytes are in the kernel, as the
    // kernel's would; a non-blocking one once they are queued.
    if (sent >= want && (empty || nonblock)) return IoResult::bytes(sent);
    if (nonblock) {
      c->ready.last_ready.fetch_and(~static_cast<uint32_t>(POLLOUT), std::memory_order_acq_rel);
      return sent > 0 ? IoResult::bytes(sent) : IoResult::fail(Status::would_block);
    }
    if (deadline == -2) deadline = deadline_for(c, SO_SNDTIMEO);
    IoResult slept = wait(c, waiting ? 0 : POLLOUT, deadline, &gate);
    if (!slept.ok()) return sent > 0 ? IoResult::bytes(sent) : slept;
  }
}

IoResult shutdown(Conn* c, int how) {
  XP_ASSERT_HELD(c->mu);
  Resume* r = c->rs;
  if (r != nullptr && r->moved) {
    // Nothing of ours waits in user space: the kernel's shutdown, at once
    // (reads of bytes still buffered here end as the kernel's would).
    if (syscall(SYS_shutdown, c->sock(), how) != 0) return IoResult::from_errno(errno);
    if (how != SHUT_RD) r->app_shut = true;
    if (how != SHUT_WR) c->rd_shut.store(true);
    settle(c, r, false);
    c->ready.gen.fetch_add(1);
    wake::notify();
    return IoResult::bytes(0);
  }
  if (r != nullptr && how != SHUT_RD && !r->app_shut && r->tx == Resume::Tx::back) {
    // Back on RDMA: the FIN goes over the channel after our bytes there.
    // The kernel's waits until the return is final (reattach::finish):
    // should this channel fail too, our RESUME and frames still go on TCP
    // (then the kernel's FIN after them, reattach::fold).
    r->app_shut = true;
    engine::shut_write(c);
    flush_out(c, r);
  }
  if (r != nullptr && how != SHUT_RD && !r->app_shut) {
    r->app_shut = true;
    if (r->tx == Resume::Tx::raw || r->tx == Resume::Tx::framed || r->tx == Resume::Tx::wait) {
      // After what the program wrote (and what we re-send) reached the kernel.
      r->shut_pending = true;
      flush_out(c, r);
    }
  }
  if (how != SHUT_WR) c->rd_shut.store(true); // the kernel keeps reading: a RESUME may follow
  if (r) settle(c, r, false);
  c->ready.gen.fetch_add(1);
  wake::notify();
  return IoResult::bytes(0);
}

IoResult readable_bytes(Conn* c) {
  std::lock_guard<std::mutex> l(c->mu);
  Resume* r = c->rs;
  size_t n = 0;
  if (r && c->rx_rdma.load()) { // back on RDMA (stream/reattach.cc)
    if (Channel* ch = c->ch) {
      std::lock_guard<std::mutex> chl(ch->mu);
      n = c->st ? c->st->readable_bytes() : 0;
    }
  } else if (r) {
    bool moved = fill_rx(c, r);
    n = r->pre.size() + (r->raw_left == 0 ? r->buf.size() : 0);
    int k = 0; // a moved stream's kernel bytes come after ours
    if (r->moved && r->raw_left == 0 && syscall(SYS_ioctl, c->sock(), FIONREAD, &k) == 0 && k > 0)
      n += static_cast<size_t>(k);
    settle(c, r, moved);
  }
  return IoResult::bytes(n > INT_MAX ? INT_MAX : n);
}

} // namespace xp::stream::resume
