// Moving a resumed stream back onto RDMA (see reattach.h, docs/protocol.md
// §7 "Back to RDMA after a resume").  Cold path: a handful of calls per
// stream and attempt; nothing here runs per message.
#include "stream/reattach.h"

#include <atomic>
#include <cstring>
#include <ctime>
#include <sys/mman.h>

#include "common/lock_check.h"
#include "common/logsink.h"
#include "recover/reattach_wire.h"
#include "stream/engine_internal.h"
#include "stream/resume_internal.h"
#include "stream/wake.h"

namespace xp::stream::reattach {
namespace {

using flow::RecordType;
using resume::collect_resend;
using resume::flush_out;
using resume::give_up;
using resume::go_framed;

std::atomic<Hook> g_hook{nullptr};
// A stream bound to a new channel that is not back on RDMA after this long
// gives the channel up (the peer's SWITCHBACK or SWITCH never came).
constexpr uint64_t kBoundMs = 10000;
// A set-up to the same peer under way (maybe another stream's attempt):
// look again this much later instead of starting a second one.
constexpr uint64_t kBehindMs = 20;
// An rdma_cm set-up for a stream going back gets this long (see start()).
constexpr uint64_t kConnectMs = 20000;

void emit(Event::Kind k, uint64_t us = 0) {
  if (Hook h = g_hook.load(std::memory_order_acquire)) h(Event{k, us});
}

// A control record on ch (ch->mu not held): sent, or queued behind the
// channel's other control records (flow::RecordChannel::send_control).
bool send_ctl(Channel* ch, RecordType t, uint32_t id, uint64_t seq, const void* p, size_t n) {
  std::lock_guard<std::mutex> l(ch->mu);
  return ch->mux->channel().send_control(t, id, seq, p, n) == Status::ok;
}

// ch->mu held: c's stream on ch at id (false: id taken or no memory).
bool bind(Conn* c, Channel* ch, uint32_t id) {
  XP_ASSERT_HELD(ch->mu);
  if (!engine::bind_stream(c, ch, id)) return false;
  c->reup.peer_switch = false;
  return true;
}

// c's stream leaves a channel that goes on working (a NAK): forgotten
// there without a FIN (nothing of it ever went over the channel).
void unbind(Conn* c) {
  Channel* ch = c->ch;
  if (ch == nullptr) return;
  {
    std::lock_guard<std::mutex> l(ch->mu);
    if (c->st) ch->mux->forget(c->st);
    c->st = nullptr;
    engine::detach(c, ch);
  }
  c->ch = nullptr;
}

void failed_attempt(Conn* c) {
  const EngineParams& p = engine::params();
  c->reup.state = idle;
  c->reup.delay_ms =
      recover::backoff_after_failure(c->reup.delay_ms, p.reupgrade_ms, p.reupgrade_max_ms);
  c->reup.at_ms = engine::now_ms() + c->reup.delay_ms;
  if (c->role == recover::Role::client) emit(Event::failed);
  XP_SLOG(XP_SLOG_DEBUG, "fd %d: back to RDMA: attempt %llu failed, next in %u ms", c->sock(),
          static_cast<unsigned long long>(c->reup.counter), c->reup.delay_ms);
}

// Both ends may try: each end's direction and the receive side must be
// plain framed TCP with nothing pending that a switch would cut.
bool eligible(const Conn* c) {
  const Resume* r = c->rs;
  return r != nullptr && engine::params().reupgrade_ms != 0 && !c->reup.never &&
         !engine::g().forked_child && !engine::g().forking.load() && !c->closed.load() &&
         !c->dead.load() && !c->rd_shut.load() && c->tuple.family == 4 &&
         r->tx == Resume::Tx::framed && r->rx_framed && r->peer_resumed && !r->moved &&
         !r->rx_raw && !r->broken && !r->app_shut && !r->shut_pending && !r->tx_eof && !r->fin &&
         !r->eof && r->raw_left == 0 && r->pre.size() == 0 && !r->rx_back && r->ahead_len == 0 &&
         !r->ahead_fin;
}

// What ties a REATTACH and its ACK to the channel they cross.
const recover::ChannelBinding& binding_of(const Channel* ch) {
  return ch->binding;
}

void send_reattach(Conn* c) {
  uint8_t p[recover::kReattachBytes];
  recover::encode_reattach(c->rs->key, c->tuple, c->sid, c->reup.counter, binding_of(c->ch), p);
  c->reup.state = waiting;
  c->reup.deadline_ms = engine::now_ms() + engine::params().handshake_timeout_ms;
  if (!send_ctl(c->ch, RecordType::reattach, c->sid, c->reup.counter, p, sizeof p)) {
    unbind(c);
    failed_attempt(c);
  }
}

// Our direction goes back: SWITCHBACK after the last frame queued for the
// kernel, SWITCH {S'} over the channel, then bytes from S' to the stream.
void switch_tx(Conn* c, Resume* r) {
  // Only once the kernel took every frame before it: then a second failure
  // finds room in `out` for its RESUME and everything it re-sends.
  if (r->tx != Resume::Tx::framed || r->app_shut || r->shut_pending || r->tx_eof ||
      r->out.size() != 0)
    return;
  const uint64_t at = r->tx_next;
  Channel* ch = c->ch;
  {
    std::lock_guard<std::mutex> l(ch->mu);
    // The window starts at S' before the SWITCH leaves: the peer's ACK of
    // it may come back at once.
    if (c->st == nullptr || c->st->set_tx_start(at) != Status::ok) {
      engine::mark_failed(ch, ResumeCause::local);
      return;
    }
  }
  uint8_t f[recover::kSwitchbackFrameBytes];
  recover::encode_switchback(r->key, r->dir, at, c->reup.counter, f);
  r->out.put(f, sizeof f);
  if (!send_ctl(ch, RecordType::switch_, c->sid, at, nullptr, 0)) {
    // The SWITCHBACK is queued: the failure path writes a RESUME after it.
    engine::mark_failed(ch, ResumeCause::local);
  }
  r->tx = Resume::Tx::back;
  c->tx_rdma.store(true, std::memory_order_release);
  flush_out(c, r);
  {
    std::lock_guard<std::mutex> l(ch->mu);
    engine::refresh(c);
  }
  c->ready.gen.fetch_add(1);
  wake::notify(c); // a send waiting for room in `out` goes on with the stream
  XP_SLOG(XP_SLOG_DEBUG, "fd %d: sending over RDMA again from byte %llu (stream %u)", c->sock(),
          static_cast<unsigned long long>(at), c->sid);
}

// Both directions back and nothing left for or from the kernel: an
// ordinary RDMA stream again.
void finish(Conn* c, Resume* r) {
  const uint64_t us = engine::mono_us() - c->reup.tcp_since_us;
  XP_SLOG(XP_SLOG_INFO,
          "fd %d: stream %u back on RDMA after %llu.%03llu s on TCP (attempt %llu, %s end)",
          c->sock(), c->sid, static_cast<unsigned long long>(us / 1000000),
          static_cast<unsigned long long>(us / 1000 % 1000),
          static_cast<unsigned long long>(c->reup.counter),
          c->role == recover::Role::client ? "client" : "server");
  emit(Event::returned, us);
  c->reup.state = idle;
  c->reup.returned = true;
  c->reup.back_ms = engine::now_ms();
  c->reup.at_ms = 0;
  // A FIN that went over the channel meanwhile: the kernel's follows now
  // (as for any stream on RDMA, stream/conn_io.cc shutdown).
  if (r->app_shut) syscall(SYS_shutdown, c->sock(), SHUT_WR);
  // A data call that waits for Conn::mu finds no resume state and starts
  // over on the stream (resume_io.cc: Status::look_again).
  c->rs = nullptr;
  c->resumed.store(false, std::memory_order_release);
  resume::release(r);
  {
    std::lock_guard<std::mutex> l(c->ch->mu);
    engine::refresh(c);
  }
  c->ready.gen.fetch_add(1);
  c->note_ready(true);
  wake::notify(c);
}

} // namespace

void set_hook(Hook h) {
  g_hook.store(h, std::memory_order_release);
}

bool unshared(Conn* c) {
  XP_ASSERT_HELD(c->mu);
  const Resume* r = c->rs;
  // Only a stream still framed both ways can take the return path; one
  // that turned raw at the fork (RAW, or moved) stays on plain TCP.
  if (!c->resumed.load() || r == nullptr || r->moved || r->rx_raw || c->pinned.load() ||
      c->moved_stream.load() || (r->tx != Resume::Tx::framed && r->tx != Resume::Tx::wait))
    return false;
  c->reup.never = false;
  c->reup.at_ms = 0; // the next tick schedules an attempt after the back-off
  return true;
}

void on_resumed(Conn* c) {
  XP_ASSERT_HELD(c->mu);
  const EngineParams& p = engine::params();
  c->reup.tcp_since_us = engine::mono_us();
  c->reup.state = idle;
  c->reup.at_ms = 0;
  if (c->reup.returned) {
    // Back on RDMA, failed again: a short stay counts as a failed attempt.
    c->reup.delay_ms = recover::backoff_after_return(
        c->reup.delay_ms, p.reupgrade_ms, p.reupgrade_max_ms, engine::now_ms() - c->reup.back_ms);
  } else if (c->reup.delay_ms == 0) {
    c->reup.delay_ms = p.reupgrade_ms;
  }
}

void tick(Conn* c, uint64_t now) {
  XP_ASSERT_HELD(c->mu);
  Resume* r = c->rs;
  if (r == nullptr) return;
  switch (c->reup.state) {
  case idle:
    if (c->role != recover::Role::client || !eligible(c)) break;
    if (c->reup.at_ms == 0) c->reup.at_ms = now + c->reup.delay_ms;
    if (now >= c->reup.at_ms) {
      c->reup.state = queued;
      c->ref();
      std::lock_guard<std::mutex> ql(engine::g().qmu);
      engine::g().start_queue.push_back(c);
      engine::kick();
    }
    break;
  case connecting:
    if (now > c->reup.deadline_ms) { // a late channel stays idle, then goes
      XP_SLOG(XP_SLOG_DEBUG, "fd %d: back to RDMA: no channel in time", c->sock());
      failed_attempt(c);
    }
    break;
  case waiting:
  case bound:
    // No answer, or not back in time: the channel is given up (the peer
    // may have bound the stream; both ends then go on over TCP).
    if (now > c->reup.deadline_ms && c->ch) engine::mark_failed(c->ch, ResumeCause::local);
    break;
  default:
    break;
  }
  advance(c);
}

void advance(Conn* c) {
  XP_ASSERT_HELD(c->mu);
  Resume* r = c->rs;
  if (r == nullptr || c->reup.state != bound || c->ch == nullptr) return;
  if (c->ch->failed.load()) return; // fold() follows
  switch_tx(c, r);
  if (r->rx_back && !c->rx_rdma.load() && r->sb_counter == c->reup.counter && r->buf.size() == 0 &&
      r->pre.size() == 0) {
    if (c->reup.peer_switch) {
      if (c->reup.peer_switch_at != r->rx_next) {
        // The channel's SWITCH and the TCP SWITCHBACK disagree.
        engine::mark_failed(c->ch, ResumeCause::protocol_error);
        give_up(c, r, "SWITCH and SWITCHBACK name different bytes");
        return;
      }
      {
        std::lock_guard<std::mutex> l(c->ch->mu);
        if (c->st) c->st->ack_switch(); // the peer knows we read its SWITCHBACK
        engine::refresh(c);
      }
      c->rx_rdma.store(true, std::memory_order_release);
      c->ready.gen.fetch_add(1);
      c->note_ready(true);
      wake::notify(c);
      XP_SLOG(XP_SLOG_DEBUG, "fd %d: receiving over RDMA again from byte %llu (stream %u)",
              c->sock(), static_cast<unsigned long long>(r->rx_next), c->sid);
    } else if (resume::peer_frames_waiting(c->sock())) {
      // A RESUME after the peer's SWITCHBACK: its side of the channel failed.
      engine::mark_failed(c->ch, ResumeCause::peer_resumed);
      return;
    }
  }
  if (c->tx_rdma.load() && c->rx_rdma.load() && r->out.size() == 0 && !r->shut_pending)
    finish(c, r);
}

void start(Conn* c) {
  XP_ASSERT_HELD(engine::g().mu);
  std::lock_guard<std::mutex> l(c->mu);
  if (c->reup.state != queued) return;
  c->reup.state = idle;
  c->reup.at_ms = 0;
  if (!c->resumed.load() || !eligible(c) || c->ch != nullptr) return;
  const uint64_t now = engine::now_ms();
  // A channel to the peer's address and port (most likely the process
  // holding the connection; a sibling refuses and rdma_cm redirects).
  if (!c->reup.use_cm) {
    for (Channel* ch : engine::g().chans.live()) {
      if (!ch->client_side || ch->failed.load() || ch->dying_since_ms != 0 ||
          !(ch->peer_addr == recover::server_addr(c->tuple)) ||
          ch->peer_port != c->tuple.server_port)
        continue;
      bool ok = false;
      {
        std::lock_guard<std::mutex> chl(ch->mu);
        uint32_t id = 0;
        ok = ch->mux->fresh_id(&id) && bind(c, ch, id);
      }
      if (!ok) continue;
      ++c->reup.counter;
      emit(Event::attempt);
      send_reattach(c);
      return;
    }
  }
  // Another set-up to this peer under way: its channel serves us too.
  for (engine::CmUser* u : engine::g().inflight) {
    if (!u->conn->closed.load() && u->conn != c &&
        recover::server_addr(u->conn->tuple) == recover::server_addr(c->tuple) &&
        u->conn->tuple.server_port == c->tuple.server_port) {
      c->reup.at_ms = now + kBehindMs;
      return;
    }
  }
  c->reup.use_cm = false;
  c->reup.redirected = false;
  ++c->reup.counter;
  emit(Event::attempt);
  c->reup.state = connecting;
  // rdma_cm reports every outcome itself; this only bounds a lost one.  Not
  // shorter: right after a link comes back the first request may be lost,
  // and rdma_cm retries it only after its CM response timeout (about 4 s):
  // a bound near that would abandon every such attempt.
  c->reup.deadline_ms = now + kConnectMs;
  if (!engine::cm_reattach(engine::g(), c, c->tuple.server_port)) failed_attempt(c);
}

void over_channel(Conn* c, Channel* ch) {
  XP_ASSERT_HELD(engine::g().mu);
  std::lock_guard<std::mutex> l(c->mu);
  if (c->reup.state != connecting) return; // given up meanwhile: the channel idles, then goes
  if (ch == nullptr || !c->resumed.load() || !eligible(c) || c->ch != nullptr)
    return failed_attempt(c);
  bool ok;
  {
    std::lock_guard<std::mutex> chl(ch->mu);
    ok = bind(c, ch, 0); // the first stream's id (rdma_cm named none)
  }
  if (!ok) return failed_attempt(c);
  send_reattach(c);
}

void on_reattach(Channel* ch, const ControlRecord& rec) {
  XP_ASSERT_HELD(engine::g().mu);
  const flow::RecordHeader& h = rec.h;
  auto nak = [&](recover::NakCode code) {
    send_ctl(ch, RecordType::attach_nak, h.stream, static_cast<uint64_t>(code), nullptr, 0);
  };
  if (ch->client_side) return; // only the channel's client attaches
  recover::TcpTuple t;
  recover::NakCode code;
  if (recover::parse_reattach_tuple(rec.payload, h.len, &t, &code) != Status::ok) return nak(code);
  uint8_t key[recover::kTupleIdBytes];
  recover::tuple_id(t, key);
  Conn* c = engine::find_by_key(engine::g(), key);
  // A channel whose rdma_cm requester is not the stream's TCP client binds
  // nothing of it (docs/protocol.md §2).
  if (c == nullptr || !engine::channel_serves(ch, c)) return nak(recover::NakCode::unknown_stream);
  std::lock_guard<std::mutex> l(c->mu);
  Resume* r = c->rs;
  if (!c->resumed.load() || r == nullptr)
    return nak(recover::NakCode::busy); // on RDMA, or never resumed
  // Only the two ends of the stream know the key; the tag names this
  // channel, so it was made for no other; the counter grows with every
  // attempt, so an old REATTACH cannot be played again.
  if (recover::check_reattach(r->key, rec.payload, h.len, h.stream, h.seq, binding_of(ch)) !=
          Status::ok ||
      h.seq <= c->reup.counter) {
    XP_SLOG(XP_SLOG_INFO, "fd %d: REATTACH refused (tag or counter %llu)", c->sock(),
            static_cast<unsigned long long>(h.seq));
    return nak(recover::NakCode::failed);
  }
  if (!eligible(c) || c->ch != nullptr) return nak(recover::NakCode::busy);
  bool ok;
  {
    std::lock_guard<std::mutex> chl(ch->mu);
    ok = bind(c, ch, h.stream);
  }
  if (!ok) return nak(recover::NakCode::busy);
  c->reup.counter = h.seq;
  c->reup.state = bound;
  c->reup.deadline_ms = engine::now_ms() + kBoundMs;
  uint8_t ack[recover::kReattachAckBytes];
  recover::encode_reattach_ack(r->key, c->tuple, h.stream, h.seq, binding_of(ch), ack);
  if (!send_ctl(ch, RecordType::reattach_ack, h.stream, h.seq, ack, sizeof ack)) {
    engine::mark_failed(ch, ResumeCause::local);
    return;
  }
  advance(c);
}

void on_record(Conn* c, Channel* ch, const ControlRecord& rec) {
  XP_ASSERT_HELD(c->mu);
  const flow::RecordHeader& h = rec.h;
  Resume* r = c->rs;
  if (r == nullptr || c->ch != ch || h.stream != c->sid) return; // an earlier attempt's
  const auto type = static_cast<RecordType>(h.type);
  if (type == RecordType::attach_nak && c->reup.state == waiting) {
    XP_SLOG(XP_SLOG_DEBUG, "fd %d: REATTACH refused by the peer (%llu)", c->sock(),
            static_cast<unsigned long long>(h.seq));
    unbind(c);
    // unknown_stream / busy: that channel's process may not hold the
    // connection (a sibling): the next attempt asks rdma_cm.
    c->reup.use_cm = h.seq == static_cast<uint64_t>(recover::NakCode::unknown_stream);
    return failed_attempt(c);
  }
  if (type == RecordType::reattach_ack && c->reup.state == waiting && h.seq == c->reup.counter &&
      recover::check_reattach_ack(r->key, c->tuple, h.stream, h.seq, binding_of(ch), rec.payload,
                                  h.len) == Status::ok) {
    c->reup.state = bound;
    c->reup.deadline_ms = engine::now_ms() + kBoundMs;
    return advance(c);
  }
  if (type == RecordType::switch_ && h.len == 0 &&
      (c->reup.state == waiting || c->reup.state == bound) && !c->reup.peer_switch) {
    c->reup.peer_switch = true;
    c->reup.peer_switch_at = h.seq;
    return advance(c);
  }
  // Anything else on a stream coming back breaks the channel's protocol.
  XP_SLOG(XP_SLOG_WARN, "fd %d: control record type %u refused while going back to RDMA", c->sock(),
          h.type);
  engine::mark_failed(ch, ResumeCause::protocol_error);
}

void fold(Conn* c) {
  XP_ASSERT_HELD(c->mu);
  Resume* r = c->rs;
  Channel* ch = c->ch;
  if (r == nullptr || ch == nullptr) return;
  const bool tx_back = c->tx_rdma.load(), rx_back = c->rx_rdma.load();
  const bool was_bound = c->reup.state == bound;
  bool gap = false, reset = false;
  uint64_t first = 0;
  {
    std::lock_guard<std::mutex> l(ch->mu);
    ch->mux->fail(); // its state is final
    Stream* s = c->st;
    if (s) {
      if (tx_back) gap = !collect_resend(ch, s, r, &first);
      if (rx_back || s->rx_started()) {
        // The peer's bytes over the channel, not yet delivered: after the
        // buffered TCP bytes (rx_back: those are delivered already) or,
        // before its SWITCHBACK was read, kept until it is.
        const size_t n = s->readable_bytes();
        uint8_t* dst = nullptr;
        if (!rx_back && (n > 0 || s->peer_finished())) {
          // The peer's FIN too: its direction ended there, and no RESUME
          // with frames may follow its SWITCHBACK (it may be gone).
          void* m =
              n > 0 ? mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                    : nullptr;
          if (m != MAP_FAILED) {
            r->ahead = static_cast<uint8_t*>(m);
            r->ahead_cap = n;
            r->ahead_seq = s->delivered();
            r->ahead_counter = c->reup.counter;
            r->ahead_fin = s->peer_finished();
            dst = r->ahead;
          } else {
            gap = true;
          }
        }
        uint8_t tmp[16384];
        size_t got = 0;
        while (s->read(tmp, sizeof tmp, &got, false) == Status::ok && got > 0) {
          if (rx_back) {
            r->buf.put(tmp, got); // fits: buf was empty when the stream took over
          } else if (dst) {
            memcpy(dst + r->ahead_len, tmp, got);
            r->ahead_len += got;
          }
        }
        if (rx_back) {
          r->rx_next = s->received();
          r->fin = s->peer_finished();
        }
        reset = s->was_reset();
      }
    }
    engine::detach(c, ch);
  }
  c->ch = nullptr;
  c->st = nullptr;
  c->tx_rdma.store(false, std::memory_order_release);
  c->rx_rdma.store(false, std::memory_order_release);
  r->again = true;
  r->again_counter = c->reup.counter;
  if (rx_back) {
    // Its SWITCHBACK is behind us: a RESUME comes next on TCP.
    r->rx_back = false;
    r->peer_resumed = false;
    r->hdr_have = 0;
    r->in_frame = false;
  }
  if (tx_back) {
    go_framed(c, r, first); // RESUME after our SWITCHBACK, the bytes it may lack
  } else if (r->tx == Resume::Tx::back) {
    r->tx = Resume::Tx::framed;
  }
  // Our FIN went over the failed channel: the kernel's after the frames.
  if (r->app_shut && !r->tx_eof) r->shut_pending = true;
  XP_SLOG(XP_SLOG_INFO, "fd %d: stream %u: the channel it went back to failed: on TCP again",
          c->sock(), c->sid);
  if (was_bound || c->reup.state == waiting) failed_attempt(c);
  if (gap) give_up(c, r, "bytes to re-send are not in the staging ring");
  if (reset) give_up(c, r, "the peer had reset the stream");
  c->ready.gen.fetch_add(1);
  resume::pump(c);
  wake::notify();
}

bool on_switchback(Conn* c, Resume* r) {
  uint64_t counter = 0;
  recover::Dir peer = r->dir == recover::Dir::c2s ? recover::Dir::s2c : recover::Dir::c2s;
  if (recover::check_switchback(r->key, peer, r->frame, r->rpay, &counter) != Status::ok)
    return false;
  if (r->frame.seq != r->rx_next || counter == 0) return false; // exactly where we are
  const bool live = counter == c->reup.counter &&
                    (c->reup.state == waiting || c->reup.state == bound) && c->ch != nullptr;
  const bool earlier = r->again && counter <= r->again_counter;
  if (!live && !earlier) return false; // no attempt of ours it could belong to
  if ((r->ahead_len > 0 || r->ahead_fin) && counter == r->ahead_counter &&
      r->ahead_seq != r->rx_next)
    return false;
  r->rx_back = true;
  r->sb_counter = counter;
  return true;
}

bool after_switchback(Conn* c, Resume* r) {
  if (!r->again || r->sb_counter > r->again_counter) return false; // the channel goes on
  if (c->reup.state == bound && r->sb_counter == c->reup.counter) return false;
  // That attempt's channel failed: the bytes it carried, then the peer's
  // RESUME and frames.
  if ((r->ahead_len > 0 || r->ahead_fin) && r->sb_counter == r->ahead_counter) {
    if (r->buf.space() < r->ahead_len) return false; // once the program read some
    r->buf.put(r->ahead, r->ahead_len);
    r->rx_next += r->ahead_len;
    if (r->ahead) munmap(r->ahead, r->ahead_cap);
    r->ahead = nullptr;
    r->ahead_len = r->ahead_cap = 0;
    if (r->ahead_fin) r->fin = true; // the end of the stream, after those bytes
    r->ahead_fin = false;
  }
  r->rx_back = false;
  r->peer_resumed = false;
  return true;
}

} // namespace xp::stream::reattach
