// Moving a stream off its failed channel onto its TCP connection, and the
// byte pump of a resumed connection (docs/protocol.md §7).  Cold path: runs
// once per stream and failure; afterwards the stream goes at TCP speed.
#include "stream/resume.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <new>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/lock_check.h"
#include "common/logsink.h"
#include "recover/reattach_wire.h"
#include "stream/engine_internal.h"
#include "stream/reattach.h"
#include "stream/resume_fork.h"
#include "stream/resume_internal.h"
#include "stream/wake.h"

namespace xp::stream {

const char* resume_cause_name(ResumeCause c) {
  switch (c) {
  case ResumeCause::none:
    return "none";
  case ResumeCause::completion_error:
    return "completion_error";
  case ResumeCause::disconnected:
    return "disconnected";
  case ResumeCause::keepalive_timeout:
    return "keepalive_timeout";
  case ResumeCause::peer_resumed:
    return "peer_resumed";
  case ResumeCause::protocol_error:
    return "protocol_error";
  case ResumeCause::local:
    return "local";
  case ResumeCause::fork:
    return "fork";
  case ResumeCause::peer_moved:
    return "peer_moved";
  case ResumeCause::kernel_feature:
    return "kernel_feature";
  case ResumeCause::count:
    break;
  }
  return "unknown";
}

namespace {
std::atomic<ResumeHook> g_hook{nullptr};
std::atomic<resume::DetachHook> g_detach_hook{nullptr};
constexpr size_t kPreBytes = 64 * 1024;
constexpr size_t kOutExtra = 64 * 1024; // room for new bytes and frame headers
constexpr uint64_t kWaitMs = 10000;     // longest wait for the peer's RESUME

// Collects the stream bytes [lo, hi) from the records the peer has not
// credited (RecordChannel::walk_uncredited): they start at `first` (the
// older ones were credited, so the peer holds them) and must run to hi
// without a gap.
struct Collect {
  uint32_t id;
  uint64_t open_cursor;
  uint64_t lo, hi;
  uint8_t* dst;
  uint64_t first = UINT64_MAX, end = 0;
  bool gap = false;
};

bool collect(void* ctx, uint64_t cursor, const flow::RecordHeader& h, const uint8_t* payload) {
  auto* k = static_cast<Collect*>(ctx);
  if (h.type != static_cast<uint8_t>(flow::RecordType::data) || h.stream != k->id ||
      cursor < k->open_cursor)
    return true;
  uint64_t a = h.seq > k->lo ? h.seq : k->lo, b = h.seq + h.len < k->hi ? h.seq + h.len : k->hi;
  if (a >= b) return true;
  if (k->first == UINT64_MAX) k->first = k->end = a;
  if (a != k->end) {
    k->gap = true;
    return false;
  }
  memcpy(k->dst + (a - k->lo), payload + (a - h.seq), b - a);
  k->end = b;
  return true;
}

} // namespace

void set_resume_hook(ResumeHook h) {
  g_hook.store(h, std::memory_order_release);
}

Resume::Resume(size_t window) : out(window + kOutExtra), pre(kPreBytes), buf(window + kPreBytes) {}

namespace resume {

void set_detach_hook(DetachHook h) {
  g_detach_hook.store(h, std::memory_order_release);
}

void release(Resume* r) {
  if (r->resend) munmap(r->resend, r->resend_cap);
  if (r->ahead) munmap(r->ahead, r->ahead_cap);
  delete r;
}

void queue_data(Resume* r, const uint8_t* p, size_t n, uint64_t seq, bool framed) {
  while (n > 0) {
    size_t chunk = n < kFrameChunk ? n : kFrameChunk;
    if (framed) {
      recover::FrameHeader h;
      h.type = recover::kFrameData;
      h.len = static_cast<uint32_t>(chunk);
      h.seq = seq;
      uint8_t hb[recover::kFrameHeaderBytes];
      recover::encode_frame_header(h, hb);
      r->out.put(hb, sizeof hb);
    }
    r->out.put(p, chunk);
    p += chunk;
    n -= chunk;
    seq += chunk;
  }
}

// Our RESUME and the bytes the peer may lack, from `from` on.
void go_framed(Conn* c, Resume* r, uint64_t from) {
  recover::ResumeInfo ri;
  ri.knows_start = r->rx_framed;
  ri.from = from;
  // What we hold of the peer's direction: stream bytes when we know its S,
  // else the raw TCP bytes (all it ever sent us, as far as we know).
  ri.received = r->rx_framed ? r->rx_next : c->sess.tcp_received() + r->buf.size();
  uint8_t f[recover::kResumeFrameBytes];
  recover::encode_resume(r->key, r->dir, ri, f);
  r->out.put(f, sizeof f);
  uint64_t n = r->tx_next - from;
  queue_data(r, r->resend + (from - r->resend_seq), n, from, true);
  r->resent += n;
  r->tx = Resume::Tx::framed;
}

namespace {

void report(Conn* c, Resume* r, bool ok) {
  if (r->reported) return;
  r->reported = true;
  uint64_t us = engine::mono_us() - r->started_us;
  if (ok)
    XP_SLOG(XP_SLOG_INFO,
            "fd %d: stream %u resumed on TCP after %s: re-sent %llu bytes, %llu.%03llu ms",
            c->sock(), c->sid, resume_cause_name(r->cause),
            static_cast<unsigned long long>(r->resent), static_cast<unsigned long long>(us / 1000),
            static_cast<unsigned long long>(us % 1000));
  if (ResumeHook h = g_hook.load(std::memory_order_acquire))
    h(ResumeEvent{r->cause, ok, r->resent, us});
}

} // namespace

void give_up(Conn* c, Resume* r, const char* why) {
  if (r->broken) return;
  XP_SLOG(XP_SLOG_WARN, "fd %d: stream %u cannot resume on TCP (%s): reset", c->sock(), c->sid,
          why);
  r->broken = true;
  r->tx = Resume::Tx::dead;
  r->out.consume(r->out.size());
  c->err_pending.store(true);
  // The peer must not wait either: a TCP reset (connect(AF_UNSPEC)
  // disconnects the socket; the program's next call sees our error).
  sockaddr sa{};
  sa.sa_family = AF_UNSPEC;
  syscall(SYS_connect, c->sock(), &sa, sizeof sa);
  report(c, r, false);
}

// The peer never saw our SWITCH: it reads our direction as plain TCP, and
// it received nothing of it over RDMA.  Continue at S, unframed.
void continue_unframed(Conn* c, Resume* r) {
  if (r->resend_seq != r->tx_start)
    return give_up(c, r, "the peer lost our SWITCH but holds bytes after it");
  uint64_t n = r->tx_next - r->tx_start;
  queue_data(r, r->resend, n, r->tx_start, false);
  r->resent += n;
  r->tx = Resume::Tx::raw;
}

// The peer's RESUME arrived (its tag verified).
void on_peer_resume(Conn* c, Resume* r, const recover::ResumeInfo& ri) {
  r->peer_resumed = true;
  r->rx_digest_ok = false; // its frames follow: no plain bytes at S any more
  if (r->tx == Resume::Tx::wait) {
    if (ri.received > r->tx_next || ri.received < r->resend_seq)
      return give_up(c, r, "the peer's RESUME names bytes we do not have");
    if (ri.knows_start) return go_framed(c, r, ri.received);
    if (ri.received > r->tx_start)
      return give_up(c, r, "the peer lost our SWITCH but holds bytes after it");
    return continue_unframed(c, r);
  }
  if (r->tx == Resume::Tx::framed && !ri.knows_start)
    give_up(c, r, "the peer acknowledged our SWITCH but says it never saw it");
}

// Raw bytes after the peer's moved RESUME (their sequence follows on).
void raw_in(Resume* r, const uint8_t* p, size_t n) {
  size_t skip = r->rx_skip < n ? static_cast<size_t>(r->rx_skip) : n;
  r->rx_skip -= skip;
  if (n > skip) {
    r->buf.put(p + skip, n - skip); // fits: reads never exceed buf's room
    r->rx_next += n - skip;
  }
}

// A frame's header or fixed payload arrives in pieces: copy from (*p, *n)
// into buf until it holds `want` bytes (*have so far); true once it does.
bool gather(uint8_t* buf, uint8_t* have, size_t want, const uint8_t** p, size_t* n) {
  size_t take = want - *have;
  if (take > *n) take = *n;
  memcpy(buf + *have, *p, take);
  *have = static_cast<uint8_t>(*have + take);
  *p += take;
  *n -= take;
  return *have == want;
}

// Bytes from the kernel, in frames after the peer's S.
void decode(Conn* c, Resume* r, const uint8_t* p, size_t n) {
  while (n > 0 && !r->broken) {
    if (r->rx_raw && r->check_left > 0 && !check_plain(c, r, &p, &n)) return;
    if (r->rx_raw) return raw_in(r, p, n);
    if (!r->in_frame && peer_went_plain(c, r, p, n)) continue;
    if (!r->in_frame) {
      if (!gather(r->hdr, &r->hdr_have, recover::kFrameHeaderBytes, &p, &n)) return;
      r->hdr_have = 0;
      if (recover::parse_frame_header(r->hdr, &r->frame) != Status::ok)
        return give_up(c, r, "malformed frame");
      if (r->frame.type == recover::kFrameResume) {
        if (r->peer_resumed) return give_up(c, r, "a second RESUME");
        r->rpay_have = 0;
      } else if (r->frame.type == recover::kFrameSwitchback) {
        if (!r->peer_resumed) return give_up(c, r, "SWITCHBACK before RESUME");
        r->rpay_have = 0;
      } else if (r->frame.type == recover::kFrameRaw) {
        if (!r->peer_resumed) return give_up(c, r, "RAW before RESUME");
        r->rpay_have = 0;
      } else {
        // DATA follows the RESUME, and starts at or before what we hold.
        if (!r->peer_resumed) return give_up(c, r, "DATA before RESUME");
        if (r->frame.seq > r->rx_next) return give_up(c, r, "bytes missing before a DATA frame");
      }
      r->in_frame = true;
      continue;
    }
    if (r->frame.type == recover::kFrameSwitchback) {
      static_assert(recover::kSwitchbackPayloadBytes == recover::kResumePayloadBytes);
      if (!gather(r->rpay, &r->rpay_have, recover::kSwitchbackPayloadBytes, &p, &n)) return;
      r->in_frame = false;
      // The peer's direction goes back to RDMA here (stream/reattach.cc);
      // fill_rx reads no further than this frame, so nothing follows in p.
      if (!reattach::on_switchback(c, r)) return give_up(c, r, "SWITCHBACK does not verify");
      if (n > 0) return give_up(c, r, "bytes after SWITCHBACK");
      return;
    }
    if (r->frame.type == recover::kFrameRaw) {
      static_assert(recover::kRawPayloadBytes == recover::kResumePayloadBytes);
      if (!gather(r->rpay, &r->rpay_have, recover::kRawPayloadBytes, &p, &n)) return;
      r->in_frame = false;
      // The peer's frames end here (it forks): raw bytes follow, read at
      // the top of the loop.
      if (!on_peer_raw(c, r)) return give_up(c, r, "RAW does not verify");
      continue;
    }
    if (r->frame.type == recover::kFrameResume) {
      if (!gather(r->rpay, &r->rpay_have, recover::kResumePayloadBytes, &p, &n)) return;
      r->in_frame = false;
      recover::ResumeInfo ri;
      recover::Dir peer = r->dir == recover::Dir::c2s ? recover::Dir::s2c : recover::Dir::c2s;
      if (recover::parse_resume(r->key, peer, r->frame, r->rpay, &ri) != Status::ok)
        return give_up(c, r, "RESUME does not verify");
      if (ri.from > r->rx_next) return give_up(c, r, "the peer re-sends from beyond our bytes");
      on_peer_resume(c, r, ri);
      if (ri.moved) { // raw bytes from ri.from on (stream/move.cc)
        r->rx_raw = true;
        c->reup.never = true; // a moved stream never goes back
        r->rx_skip = r->rx_next - ri.from;
      } else if (r->moved) {
        // The peer took the failure path (the move crossed a failure):
        // frames follow, and this is a resumed stream like any other.
        r->moved = false;
        c->moved_stream.store(false, std::memory_order_release);
      }
      continue;
    }
    size_t take = r->frame.len < n ? r->frame.len : n;
    // Bytes we already hold (re-sent from before our received point) are
    // dropped: delivered once.
    size_t dup = r->frame.seq < r->rx_next ? r->rx_next - r->frame.seq : 0;
    if (dup > take) dup = take;
    if (take > dup) {
      r->buf.put(p + dup, take - dup); // fits: reads never exceed buf's room
      r->rx_next += take - dup;
    }
    r->frame.seq += take;
    r->frame.len -= static_cast<uint32_t>(take);
    p += take;
    n -= take;
    if (r->frame.len == 0) r->in_frame = false;
  }
}

// Kernel -> pre/buf, without blocking.  true when bytes moved.
bool fill_rx(Conn* c, Resume* r) {
  bool moved = false;
  uint8_t tmp[16384];
  while (!r->eof && !r->broken) {
    // The peer's SWITCHBACK was read: its bytes after it come over the
    // channel (not read here), or, when that channel failed, they follow
    // as a RESUME and frames (stream/reattach.cc).
    if (r->rx_back && !reattach::after_switchback(c, r)) break;
    size_t room;
    bool to_pre = (r->rx_framed || r->rx_cont) && r->raw_left > 0;
    // A moved stream reads ahead only the raw bytes below the peer's S and
    // the peer's RESUME after them: the rest is the kernel's to hand out
    // once our buffers are empty.
    size_t limit = SIZE_MAX;
    if (r->moved && !to_pre) {
      if (!r->rx_framed || r->rx_raw || r->peer_resumed) break;
      limit = r->in_frame ? recover::kResumePayloadBytes - r->rpay_have
                          : recover::kResumeFrameBytes - r->hdr_have;
    }
    if (to_pre) {
      room = r->pre.space();
      if (room > r->raw_left) room = r->raw_left;
    } else {
      room = r->buf.space();
    }
    if (room > sizeof tmp) room = sizeof tmp;
    // A stream that tried to go back onto RDMA may find a SWITCHBACK among
    // the frames, one that a fork turns a RAW: read up to frame boundaries
    // then, never past one.
    if (!to_pre && r->rx_framed && !r->rx_raw && !r->moved && (c->reup.counter != 0 || r->turning))
      limit = !r->in_frame                           ? recover::kFrameHeaderBytes - r->hdr_have
              : r->frame.type == recover::kFrameData ? r->frame.len
                                                     : recover::kResumePayloadBytes - r->rpay_have;
    if (room > limit) room = limit;
    if (room == 0) break;
    long got = syscall(SYS_recvfrom, c->sock(), tmp, room, MSG_DONTWAIT, nullptr, nullptr);
    if (got == 0) {
      XP_SLOG(XP_SLOG_DEBUG, "fd %d: resumed stream: TCP end of stream at %llu%s", c->sock(),
              static_cast<unsigned long long>(r->rx_next), r->in_frame ? " (in a frame)" : "");
      r->eof = true;
      moved = true;
      break;
    }
    if (got < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        // The TCP connection broke too: the kernel's error, as TCP would.
        XP_SLOG(XP_SLOG_INFO, "fd %d: resumed stream: TCP failed too (%s)", c->sock(),
                strerror(errno));
        r->eof = true;
        if (!r->broken) {
          r->broken = true;
          c->err_pending.store(true);
          report(c, r, false);
        }
        moved = true;
      }
      break;
    }
    moved = true;
    size_t n = static_cast<size_t>(got);
    if (to_pre) {
      r->pre.put(tmp, n);
      r->raw_left -= n;
      c->sess.on_tcp_received(tmp, n);
    } else if (r->rx_framed) {
      decode(c, r, tmp, n);
    } else {
      r->buf.put(tmp, n);
      r->rx_next += n;
    }
  }
  return moved;
}

// out -> kernel, without blocking; then a pending shutdown.
void flush_out(Conn* c, Resume* r) {
  write_owed_raw(c, r);
  while (r->out.size() > 0 && !r->tx_eof) {
    const uint8_t* p;
    size_t n = r->out.front(&p);
    long w = syscall(SYS_sendto, c->sock(), p, n, MSG_DONTWAIT | MSG_NOSIGNAL, nullptr, 0);
    if (w > 0) {
      r->out.consume(static_cast<size_t>(w));
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      XP_SLOG(XP_SLOG_INFO, "fd %d: resumed stream: TCP refuses our bytes (%s)", c->sock(),
              strerror(errno));
      r->tx_eof = true; // EPIPE / ECONNRESET: the peer is gone
      r->out.consume(r->out.size());
    }
    break;
  }
  if (r->shut_pending && r->out.size() == 0 && r->tx != Resume::Tx::wait) {
    r->shut_pending = false;
    syscall(SYS_shutdown, c->sock(), SHUT_WR);
  }
}

void refresh_bits(Conn* c, Resume* r) {
  bool deliverable = r->pre.size() > 0 || (r->raw_left == 0 && r->buf.size() > 0);
  bool drained = r->pre.size() == 0 && r->buf.size() == 0;
  uint32_t b = 0;
  if (deliverable) b |= Conn::kIn;
  if (drained && (r->eof || r->fin)) b |= Conn::kFin | Conn::kIn;
  if (r->broken) b |= Conn::kReset;
  bool can_write = (r->tx == Resume::Tx::raw || r->tx == Resume::Tx::framed) && !r->tx_eof &&
                   r->out.space() > recover::kFrameHeaderBytes;
  if (can_write) b |= Conn::kOut;
  if (r->tx == Resume::Tx::shut || r->app_shut || r->tx_eof) b |= Conn::kWriteShut;
  c->ready.resume_bits.store(b, std::memory_order_release);
}

// A moved stream whose buffers are empty is a plain TCP connection again
// (raw in both directions from here): the kernel serves it, readiness
// included (the engine's watch goes, the epoll registrations come back).
static void hand_back(Conn* c, Resume* r) {
  if (!r->moved || c->phase.load() == Phase::tcp) return;
  if (r->pre.size() > 0 || r->buf.size() > 0 || r->raw_left > 0 || r->out.size() > 0 ||
      r->shut_pending || r->broken || (r->tx != Resume::Tx::raw && r->tx != Resume::Tx::shut) ||
      (r->rx_framed && !r->rx_raw && !r->fin))
    return;
  c->phase.store(Phase::tcp, std::memory_order_release);
  if (engine::g().epfd >= 0)
    syscall(SYS_epoll_ctl, engine::g().epfd, EPOLL_CTL_DEL, c->sock(), nullptr);
  if (!c->closed.load()) notify_mode(c->sock(), nullptr);
  c->ready.gen.fetch_add(1);
  XP_SLOG(XP_SLOG_DEBUG, "fd %d: moved stream handed back to the kernel", c->sock());
}

void settle(Conn* c, Resume* r, bool moved) {
  if (!r->reported && r->tx != Resume::Tx::wait &&
      (r->moved || !r->rx_framed || r->peer_resumed || r->eof || r->fin || r->broken))
    report(c, r, !r->broken);
  uint32_t before = c->ready.resume_bits.load(std::memory_order_relaxed);
  refresh_bits(c, r);
  uint32_t gen = c->ready.gen.load(std::memory_order_relaxed);
  hand_back(c, r);
  if (moved || before != c->ready.resume_bits.load(std::memory_order_relaxed) ||
      gen != c->ready.gen.load(std::memory_order_relaxed)) {
    c->note_ready(moved);
    wake::notify(c);
  }
}

void pump(Conn* c) {
  XP_ASSERT_HELD(c->mu);
  Resume* r = c->rs;
  if (r == nullptr) return;
  flush_out(c, r);
  // A moved stream's socket is read by the program's calls only (at fork
  // the other process may be the one using it).
  bool moved = !r->moved && fill_rx(c, r);
  flush_out(c, r); // a RESUME just read may have released our bytes
  settle(c, r, moved);
}

void tick(Conn* c, uint64_t now_ms) {
  XP_ASSERT_HELD(c->mu);
  Resume* r = c->rs;
  if (r == nullptr) return;
  if (r->tx == Resume::Tx::wait && now_ms > r->deadline_ms)
    give_up(c, r, "no RESUME from the peer in time");
  pump(c);
  reattach::tick(c, now_ms); // back to RDMA: schedule, time out, advance
}

bool collect_resend(Channel* ch, Stream* s, Resume* r, uint64_t* first) {
  XP_ASSERT_HELD(ch->mu);
  // Every byte the peer may lack is in a record it has not credited
  // (docs/protocol.md §7); [acked, next) bounds them.
  const uint64_t acked = s->send_acked(), next = s->send_next();
  r->tx_next = next;
  r->resend_seq = next;
  *first = next;
  if (next <= acked) return true;
  if (r->resend) munmap(r->resend, r->resend_cap); // a second resume: the old copy is sent
  r->resend_cap = next - acked;
  void* m =
      mmap(nullptr, r->resend_cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  r->resend = m == MAP_FAILED ? nullptr : static_cast<uint8_t*>(m);
  Collect k{s->id(), s->open_cursor(), acked, next, r->resend};
  if (r->resend == nullptr) {
    r->resend_cap = 0;
    return false;
  }
  if (ch->mux->channel().walk_uncredited(collect, &k) != Status::ok || k.gap ||
      (k.first != UINT64_MAX && k.end != next))
    return false;
  // A zero-copy write still in send(): its records' staged payloads are
  // empty, its buffer is still the program's (send() lets it go only under
  // this lock, after zero_copy_release()).
  s->zero_copy_overlay(acked, next, r->resend);
  // The bytes before `first` were credited: the peer holds them.
  *first = k.first == UINT64_MAX ? next : k.first;
  memmove(r->resend, r->resend + (*first - acked), next - *first);
  r->resend_seq = *first;
  return true;
}

// What start() and start_alone() both set: the cause, the clocks, the
// session's key and direction.
static void begin_wait(Conn* c, Resume* r, ResumeCause why) {
  r->cause = why;
  r->started_us = engine::mono_us();
  r->started_ms = engine::now_ms();
  r->deadline_ms = r->started_ms + kWaitMs;
  c->sess.session_key(r->key);
  r->dir = c->sess.tx_direction();
}

void start(Conn* c, ResumeCause why) {
  XP_ASSERT_HELD(c->mu);
  Channel* ch = c->ch;
  auto* r = new (std::nothrow) Resume(engine::params().stream_window);
  if (r != nullptr && !r->ok()) {
    release(r);
    r = nullptr;
  }
  const bool tx_switched = c->tx_rdma.load() || c->sess.tx_mode() == Mode::rdma;
  const bool rx_known = c->sess.rx_mode() == Mode::rdma;
  bool write_shut = false, peer_knows = false, reset = false, gap = false;
  uint64_t first = 0;
  {
    std::lock_guard<std::mutex> l(ch->mu);
    ch->mux->fail(); // nothing more is processed: the stream's state is final
    Stream* s = c->st;
    if (s && r) {
      if (rx_known) {
        // What arrived over RDMA and the program has not read; the peer
        // re-sends from after it.  (The stream is discarded below, so
        // reading it out is fine.)
        uint8_t tmp[16384];
        size_t got = 0;
        while (s->read(tmp, sizeof tmp, &got, false) == Status::ok && got > 0)
          r->buf.put(tmp, got);
        r->rx_next = s->received();
        r->rx_digest_ok = s->rx_digest(&r->rx_digest);
        r->fin = s->peer_finished();
        reset = s->was_reset();
      }
      write_shut = s->write_shut();
      // A stream that came back onto RDMA wrote its SWITCHBACK in its
      // frames: the peer reads frames after it whatever it saw over RDMA.
      peer_knows = s->peer_knows_tx_start() || c->reup.returned;
      if (tx_switched) {
        gap = !collect_resend(ch, s, r, &first);
        // Nothing of ours acknowledged: every byte from S is in the
        // stream's own copy, whatever the peer credited (and, if it never
        // verified our SWITCH, dropped: see below).
        const uint8_t* p = nullptr;
        size_t n = 0;
        if (!peer_knows && s->early_bytes(&p, &n) && s->send_acked() == c->sess.tx_offset() &&
            n == r->tx_next - s->send_acked() && r->resend_cap >= n) {
          if (n) memcpy(r->resend, p, n);
          r->resend_seq = first = s->send_acked();
          gap = false;
        }
      }
    }
    if (r) {
      // Published before the stream leaves the channel: a data call in
      // another thread that finds no stream (under this lock, or no channel
      // after it) must find the connection resumed, or it would report a
      // reset; it then waits for Conn::mu, held until the resume is set up.
      c->rs = r;
      c->resumed.store(true, std::memory_order_release);
    }
    engine::detach(c, ch);
  }
  c->ch = nullptr;
  c->st = nullptr;
  if (DetachHook h = g_detach_hook.load(std::memory_order_acquire)) h(c);
  if (r == nullptr) {
    // No memory for the resume: what the kernel does for a broken
    // connection.
    XP_SLOG(XP_SLOG_WARN, "fd %d: no memory to resume the stream on TCP: reset", c->sock());
    c->dead.store(true);
    c->err_pending.store(true);
    c->ready.gen.fetch_add(1);
    wake::notify();
    return;
  }
  begin_wait(c, r, why);
  r->rx_framed = rx_known;
  r->raw_left = rx_known ? c->sess.rx_tcp_remaining() : 0;
  r->tx_start = c->sess.tx_offset();
  if (!tx_switched) {
    r->tx = Resume::Tx::raw;
  } else if (write_shut) {
    r->tx = Resume::Tx::shut; // the kernel already sent our FIN: nothing more can go
  } else if (peer_knows) {
    go_framed(c, r, first);
  } else {
    r->tx = Resume::Tx::wait;
  }
  c->rs = r;
  c->tx_rdma.store(false, std::memory_order_release);
  c->rx_rdma.store(false, std::memory_order_release);
  if (c->phase.load() == Phase::upgrading) c->phase.store(Phase::rdma, std::memory_order_release);
  c->resumed.store(true, std::memory_order_release);
  XP_SLOG(XP_SLOG_DEBUG,
          "fd %d: stream %u resuming on TCP (%s): tx %s from %llu to %llu, rx %s at %llu "
          "(%zu buffered, %llu raw bytes left)",
          c->sock(), c->sid, resume_cause_name(why),
          r->tx == Resume::Tx::framed ? "framed"
          : r->tx == Resume::Tx::wait ? "waiting"
                                      : "raw",
          static_cast<unsigned long long>(first), static_cast<unsigned long long>(r->tx_next),
          rx_known ? "framed" : "raw", static_cast<unsigned long long>(r->rx_next), r->buf.size(),
          static_cast<unsigned long long>(r->raw_left));
  if (gap) give_up(c, r, "bytes to re-send are not in the staging ring");
  // The peer gave the upgrade up before it processed our SWITCH, and said
  // so in its NAK (recover::kNakReadsPlain): what its RESUME would say.
  if (r->tx == Resume::Tx::wait && c->sess.peer_reads_plain()) continue_unframed(c, r);
  // Waiting is useless when we never verified the peer's SWITCH: then the
  // peer never had our acknowledgement of it, so its own direction is not
  // known to be framed here either, and no RESUME can come from it.  (Only
  // a failure within the round trip of the switches gets here.)  We go on
  // unframed from S (docs/protocol.md §7): right when the peer never
  // verified our SWITCH (it then reads us as plain TCP, as we read it);
  // when it did, it expects our RESUME first, and raw bytes fail its check
  // there, so the stream is reset as before, never wrong bytes.
  if (r->tx == Resume::Tx::wait && !rx_known) {
    if (r->resend_seq == r->tx_start)
      continue_unframed(c, r);
    else
      give_up(c, r, "the channel failed while the switches were crossing");
  }
  if (reset) give_up(c, r, "the peer had reset the stream");
  reattach::on_resumed(c);
  c->ready.gen.fetch_add(1);
  pump(c);
  wake::notify();
}

bool start_alone(Conn* c, ResumeCause why) {
  XP_ASSERT_HELD(c->mu);
  Channel* ch = c->ch;
  if (ch == nullptr || !c->sess.peer_reads_plain() || c->sess.rx_mode() == Mode::rdma) return false;
  auto* r = new (std::nothrow) Resume(engine::params().stream_window);
  if (r == nullptr) return false;
  if (!r->ok()) {
    release(r);
    return false;
  }
  bool shut = false;
  {
    std::lock_guard<std::mutex> l(ch->mu);
    Stream* s = c->st;
    const uint8_t* p = nullptr;
    size_t n = 0;
    if (s == nullptr || ch->failed.load() || s->rx_started() || s->was_reset() ||
        !s->early_bytes(&p, &n) || s->send_next() - n != c->sess.tx_offset()) {
      release(r);
      return false;
    }
    r->tx_start = r->resend_seq = c->sess.tx_offset();
    r->tx_next = s->send_next();
    if (n) {
      void* m = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m == MAP_FAILED) {
        release(r);
        return false;
      }
      r->resend = static_cast<uint8_t*>(m);
      r->resend_cap = n;
      memcpy(r->resend, p, n);
    }
    shut = s->write_shut();
    // Published before the stream goes (as in start).
    c->rs = r;
    c->resumed.store(true, std::memory_order_release);
    c->tx_rdma.store(false, std::memory_order_release);
    c->rx_rdma.store(false, std::memory_order_release);
    ch->mux->forget(s); // no FIN or RST: the peer holds no such stream
    c->st = nullptr;
    engine::detach(c, ch);
  }
  c->ch = nullptr;
  if (DetachHook h = g_detach_hook.load(std::memory_order_acquire)) h(c);
  begin_wait(c, r, why);
  r->rx_framed = false; // the peer's direction never left TCP
  c->reup.never = true; // a failed binding is final (docs/protocol.md §2)
  if (c->phase.load() == Phase::upgrading) c->phase.store(Phase::rdma, std::memory_order_release);
  XP_SLOG(XP_SLOG_DEBUG,
          "fd %d: stream %u leaves its channel alone (the peer gave the upgrade up): tx plain from "
          "%llu, %llu bytes sent again",
          c->sock(), c->sid, static_cast<unsigned long long>(r->tx_start),
          static_cast<unsigned long long>(r->tx_next - r->tx_start));
  r->tx = Resume::Tx::wait;
  if (shut) {
    // Our FIN went over RDMA and the kernel's after it: TCP cannot carry
    // the bytes after S any more, and the peer must not read a short
    // stream as complete.
    give_up(c, r, "the peer dropped our bytes after S and our direction is shut");
  } else {
    continue_unframed(c, r);
  }
  c->ready.gen.fetch_add(1);
  pump(c);
  wake::notify();
  return true;
}

uint32_t ready_events(const Conn* c) {
  // The kernel's bytes may be frames (a header alone makes a read wait a
  // little, or say EAGAIN when non-blocking); our buffers are the rest.
  pollfd p{c->sock(), POLLIN | POLLOUT | POLLRDHUP | POLLPRI, 0};
  uint32_t kb = 0;
  if (syscall(SYS_poll, &p, 1, 0) == 1) kb = static_cast<uint16_t>(p.revents);
  const uint32_t rb = c->ready.resume_bits.load(std::memory_order_acquire);
  // A direction that went back onto RDMA (stream/reattach.cc) answers from
  // the stream, the other from here.
  const bool rx_stream = c->rx_rdma.load(std::memory_order_acquire);
  const bool tx_stream = c->tx_rdma.load(std::memory_order_acquire);
  const uint32_t sb =
      rx_stream || tx_stream ? c->ready.stream_bits.load(std::memory_order_acquire) : 0;
  uint32_t out = kb & (EPOLLPRI | EPOLLHUP | EPOLLERR);
  if (!rx_stream) {
    out |= kb & (EPOLLIN | EPOLLRDNORM | EPOLLRDHUP);
    if (rb & (Conn::kIn | Conn::kFin)) out |= EPOLLIN | EPOLLRDNORM;
    if (rb & Conn::kFin) out |= EPOLLRDHUP;
  } else {
    if (sb & (Conn::kIn | Conn::kFin | Conn::kReset)) out |= EPOLLIN | EPOLLRDNORM;
    if (sb & (Conn::kFin | Conn::kReset)) out |= EPOLLRDHUP;
  }
  if (c->moved_stream.load(std::memory_order_acquire)) {
    out |= kb & (EPOLLOUT | EPOLLWRNORM); // its sends go straight to the kernel
  } else if (tx_stream) {
    if (sb & (Conn::kOut | Conn::kReset | Conn::kWriteShut)) out |= EPOLLOUT | EPOLLWRNORM;
  } else {
    // Writable while `out` has room: a send queues there (the engine drains
    // it on the kernel's EPOLLOUT edges and wakes us when room appears).
    if (rb & Conn::kOut) out |= EPOLLOUT | EPOLLWRNORM;
    if (rb & Conn::kWriteShut) out |= EPOLLOUT | EPOLLWRNORM; // a write reports the error
  }
  if (rb & Conn::kReset) {
    out |= EPOLLIN | EPOLLRDNORM | EPOLLOUT | EPOLLWRNORM | EPOLLRDHUP | EPOLLHUP;
    if (c->err_pending.load(std::memory_order_acquire)) out |= EPOLLERR;
  }
  return out;
}

void before_close(Conn* c) {
  if (!c->resumed.load(std::memory_order_acquire)) return;
  // Up to 2 s for what the program wrote to reach the kernel, which then
  // sends it after close as it would have sent its own buffer.
  for (int i = 0; i < 20; ++i) {
    {
      std::lock_guard<std::mutex> l(c->mu);
      Resume* r = c->rs;
      if (r == nullptr) return;
      flush_out(c, r);
      if (r->out.size() == 0 || r->tx_eof || r->broken) return;
    }
    pollfd p{c->sock(), POLLOUT, 0};
    syscall(SYS_poll, &p, 1, 100);
  }
}

AfterS tcp_after_s(int fd) {
  char b[2];
  long n = syscall(SYS_recvfrom, fd, b, 2, MSG_PEEK | MSG_DONTWAIT, nullptr, nullptr);
  if (n <= 0) return AfterS::nothing;
  if (b[0] != 'X' || (n == 2 && b[1] != 'F')) return AfterS::garbage;
  return n == 2 ? AfterS::frames : AfterS::nothing; // half a magic: wait for the rest
}

} // namespace resume
} // namespace xp::stream
