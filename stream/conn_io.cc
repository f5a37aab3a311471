// Hot path: the data calls of connections on RDMA (see conn_io.h).  Budget:
// no allocation, no system call while data or window is available (one
// uncontended lock of the channel); system calls only to sleep.
#include "stream/conn_io.h"
#include "common/fork_parts.h"
#include "stream/fork_handover.h"

#include "common/logsink.h"

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <optional>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "alloc/mem_stats.h"
#include "stream/channel_sleep.h"
#include "stream/conn_zerocopy.h"
#include "stream/engine_internal.h"
#include "stream/iov_slice.h"
#include "stream/signal_gate.h"
#include "stream/spin_gate.h"
#include "stream/wake.h"

namespace xp::stream::io {
namespace {

using engine::Changes;

// recv_tcp and recv_stream say Status::closed when the stream was reset
// (after every byte before it).  The error of a reset is reported once,
// like the kernel's pending socket error; afterwards reads see end of
// stream and writes EPIPE.
IoResult reset_read(Conn* c) {
  if (c->err_pending.exchange(false)) return IoResult::fail(Status::reset);
  return IoResult::bytes(0);
}

// The stream is gone from under the call: on TCP now (look again) or reset.
IoResult stream_gone(Conn* c) {
  if (c->resumed.load(std::memory_order_acquire)) return IoResult::fail(Status::look_again);
  return IoResult::fail(Status::reset);
}

bool fd_nonblocking(int fd) {
  long fl = syscall(SYS_fcntl, fd, F_GETFL);
  return fl >= 0 && (fl & O_NONBLOCK);
}

std::atomic<uint32_t> g_opts_gen{1};

// SO_RCVTIMEO / SO_SNDTIMEO in ms; -1 when none.
int64_t sock_timeout_ms(int fd, int opt) {
  timeval tv{};
  socklen_t len = sizeof tv;
  if (syscall(SYS_getsockopt, fd, SOL_SOCKET, opt, &tv, &len) != 0) return -1;
  if (tv.tv_sec == 0 && tv.tv_usec == 0) return -1;
  return static_cast<int64_t>(tv.tv_sec) * 1000 + (tv.tv_usec + 999) / 1000;
}

// The connection's O_NONBLOCK and timeouts, read from the kernel only when
// the program may have changed them since (two system calls saved per
// blocking call: a ping-pong's every receive blocks).
void load_opts(Conn* c) {
  // Before the generation is read: a change made after a fd_options_changed
  // that found nothing cached is seen by the reads below.
  fork_parts::mark(fork_parts::kIo);
  uint32_t g = g_opts_gen.load(std::memory_order_acquire);
  if (c->opts.gen.load(std::memory_order_acquire) == g) return;
  int fd = c->sock();
  c->opts.nonblock.store(fd_nonblocking(fd), std::memory_order_relaxed);
  c->opts.rcvtimeo_ms.store(sock_timeout_ms(fd, SO_RCVTIMEO), std::memory_order_relaxed);
  c->opts.sndtimeo_ms.store(sock_timeout_ms(fd, SO_SNDTIMEO), std::memory_order_relaxed);
  c->opts.gen.store(g, std::memory_order_release);
}
bool nonblocking(Conn* c) {
  load_opts(c);
  return c->opts.nonblock.load(std::memory_order_relaxed);
}
int64_t timeout_ms(Conn* c, int opt) {
  load_opts(c);
  return (opt == SO_RCVTIMEO ? c->opts.rcvtimeo_ms : c->opts.sndtimeo_ms)
      .load(std::memory_order_relaxed);
}

// The spin budget of one blocked call follows its connection's recent
// waits (engine::spin_budget_ns).
uint64_t spin_budget_ns(const Conn* c) {
  return engine::spin_budget_ns(c->opts.wait_avg_us.load(std::memory_order_relaxed));
}
void note_wait(Conn* c, uint64_t waited_ns) {
  uint32_t old = c->opts.wait_avg_us.load(std::memory_order_relaxed);
  c->opts.wait_avg_us.store(engine::wait_avg(old, waited_ns), std::memory_order_relaxed);
}

// Spin, then sleep until something may have changed.
struct Waiter {
  int opt; // SO_RCVTIMEO or SO_SNDTIMEO
  bool started = false, registered = false;
  int efd = -1;
  uint64_t spin_until = 0, began_ns = 0, spin_left_ns = 0;
  int64_t deadline_ms = -1;
  Channel* spinning = nullptr; // the channel this call busy-polls (channel_events.cc)
  Conn* conn = nullptr;
  // The caller's attempt just polled the channel itself (recv_stream and
  // send_stream do before they say EAGAIN): the spin need not poll again
  // before the next attempt (otherwise each round would lock and poll the
  // channel twice).
  bool polled = false;
  // From the first sleep on, signals are let in only while asleep
  // (signal_gate.h).  Calls that only spin pay nothing.
  SignalGate gate;
  spin_gate::Ticket ticket; // spinning takes one (stream/spin_gate.h)
  RoomWait room;            // a send's sleep waits for room (stream/channel_sleep.h)
  // Once registered, whatever this thread changes while it runs (polling
  // the channel) is followed by the caller's re-check before the next
  // sleep: it need not write its own eventfd (and read it back after a
  // spurious wake-up).
  wake::SelfAwake awake;
  explicit Waiter(int o) : opt(o) {}
  ~Waiter() {
    if (registered) wake::remove(efd);
    // A call that was still spinning (a request/response loop's usual
    // return) had the clock read by spin_leave: no second read between the
    // record's arrival and the caller.
    const bool spun = spinning != nullptr;
    stop_spinning();
    if (conn) note_wait(conn, (spun ? spin_left_ns : engine::mono_ns()) - began_ns);
  }
  void stop_spinning() {
    if (spinning) spin_left_ns = engine::spin_leave(spinning);
    spinning = nullptr;
    ticket.release();
  }
  // ok: try again; otherwise the call ends with that status (interrupted,
  // would_block at the socket timeout, a failed sleep's errno).
  IoResult step(Conn* c, int tcp_fd, short tcp_events) {
    uint64_t now = 0;
    if (!started) {
      started = true;
      conn = c;
      now = began_ns = engine::mono_ns();
      spin_until = began_ns + spin_budget_ns(c);
      // No CPU to spare on this host: sleep at once.
      if (spin_until > began_ns && !ticket.acquire(began_ns)) spin_until = began_ns;
      int64_t t = timeout_ms(c, opt);
      if (t >= 0) deadline_ms = static_cast<int64_t>(engine::now_ms()) + t;
    }
    Channel* ch = c->ch;
    const bool caller_polled = polled;
    polled = false;
    if (now == 0) now = engine::mono_ns();
    // Descheduled since the last round: the CPU is wanted elsewhere.
    if (now < spin_until && spinning != nullptr && !ticket.keep(now)) spin_until = now;
    if (now < spin_until) {
      if (ch && spinning == nullptr && !ch->failed.load()) {
        spinning = ch;
        engine::spin_enter(ch);
      }
      if (ch && !caller_polled) engine::progress(ch);
      return {};
    }
    stop_spinning();
    if (!registered) {
      gate.hold();
      efd = wake::thread_fd();
      registered = efd >= 0 && wake::add(efd, c);
      if (registered) awake.start();
      // Room to send comes with credits and acknowledgements: no channel
      // may wait for solicited completions only while this call sleeps.
      // (enter() counts once: this block runs again while no eventfd could
      // be had.)
      if (opt == SO_SNDTIMEO) room.enter();
      if (ch) engine::progress(ch);
      return {}; // check once more now that a change would wake us
    }
    int timeout = -1;
    if (!sleep_timeout(deadline_ms, static_cast<int64_t>(engine::now_ms()), -1, &timeout))
      return IoResult::fail(Status::would_block);
    if (!registered && (timeout < 0 || timeout > 10)) timeout = 10; // no eventfd: poll slowly
    // Sleep on the channel's completion channel too: a record for us wakes
    // this thread directly, without a hop through the engine thread.
    // Whoever takes the completion event (here or the engine) re-arms.
    int cfd = ch && !ch->failed.load() ? ch->link->wait_fd() : -1;
    // Unless another thread busy-polls the channel (a request/response loop
    // on another of its streams): it takes this stream's records too and
    // wakes us through the eventfd (wake::notify).  Sleeping on the
    // completion fd would arm the queue that spinner keeps unarmed and wake
    // this thread for every one of its messages (xpress-bench's idle control
    // connection: ppoll, read, ioctl, 2 epoll_ctl and the channel lock per
    // ping-pong message, on the spinner's CPU).  "At work": spinning now, or
    // within the last kIdleRearmNs after this call's own spin ended (a
    // request/response loop's thread is out of its spin while it writes).
    // A spinner may stop without arming (channel_events.cc): the engine
    // then re-arms and polls for the calls counted as left sleepers
    // (left_enter), and each looks again after kLeftToSpinnerMs at most.
    Channel* left = nullptr;
    bool idle = false; // this call has waited kLeftIdleNs already
    if (cfd >= 0 && registered && engine::others_poll(ch, spin_left_ns)) {
      cfd = -1;
      if (timeout < 0 || timeout > engine::kLeftToSpinnerMs) timeout = engine::kLeftToSpinnerMs;
      left = ch;
      idle = engine::mono_ns() - began_ns > engine::kLeftIdleNs;
    }
    // A send waits for credits and acknowledgements: every completion.  One
    // that armed the channel (nobody took events while it spun) polls once more.
    auto arm = opt == SO_SNDTIMEO ? engine::rearm : engine::arm_for_news;
    if (cfd >= 0 && arm(ch)) {
      engine::progress(ch);
      return {};
    }
    pollfd p[3] = {{efd, POLLIN, 0}, {cfd, POLLIN, 0}, {tcp_fd, tcp_events, 0}};
    int n = tcp_fd >= 0 ? 3 : 2;
    if (!registered) p[0].fd = -1;
    long r;
    if (cfd >= 0) engine::sleep_enter(ch);
    if (left) engine::left_enter(left, idle);
    r = gate.sleep_call(p, n, timeout, deadline_ms >= 0);
    int saved_errno = errno;
    if (left) engine::left_leave(left, idle);
    // The event first, then the engine's watch again: re-enabling a watch
    // on a readable fd would wake the engine for an event this thread takes.
    if (r > 0 && (p[1].revents & POLLIN)) engine::take_event(ch);
    if (cfd >= 0) engine::sleep_leave(ch);
    if (r < 0) return IoResult::from_errno(saved_errno); // EINTR
    if (registered && r > 0 && (p[0].revents & POLLIN)) wake::drain(efd);
    return {};
  }
};

// Bytes below the peer's switch offset, from the kernel socket: a count
// (0: end of stream), would_block (none now), look_again (the state moved)
// or the kernel's error.
IoResult recv_tcp(Conn* c, const iovec* iov, int iovcnt, size_t skip, int flags) {
  std::lock_guard<std::mutex> l(c->mu);
  // resumed: checked again under the lock (resume::start holds it): the
  // caller's lock-free look may predate the resume, and the kernel's
  // bytes are frames now.
  if (c->rx_rdma.load() || c->phase.load() == Phase::tcp || c->resumed.load())
    return IoResult::fail(Status::look_again);
  bool limited = c->sess.rx_mode() == Mode::rdma;
  uint64_t room = c->sess.rx_tcp_remaining();
  if (limited && room == 0) {
    engine::advance(c);
    return IoResult::fail(Status::look_again);
  }
  iovec v[kMaxIov];
  int k = iov_slice(iov, iovcnt, skip, v, limited ? room : SIZE_MAX);
  msghdr m{};
  m.msg_iov = v;
  m.msg_iovlen = static_cast<size_t>(k);
  c->ready.tcp_bits.fetch_and(~static_cast<uint32_t>(EPOLLIN));
  ssize_t n = syscall(SYS_recvmsg, c->sock(), &m, flags | MSG_DONTWAIT);
  if (n < 0) return IoResult::from_errno(errno);
  if (n > 0) {
    // Readiness must not outlive the bytes: a select() that says "readable"
    // is followed by a blocking read.  A short read drained the socket; a
    // full one asks the kernel (new bytes after the call raise the engine's
    // edge again).
    int left = 0;
    if ((flags & MSG_PEEK) || (static_cast<size_t>(n) == iov_total_len(v, k) &&
                               (syscall(SYS_ioctl, c->sock(), FIONREAD, &left) != 0 || left > 0)))
      c->ready.tcp_bits.fetch_or(EPOLLIN);
    if (!(flags & MSG_PEEK)) {
      size_t left = static_cast<size_t>(n);
      for (int i = 0; i < k && left > 0; ++i) {
        size_t take = v[i].iov_len < left ? v[i].iov_len : left;
        c->sess.on_tcp_received(v[i].iov_base, take);
        left -= take;
      }
      engine::advance(c);
    }
  } else if (n == 0 && c->ch && !limited && c->sess.proof_sent()) {
    // End of the TCP stream before the peer's SWITCH was seen: the peer may
    // have switched and closed, its SWITCH still on the way over RDMA (late
    // by a retransmission).  It had our PROOF: wait for its answer on the
    // channel (docs/protocol.md §3).
    if (!peer_ended_on_tcp(c)) return IoResult::fail(Status::look_again);
  }
  return IoResult::bytes(static_cast<size_t>(n));
}

// Bytes from the stream; as recv_tcp, and closed: the stream was reset.
IoResult recv_stream(Conn* c, const iovec* iov, int iovcnt, size_t skip, int flags) {
  Channel* ch = c->ch;
  if (ch == nullptr) return stream_gone(c);
  bool peek = flags & MSG_PEEK;
  size_t got = 0;
  Status st = Status::would_block;
  Changes changed;
  {
    std::lock_guard<std::mutex> l(ch->mu);
    Stream* s = c->st;
    if (s == nullptr) return stream_gone(c);
    iovec v[kMaxIov];
    for (int pass = 0; pass < 2; ++pass) {
      int k = iov_slice(iov, iovcnt, skip + got, v);
      for (int i = 0; i < k; ++i) {
        size_t g = 0;
        st = s->read(v[i].iov_base, v[i].iov_len, &g, peek);
        got += g;
        if (g < v[i].iov_len || peek) break;
      }
      if (got > 0 || st != Status::would_block || pass == 1) break;
      // Nothing buffered: what arrives for this stream while we poll goes
      // straight into the caller's buffer (Stream::lend), then the second
      // pass takes what did not fit from the receive buffer.
      if (!peek) s->lend(v, k);
      engine::progress_locked(ch, c, &changed);
      if (!peek) got = s->take_lent(); // streams leave only outside progress: s is alive
      // Nothing came (a spinning receiver's usual round): the second pass
      // would find what the first did.
      if (got == 0 && !s->readable()) break;
    }
    if (engine::refresh(c)) changed.add(c);
  }
  if (ch->inbox_pending.load(std::memory_order_acquire)) engine::drain_inbox(ch);
  changed.wake();
  if (got > 0 && !peek)
    alloc::mem_stats().rx_copied_bytes.fetch_add(got, std::memory_order_relaxed);
  if (got > 0) return IoResult::bytes(got);
  if (st == Status::ok) return IoResult::bytes(0); // end of stream
  if (ch->failed.load() && !c->dead.load()) {
    engine::channel_failed(ch); // the stream resumes on TCP (stream/resume.h)
    if (c->resumed.load(std::memory_order_acquire)) return IoResult::fail(Status::look_again);
  }
  if (st == Status::closed || ch->failed.load())
    return IoResult::fail(Status::closed); // after the bytes before it
  return IoResult::fail(Status::would_block);
}

IoResult send_tcp(Conn* c, const iovec* iov, int iovcnt, size_t skip, int flags) {
  std::lock_guard<std::mutex> l(c->mu);
  // resumed: see recv_tcp.  A caller that saw the connection not resumed
  // (or resumed with its direction still on the stream) and then our
  // direction off the stream must not write raw bytes among the frames
  // (VM recovery case, inject run: the peer reset the stream on a
  // "malformed frame").
  if (c->tx_rdma.load() || c->phase.load() == Phase::tcp || c->resumed.load())
    return IoResult::fail(Status::look_again);
  if (c->ch) {
    engine::advance(c); // switches now if the peer has proven itself
    if (c->tx_rdma.load()) return IoResult::fail(Status::look_again);
  }
  iovec v[kMaxIov];
  int k = iov_slice(iov, iovcnt, skip, v);
  msghdr m{};
  m.msg_iov = v;
  m.msg_iovlen = static_cast<size_t>(k);
  c->ready.tcp_bits.fetch_and(~static_cast<uint32_t>(EPOLLOUT));
  ssize_t n = syscall(SYS_sendmsg, c->sock(), &m, flags | MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n < 0) return IoResult::from_errno(errno);
  if (n > 0) {
    c->ready.tcp_bits.fetch_or(EPOLLOUT);
    size_t left = static_cast<size_t>(n);
    for (int i = 0; i < k && left > 0; ++i) {
      size_t take = v[i].iov_len < left ? v[i].iov_len : left;
      c->sess.on_tcp_sent(v[i].iov_base, take);
      left -= take;
    }
    if (c->ch) engine::advance(c);
  }
  return IoResult::bytes(static_cast<size_t>(n));
}

// Nothing (left) to send, as libuv's zero-length write: the stream's state
// decides as the kernel's does (ok: 0; shut_down: EPIPE after shutdown;
// invalid: no stream), never a wait for room.  Off the data path.
[[gnu::cold, gnu::noinline]] Status send_empty(Conn* c, Channel* ch, size_t skip, bool more) {
  std::lock_guard<std::mutex> l(ch->mu);
  Stream* s = c->st;
  if (s == nullptr) return Status::invalid;
  size_t d = 0;
  Status st = s->write(nullptr, 0, &d, skip, more);
  if (st == Status::closed && s->write_shut() && !s->was_reset()) st = Status::shut_down;
  return st;
}

// z: this call's zero-copy state (null: copy everything).  An element of at
// least XPRESS_ZEROCOPY_MIN_KB is sent zero-copy when it is the first one
// left and its memory is registered (key found before the lock); a later
// one ends this pass so that the next starts with it.
// more: MSG_MORE (the bytes may wait for the call's successor, Stream::write).
IoResult send_stream(Conn* c, const iovec* iov, int iovcnt, size_t skip, zc::Send* z, bool more) {
  Channel* ch = c->ch;
  if (ch == nullptr) return stream_gone(c);
  bool zc_first = false;
  const size_t zc_min = engine::params().zerocopy_min;
  if (z) {
    size_t off = skip;
    int i = 0;
    while (i < iovcnt && off >= iov[i].iov_len)
      off -= iov[i++].iov_len;
    if (i < iovcnt)
      zc_first = zc::prepare(c, ch, z, static_cast<const char*>(iov[i].iov_base) + off,
                             iov[i].iov_len - off);
  }
  size_t done_total = 0, zc_bytes = 0;
  Status st = Status::ok;
  bool mux_failed = false; // the link failed under us (ch->failed may come later)
  Changes changed;
  {
    std::lock_guard<std::mutex> l(ch->mu);
    Stream* s = c->st;
    if (s == nullptr) return stream_gone(c);
    for (int pass = 0; pass < 2; ++pass) {
      iovec v[kMaxIov];
      int k = iov_slice(iov, iovcnt, skip + done_total, v);
      for (int i = 0; i < k; ++i) {
        size_t d = 0;
        if (i == 0 && zc_first) {
          st = s->write_zero_copy(v[0].iov_base, v[0].iov_len, z->lkey, &d);
          if (d > 0) zc::posted(z, ch, s, s->id(), s->zero_copy_wr());
          zc_bytes += d;
          if (st == Status::unsupported)
            st = s->write(v[0].iov_base, v[0].iov_len, &d, skip + done_total, more);
        } else if (i > 0 && z && v[i].iov_len >= zc_min) {
          break; // its key is looked up before the lock, on the next pass
        } else {
          st = s->write(v[i].iov_base, v[i].iov_len, &d, skip + done_total, more);
        }
        done_total += d;
        if (d < v[i].iov_len) break;
      }
      if (st != Status::no_resource || pass == 1) break;
      // Credit or acknowledgements may be waiting in the completion queue.
      engine::progress_locked(ch, c, &changed);
    }
    // The engine took a completion event while we held the lock and left
    // the poll to us (channel_events.cc, take_event).
    // So does a sender on an unarmed channel: no event tells anyone of what
    // arrives, and its own credit and acknowledgements are among it.  Unless
    // someone polled it since the previous send (a request/response loop's
    // receive, a spinner): then this poll would mostly find nothing, and
    // cost a provider call per message.  A sender alone still polls on
    // every send.
    if (ch->poll_owed.load(std::memory_order_acquire) ||
        (!ch->armed.load(std::memory_order_relaxed) && ch->polls == ch->polls_at_send)) {
      ch->poll_owed.store(0, std::memory_order_relaxed);
      engine::progress_locked(ch, c, &changed);
    }
    ch->polls_at_send = ch->polls;
    const uint64_t now = engine::mono_ns();
    ch->last_send_ns.store(now, std::memory_order_relaxed);
    if (done_total > 0) ch->last_write_ns.store(now, std::memory_order_relaxed);
    if (ch->mux->channel().corked()) {
      engine::note_held(ch);
      // The peer's acknowledgement sends the held record: it must raise an
      // event (and one that came before the arm was widened raised none).
      if (engine::widen_arm(ch)) engine::progress_locked(ch, c, &changed);
    }
    if (st == Status::closed && s->write_shut() && !s->was_reset()) st = Status::shut_down;
    mux_failed = ch->mux->failed();
    if (engine::refresh(c)) changed.add(c);
  }
  if (ch->inbox_pending.load(std::memory_order_acquire)) engine::drain_inbox(ch);
  changed.wake();
  alloc::MemStats& ms = alloc::mem_stats();
  if (zc_bytes) ms.tx_zero_copy_bytes.fetch_add(zc_bytes, std::memory_order_relaxed);
  if (done_total > zc_bytes)
    ms.tx_copied_bytes.fetch_add(done_total - zc_bytes, std::memory_order_relaxed);
  if (done_total > 0) return IoResult::bytes(done_total);
  if (st == Status::ok && iov_total_len(iov, iovcnt) <= skip) {
    st = send_empty(c, ch, skip, more);
    if (st == Status::ok) return IoResult::bytes(0);
    if (st == Status::invalid) return stream_gone(c);
  }
  if (st == Status::shut_down) return IoResult::fail(st); // after shutdown(SHUT_WR)
  // Stream::write says closed once the mux saw a failed completion, which
  // may be before the channel is marked failed: resume too, not EPIPE
  // (CI: a recovery injection's sender got BrokenPipeError).
  if ((st == Status::io_error || mux_failed || ch->failed.load()) && !c->dead.load()) {
    engine::channel_failed(ch); // the stream resumes on TCP (stream/resume.h)
    if (c->resumed.load(std::memory_order_acquire)) return IoResult::fail(Status::look_again);
  }
  if (st == Status::closed || st == Status::io_error || ch->failed.load()) {
    const Status end = c->err_pending.exchange(false) ? Status::reset : Status::closed;
    XP_SLOG(XP_SLOG_INFO,
            "fd %d: send on the stream fails (%s): status %s, channel failed %d/%d, "
            "resumed %d, dead %d, reset %d",
            c->sock(), end == Status::closed ? "EPIPE" : "ECONNRESET", status_name(st), mux_failed,
            ch->failed.load(), c->resumed.load(), c->dead.load(),
            (c->ready.stream_bits.load() & Conn::kReset) != 0);
    return IoResult::fail(end);
  }
  return IoResult::fail(Status::would_block);
}

// A moved stream went back to the kernel in the middle of a call that
// already moved `done` bytes: the rest as the kernel's call would (a
// blocking or MSG_WAITALL call takes everything; the first error after
// some bytes ends it with those).
IoResult kernel_rest(Conn* c, const iovec* iov, int iovcnt, size_t done, int flags, bool out) {
  size_t want = iov_total_len(iov, iovcnt);
  if (done >= want || (!out && !(flags & MSG_WAITALL))) return IoResult::bytes(done);
  iovec v[kMaxIov];
  int k = iov_slice(iov, iovcnt, done, v);
  msghdr m{};
  m.msg_iov = v;
  m.msg_iovlen = static_cast<size_t>(k);
  long n = out ? syscall(SYS_sendmsg, c->sock(), &m, flags | MSG_NOSIGNAL)
               : syscall(SYS_recvmsg, c->sock(), &m, flags);
  return IoResult::bytes(done + (n > 0 ? static_cast<size_t>(n) : 0));
}

// The bytes a call moved before it met `r`: a count ends the call with
// those, as the kernel's does after a partial transfer.
inline IoResult partial_or(size_t done, IoResult r) {
  return done > 0 ? IoResult::bytes(done) : r;
}

// EPIPE raises SIGPIPE unless MSG_NOSIGNAL, as the kernel's send does.
inline IoResult send_failed(IoResult r, int flags) {
  if (r.error() == EPIPE && !(flags & MSG_NOSIGNAL)) raise(SIGPIPE);
  return r;
}

// send()'s loop.  nonblock: known to be non-blocking (or blocking when
// zcs is set: its caller asked the descriptor); zcs: this call's zero-copy
// state, null when it copies.
IoResult send_loop(Conn* c, const iovec* iov, int iovcnt, int flags, size_t want, bool nonblock,
                   zc::Send* zcs) {
  bool checked_fd = zcs != nullptr || nonblock;
  size_t sent = 0;
  std::optional<Waiter> w; // built when the call first waits
  int inner = flags & ~(MSG_DONTWAIT | MSG_NOSIGNAL | MSG_MORE);
  while (true) {
    if (c->phase.load(std::memory_order_acquire) == Phase::tcp)
      return partial_or(sent, IoResult::fail(Status::to_kernel));
    if (c->closed.load(std::memory_order_acquire))
      return partial_or(sent, IoResult::fail(Status::bad_fd));
    if (c->resumed.load(std::memory_order_acquire) && !c->tx_rdma.load(std::memory_order_acquire)) {
      if (zcs) zc::finish(c, zcs); // first: what resume::send queues follows our records
      IoResult r = resume::send(c, iov, iovcnt, flags, &sent);
      if (r.is(Status::look_again)) {
        if (sent >= want && want > 0) return IoResult::bytes(sent);
        continue; // our direction is back on RDMA (stream/reattach.h)
      }
      if (!r.is(Status::to_kernel)) return r;
      // A moved stream: its sends are the kernel's.
      if (sent > 0) return kernel_rest(c, iov, iovcnt, sent, flags, true);
      return r;
    }
    if (c->dead.load(std::memory_order_acquire) ||
        (c->tx_rdma.load() && (c->ready.stream_bits.load() & Conn::kReset))) {
      if (sent > 0) return IoResult::bytes(sent);
      const Status end = c->err_pending.exchange(false) ? Status::reset : Status::closed;
      XP_SLOG(XP_SLOG_INFO, "fd %d: send fails (%s): dead %d, reset %d, resumed %d", c->sock(),
              end == Status::closed ? "EPIPE" : "ECONNRESET", c->dead.load(),
              (c->ready.stream_bits.load() & Conn::kReset) != 0, c->resumed.load());
      return send_failed(IoResult::fail(end), flags);
    }
    bool on_tcp = !c->tx_rdma.load(std::memory_order_acquire);
    IoResult r = on_tcp ? send_tcp(c, iov, iovcnt, sent, inner)
                        : send_stream(c, iov, iovcnt, sent, zcs && zcs->on ? zcs : nullptr,
                                      (flags & MSG_MORE) != 0);
    if (__builtin_expect(r.ok(), 1)) {
      sent += static_cast<size_t>(r.n);
      if (sent >= want) return IoResult::bytes(sent);
      // A blocking send takes everything; a non-blocking one stops at EAGAIN.
      if (r.n > 0) continue;
    } else if (r.is(Status::look_again)) {
      continue;
    } else if (!r.is(Status::would_block)) {
      if (sent > 0) return IoResult::bytes(sent);
      return send_failed(r, flags);
    }
    if (!checked_fd) {
      checked_fd = true;
      nonblock = nonblock || nonblocking(c);
    }
    if (nonblock) {
      // Full: room opening again is an EPOLLET edge (as the kernel's).
      c->ready.last_ready.fetch_and(~static_cast<uint32_t>(EPOLLOUT), std::memory_order_acq_rel);
      return partial_or(sent, IoResult::fail(Status::would_block));
    }
    if (!w) w.emplace(SO_SNDTIMEO);
    w->polled = !on_tcp; // send_stream polled before its EAGAIN
    IoResult slept = w->step(c, on_tcp ? c->sock() : -1, POLLOUT);
    if (!slept.ok()) return partial_or(sent, slept);
  }
}

} // namespace

void fd_options_changed() {
  // Nothing cached yet, nothing to invalidate: no write (every fork and
  // fcntl(F_SETFL) calls this).  The fence orders the caller's change
  // before the load, as load_opts' mark orders its own before its reads:
  // one of the two sees the other.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!fork_parts::used(fork_parts::kIo)) return;
  g_opts_gen.fetch_add(1, std::memory_order_acq_rel);
}

bool conn_nonblocking(Conn* c) {
  return nonblocking(c);
}
int64_t conn_timeout_ms(Conn* c, int opt) {
  return timeout_ms(c, opt);
}

IoResult recv(Conn* c, const iovec* iov, int iovcnt, int flags) {
  if (iovcnt < 0 || iovcnt > IOV_MAX) return IoResult::fail(Status::invalid);
  // A fork child's accepted connection (stream/fork_handover.h).
  if (__builtin_expect(c->at_fork.claim.load(std::memory_order_relaxed), 0)) engine::claim_start(c);
  size_t want = iov_total_len(iov, iovcnt);
  if (flags & MSG_OOB) { // urgent data always travels on TCP
    c->ready.tcp_bits.fetch_and(~static_cast<uint32_t>(EPOLLPRI));
    return IoResult::fail(Status::to_kernel);
  }
  bool peek = flags & MSG_PEEK;
  bool waitall = (flags & MSG_WAITALL) && !peek;
  bool nonblock = (flags & MSG_DONTWAIT) != 0;
  bool checked_fd = false;
  size_t got = 0;
  std::optional<Waiter> w; // built when the call first waits
  int inner = flags & ~(MSG_WAITALL | MSG_DONTWAIT);
  if (want == 0) return IoResult::bytes(0);
  while (true) {
    if (c->phase.load(std::memory_order_acquire) == Phase::tcp) {
      if (got > 0) return kernel_rest(c, iov, iovcnt, got, flags, false);
      return IoResult::fail(Status::to_kernel);
    }
    if (c->closed.load(std::memory_order_acquire)) // closed by another thread
      return partial_or(got, IoResult::fail(Status::bad_fd));
    if (c->rd_shut.load()) return IoResult::bytes(got);
    // On TCP (stream/resume.h), unless this direction went back onto RDMA
    // (stream/reattach.h).
    if (c->resumed.load(std::memory_order_acquire) && !c->rx_rdma.load(std::memory_order_acquire)) {
      IoResult r = resume::recv(c, iov, iovcnt, flags, &got);
      if (r.is(Status::look_again)) continue;
      if (!r.is(Status::to_kernel)) return r;
      continue; // handed back to the kernel
    }
    IoResult r;
    bool on_tcp = !c->rx_rdma.load(std::memory_order_acquire);
    if (c->dead.load(std::memory_order_acquire)) {
      // A broken stream still delivers what arrived before it broke.
      r = on_tcp ? IoResult::fail(Status::closed) : recv_stream(c, iov, iovcnt, got, inner);
      if (!r.ok() || r.n == 0) return got > 0 ? IoResult::bytes(got) : reset_read(c);
    } else {
      r = on_tcp ? recv_tcp(c, iov, iovcnt, got, inner) : recv_stream(c, iov, iovcnt, got, inner);
    }
    if (__builtin_expect(r.ok(), 1)) {
      if (r.n == 0) return IoResult::bytes(got); // end of stream
      got += static_cast<size_t>(r.n);
      if (!waitall || got >= want) return IoResult::bytes(got);
      continue;
    }
    if (r.is(Status::look_again)) continue;
    if (r.is(Status::closed)) return got > 0 ? IoResult::bytes(got) : reset_read(c);
    if (!r.is(Status::would_block)) return partial_or(got, r);
    if (!checked_fd) {
      checked_fd = true;
      nonblock = nonblock || nonblocking(c);
    }
    if (nonblock) {
      // Drained: the next byte is an EPOLLET edge again (as the kernel's).
      c->ready.last_ready.fetch_and(~static_cast<uint32_t>(EPOLLIN), std::memory_order_acq_rel);
      return partial_or(got, r);
    }
    if (!w) w.emplace(SO_RCVTIMEO);
    w->polled = !on_tcp; // recv_stream polled before its EAGAIN
    IoResult slept = w->step(c, on_tcp ? c->sock() : -1, POLLIN);
    if (!slept.ok()) return partial_or(got, slept);
  }
}

// Urgent data goes on TCP, out of band (the stream's bytes before it over
// RDMA); with SO_OOBINLINE the peer would not see it in order.  Apart from
// send() so that the data path's send stays small enough to inline.
[[gnu::cold, gnu::noinline]] static IoResult send_oob(Conn* c, const iovec* iov, int iovcnt,
                                                      int flags, size_t want) {
  iovec v[kMaxIov];
  int k = iov_slice(iov, iovcnt, 0, v, want - 1);
  IoResult r = want > 1 ? send(c, v, k, flags & ~MSG_OOB) : IoResult::bytes(0);
  if (!r.ok() || static_cast<size_t>(r.n) < want - 1) return r;
  iovec last[kMaxIov] = {};
  if (iov_slice(iov, iovcnt, want - 1, last, 1) != 1) return r; // cannot happen: want >= 1
  long o = syscall(SYS_sendto, c->sock(), last[0].iov_base, 1, MSG_OOB | MSG_NOSIGNAL, nullptr, 0);
  return o == 1 ? IoResult::bytes(want) : r;
}

IoResult send(Conn* c, const iovec* iov, int iovcnt, int flags) {
  if (iovcnt < 0 || iovcnt > IOV_MAX) return IoResult::fail(Status::invalid);
  if (__builtin_expect(c->at_fork.claim.load(std::memory_order_relaxed), 0)) engine::claim_start(c);
  size_t want = iov_total_len(iov, iovcnt);
  bool nonblock = (flags & MSG_DONTWAIT) != 0;
  if ((flags & MSG_OOB) && c->tx_rdma.load() && want > 0)
    return send_oob(c, iov, iovcnt, flags, want);
  // Zero copy only for blocking sends (a non-blocking one must not wait for
  // the NIC) of at least XPRESS_ZEROCOPY_MIN_KB; finished (the buffer is
  // free again) before any return.  Small sends never build its state.
  const EngineParams& ep = engine::params();
  if (ep.zerocopy && want >= ep.zerocopy_min && !nonblock && c->tx_rdma.load()) {
    if (nonblocking(c)) return send_loop(c, iov, iovcnt, flags, want, true, nullptr);
    zc::Send zcs;
    zcs.on = true;
    struct ZcEnd {
      Conn* c;
      zc::Send* z;
      ~ZcEnd() {
        if (z->on) zc::finish(c, z);
      }
    } zc_end{c, &zcs};
    return send_loop(c, iov, iovcnt, flags, want, false, &zcs);
  }
  return send_loop(c, iov, iovcnt, flags, want, nonblock, nullptr);
}

IoResult shutdown(Conn* c, int how) {
  if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) return IoResult::fail(Status::invalid);
  std::lock_guard<std::mutex> l(c->mu);
  if (c->phase.load() == Phase::tcp) return IoResult::fail(Status::to_kernel);
  if (c->resumed.load()) return resume::shutdown(c, how);
  if (how != SHUT_RD) {
    if (c->tx_rdma.load()) {
      engine::shut_write(c);
      // The kernel socket follows (after the FIN record), so that TCP_INFO
      // and the peer's kernel state are what the program expects.
      syscall(SYS_shutdown, c->sock(), SHUT_WR);
    } else {
      // Our direction stays on TCP for good: the kernel sends the FIN.
      c->tx_shut = true;
      if (Channel* ch = c->ch) {
        // Our FIN record first: a reader that meets the kernel's FIN before
        // any SWITCH of ours learns from it that none will come.
        std::lock_guard<std::mutex> chl(ch->mu);
        if (c->st) c->st->shutdown_write();
      }
      if (syscall(SYS_shutdown, c->sock(), SHUT_WR) != 0) return IoResult::from_errno(errno);
    }
  }
  if (how != SHUT_WR) {
    c->rd_shut.store(true);
    syscall(SYS_shutdown, c->sock(), SHUT_RD);
  }
  c->ready.gen.fetch_add(1);
  wake::notify();
  return IoResult::bytes(0);
}

IoResult readable_bytes(Conn* c) {
  if (c->phase.load() != Phase::tcp && c->resumed.load(std::memory_order_acquire))
    return resume::readable_bytes(c);
  // TCP bytes below S: the kernel's count is at most that.
  if (c->phase.load() == Phase::tcp || !c->rx_rdma.load()) return IoResult::fail(Status::to_kernel);
  Channel* ch = c->ch;
  if (ch == nullptr) return IoResult::bytes(0);
  engine::progress(ch);
  std::lock_guard<std::mutex> l(ch->mu);
  size_t n = c->st ? c->st->readable_bytes() : 0;
  return IoResult::bytes(n > INT_MAX ? INT_MAX : n);
}

} // namespace xp::stream::io
