// Moving streams from a working channel to their TCP connections (see
// move.h, docs/protocol.md §7 "Moving a stream").  Cold path: at fork, and
// when a peer forks.
#include "stream/move.h"

#include <cerrno>
#include <cstring>
#include <ctime>
#include <new>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <vector>

#include "common/lock_check.h"
#include "common/logsink.h"
#include "stream/engine_internal.h"
#include "stream/resume_internal.h"
#include "stream/wake.h"

namespace xp::stream::move {
namespace {

using flow::RecordType;

// At fork: how long streams may take to settle (a SWITCH on its way gets
// verified and acknowledged), how long the peers may take to answer our
// MOVEs (one round trip; a peer that does not answer in time is treated as
// a failed channel), and how long the bytes still owed to the kernel may
// take to get there.
constexpr uint64_t kSettleMs = 500;
constexpr uint64_t kAnswerMs = 1000;
constexpr uint64_t kFlushMs = 500;

bool tx_switched(const Conn* c) {
  return c->tx_rdma.load() || c->sess.tx_mode() == Mode::rdma;
}

// c->mu and ch->mu held.  A stream can move cleanly when each direction
// is either still on TCP or switched with both ends knowing it: our
// SWITCH acknowledged by the peer, the peer's verified and acknowledged by
// us.  (Otherwise the failure path of §7 sorts it out.)
bool settled(const Conn* c) {
  XP_ASSERT_HELD(c->mu);
  const Stream* s = c->st;
  if (s == nullptr) return false;
  if (tx_switched(c) && !s->peer_knows_tx_start()) return false;
  if (s->rx_started() && (c->sess.rx_mode() != Mode::rdma || !c->switch_acked)) return false;
  return true;
}

// c->mu and ch->mu held: the peer's MOVE agrees with what we hold.  Only
// an answer may say the peer has no such stream.
bool consistent(const Conn* c, bool answer) {
  XP_ASSERT_HELD(c->mu);
  const Stream* s = c->st;
  const Stream::PeerMove& pm = s->peer_move;
  if (pm.flags & kGone) return answer;
  const bool peer_sw = pm.flags & kTxSwitched;
  if (peer_sw != s->rx_started()) return false;
  // RC delivers in order: every byte the peer sent before its MOVE is here.
  if (peer_sw && (c->sess.rx_mode() != Mode::rdma || c->sess.rx_offset() != pm.start ||
                  pm.end != s->received()))
    return false;
  if (tx_switched(c) ? pm.received > s->send_next() : pm.received != 0) return false;
  return true;
}

// ch->mu held: our MOVE after our last record of the stream; nothing of
// ours for it follows (the stream is frozen).
bool send_move(Channel* ch, Conn* c) {
  XP_ASSERT_HELD(ch->mu);
  Stream* s = c->st;
  const bool sw = tx_switched(c);
  recover::MoveInfo mi;
  mi.flags = sw ? kTxSwitched : 0;
  mi.start = sw ? c->sess.tx_offset() : 0;
  mi.received = s->rx_started() ? s->received() : 0;
  uint8_t p[kPayloadBytes];
  recover::encode_move(mi, p);
  // Sent, or queued behind the channel's other control records (and ahead
  // of any later data: flow::RecordChannel::send_control).
  if (ch->failed.load() ||
      ch->mux->channel().send_control(RecordType::move_, s->id(), sw ? s->send_next() : 0, p,
                                      sizeof p) != Status::ok)
    return false;
  s->freeze_tx();
  return true;
}

// c->mu held, both MOVEs crossed: the stream leaves the channel (no FIN:
// it goes on) and continues on TCP.
void finish(Conn* c, ResumeCause why, uint64_t t0_us) {
  XP_ASSERT_HELD(c->mu);
  Channel* ch = c->ch;
  auto* r = new (std::nothrow) Resume(engine::params().stream_window);
  if (r != nullptr && !r->ok()) {
    resume::release(r);
    r = nullptr;
  }
  const bool sw = tx_switched(c);
  if (r) {
    r->moved = true;
    c->moved_stream.store(true, std::memory_order_release);
    c->reup.never = true; // moved streams never go back (docs/protocol.md §7)
    r->cause = why;
    r->started_us = t0_us;
    r->started_ms = engine::now_ms();
    r->deadline_ms = UINT64_MAX;
    c->sess.session_key(r->key);
    r->dir = c->sess.tx_direction();
    r->tx_start = c->sess.tx_offset();
  }
  {
    std::lock_guard<std::mutex> l(ch->mu);
    Stream* s = c->st;
    if (r) {
      if (s->rx_started()) {
        // The peer's bytes over RDMA the program has not read: delivered
        // after the TCP bytes below its S, before what follows its RESUME.
        r->rx_cont = true;
        r->rx_framed = true; // its RESUME (moved, or not) comes first
        r->raw_left = c->sess.rx_tcp_remaining();
        uint8_t tmp[16384];
        size_t got = 0;
        while (s->read(tmp, sizeof tmp, &got, false) == Status::ok && got > 0)
          r->buf.put(tmp, got);
        r->rx_next = s->received();
        r->fin = s->peer_finished();
      }
      r->tx_next = s->send_next();
      r->tx = sw && s->write_shut() ? Resume::Tx::shut : Resume::Tx::raw;
      if (s->was_reset()) { // both ends saw the RST: the error once, then end of stream
        r->broken = true;
        r->tx = Resume::Tx::dead;
        c->err_pending.store(true);
      }
      // Published before the stream goes: a data call that finds no stream
      // under this lock must find the connection resumed.
      c->rs = r;
      c->resumed.store(true, std::memory_order_release);
    } else {
      c->dead.store(true);
      c->err_pending.store(true);
    }
    c->tx_rdma.store(false, std::memory_order_release);
    c->rx_rdma.store(false, std::memory_order_release);
    ch->mux->forget(s);
    c->st = nullptr;
    engine::detach(c, ch);
  }
  c->ch = nullptr;
  if (r == nullptr) {
    XP_SLOG(XP_SLOG_WARN, "fd %d: no memory to move the stream to TCP: reset", c->sock());
    c->ready.gen.fetch_add(1);
    wake::notify();
    return;
  }
  if (c->phase.load() == Phase::upgrading) {
    c->phase.store(Phase::rdma, std::memory_order_release);
    engine::report(c, Mode::rdma, Reason::none);
  }
  XP_SLOG(XP_SLOG_DEBUG,
          "fd %d: stream %u moves to TCP (%s): tx %s at %llu, rx %s at %llu (%zu buffered, %llu "
          "raw bytes left)",
          c->sock(), c->sid, resume_cause_name(why), sw ? "switched" : "tcp",
          static_cast<unsigned long long>(r->tx_next), r->rx_cont ? "switched" : "tcp",
          static_cast<unsigned long long>(r->rx_next), r->buf.size(),
          static_cast<unsigned long long>(r->raw_left));
  if (sw && r->tx == Resume::Tx::raw) {
    // Our RESUME with the moved flag, then our bytes raw: the peer can tell
    // this from the failure path's frames (a move that crossed a failure).
    recover::ResumeInfo ri;
    ri.knows_start = r->rx_framed;
    ri.moved = true;
    ri.from = r->tx_next;
    ri.received = r->rx_framed ? r->rx_next : 0;
    uint8_t f[recover::kResumeFrameBytes];
    recover::encode_resume(r->key, r->dir, ri, f);
    r->out.put(f, sizeof f);
    resume::flush_out(c, r);
  }
  c->ready.gen.fetch_add(1);
  resume::settle(c, r, true);
  wake::notify();
}

// c->mu held: the move cannot be made cleanly; the channel is failed and
// every stream on it resumes by the failure path (§7), which copes with
// any state.
void fail_over(Conn* c, ResumeCause why) {
  XP_ASSERT_HELD(c->mu);
  Channel* ch = c->ch;
  if (ch == nullptr || c->resumed.load()) return;
  engine::mark_failed(ch, why);
  resume::start(c, static_cast<ResumeCause>(ch->fail_cause.load()));
}

} // namespace

bool candidate(Conn* c) {
  XP_ASSERT_HELD(c->mu);
  if (c->resumed.load() || c->closed.load() || c->ch == nullptr || c->st == nullptr) return false;
  std::lock_guard<std::mutex> l(c->ch->mu);
  return tx_switched(c) || c->st->rx_started();
}

bool begin(Conn* c) {
  XP_ASSERT_HELD(c->mu);
  if (!candidate(c) || c->ch->failed.load()) return false;
  std::lock_guard<std::mutex> l(c->ch->mu);
  return settled(c) && send_move(c->ch, c);
}

int complete(Conn* c, ResumeCause why, uint64_t t0_us, engine::Changes* changed) {
  XP_ASSERT_HELD(c->mu);
  Channel* ch = c->ch;
  if (c->resumed.load() || ch == nullptr || c->st == nullptr) return 1;
  bool ok = false, waiting = false;
  if (!ch->failed.load()) {
    std::lock_guard<std::mutex> l(ch->mu);
    if (!c->st->peer_move.seen) engine::progress_locked(ch, nullptr, changed);
    waiting = !c->st->peer_move.seen && !ch->failed.load();
    ok = c->st->peer_move.seen && consistent(c, true);
  }
  if (waiting) return 0;
  if (ok) {
    finish(c, why, t0_us);
    return 1;
  }
  return -1;
}

int on_record(Channel* ch, const flow::RecordHeader& h, const uint8_t* ring) {
  XP_ASSERT_HELD(ch->mu);
  if (h.len != kPayloadBytes) return -1;
  // The payload is in the peer-writable ring: copied once, and only the
  // copy is checked and kept (docs/protocol.md §4 "The ring is
  // peer-writable").
  uint8_t p[kPayloadBytes];
  memcpy(p, ring, sizeof p);
  recover::MoveInfo mi;
  if (recover::parse_move(p, sizeof p, &mi) != Status::ok) return -1;
  Stream* s = ch->mux->find(h.stream);
  if (s == nullptr) {
    // Closed here (its FIN or RST went before): the peer must not wait.
    if (!(mi.flags & kGone)) {
      recover::MoveInfo gone;
      gone.flags = kGone;
      uint8_t g[kPayloadBytes];
      recover::encode_move(gone, g);
      ch->mux->channel().send_control(RecordType::move_, h.stream, 0, g, sizeof g);
    }
    return 0;
  }
  if (s->peer_move.seen) return -1; // a second MOVE
  s->peer_move.seen = true;
  s->peer_move.flags = mi.flags;
  s->peer_move.end = h.seq;
  s->peer_move.start = mi.start;
  s->peer_move.received = mi.received;
  return 1;
}

void on_peer_move(Conn* c, Channel* ch) {
  XP_ASSERT_HELD(c->mu);
  if (c->resumed.load() || c->closed.load() || c->ch != ch || c->st == nullptr) return;
  // The peer stopped waiting for our answer (none within 1 s: this process
  // stalled) and resumed by the failure path: its RESUME is on TCP already,
  // where after its switch it writes nothing else before our answer.
  // Answering now would announce our bytes as delivered up to our MOVE,
  // beyond what it read over RDMA, and it would reset the stream: follow
  // it onto frames instead (they re-send from what it holds).
  if (c->rx_rdma.load() && resume::peer_frames_waiting(c->sock())) {
    XP_SLOG(XP_SLOG_INFO, "fd %d: the peer gave up moving stream %u: channel failed over",
            c->sock(), c->sid);
    return fail_over(c, ResumeCause::peer_resumed);
  }
  engine::Changes changed;
  bool ok;
  {
    std::lock_guard<std::mutex> l(ch->mu);
    Stream* s = c->st;
    // Our own MOVE went first (we fork too): for_fork finishes the move.
    if (s->frozen() || !s->peer_move.seen) return;
    ok = settled(c) && consistent(c, false) && send_move(ch, c);
  }
  changed.wake();
  if (ok) return finish(c, ResumeCause::peer_moved, engine::mono_us());
  XP_SLOG(XP_SLOG_INFO, "fd %d: the peer moves stream %u to TCP mid-switch: channel failed over",
          c->sock(), c->sid);
  fail_over(c, ResumeCause::local);
}

bool for_conn(Conn* c, ResumeCause why) {
  const uint64_t t0 = engine::mono_us();
  // 1. Let a switch on its way settle (c->pinned keeps advance() from
  // switching anything more meanwhile).
  const uint64_t settle_end = engine::now_ms() + kSettleMs;
  while (engine::now_ms() < settle_end) {
    Channel* busy = nullptr;
    {
      std::lock_guard<std::mutex> l(c->mu);
      if (!candidate(c) || c->ch->failed.load()) break;
      std::lock_guard<std::mutex> chl(c->ch->mu);
      if (settled(c)) break;
      busy = c->ch;
    }
    engine::progress(busy);
    usleep(200);
  }
  // 2. Our MOVE, then the peer's, the connection locked throughout (no data
  // call slips in between).
  std::lock_guard<std::mutex> l(c->mu);
  if (c->resumed.load() || c->closed.load()) return true;
  if (!begin(c)) {
    if (!candidate(c) && !(c->ch && c->ch->failed.load())) return true;
    XP_SLOG(XP_SLOG_INFO, "fd %d: stream %u could not move cleanly: channel failed over", c->sock(),
            c->sid);
    fail_over(c, why);
    return false;
  }
  engine::Changes changed;
  const uint64_t answer_end = engine::now_ms() + kAnswerMs;
  int st;
  while ((st = complete(c, why, t0, &changed)) == 0 && engine::now_ms() < answer_end)
    usleep(50);
  changed.wake();
  wake::notify();
  if (st == 1) return true;
  XP_SLOG(XP_SLOG_INFO, "fd %d: stream %u: no answer to its move: channel failed over", c->sock(),
          c->sid);
  fail_over(c, why);
  return false;
}

void for_fork() {
  const uint64_t t0 = engine::mono_us();
  std::vector<Conn*> cs;
  {
    std::lock_guard<std::mutex> l(engine::g().mu);
    for (Conn* c : engine::g().conns) {
      if (c->resumed.load() || c->closed.load() || c->phase.load() == Phase::tcp) continue;
      c->ref();
      cs.push_back(c);
    }
  }
  if (cs.empty()) return;
  // 1. Wait (without locks: the engine and the peer make progress) until
  // every stream on RDMA settled; advance() switches no direction meanwhile.
  const uint64_t settle_end = engine::now_ms() + kSettleMs;
  while (true) {
    std::vector<Channel*> busy;
    for (Conn* c : cs) {
      std::lock_guard<std::mutex> l(c->mu);
      if (!candidate(c) || c->ch->failed.load()) continue;
      std::lock_guard<std::mutex> chl(c->ch->mu);
      if (!settled(c)) busy.push_back(c->ch);
    }
    if (busy.empty() || engine::now_ms() >= settle_end) break;
    for (Channel* ch : busy)
      engine::progress(ch);
    usleep(200);
  }
  // 2. Our MOVEs, each stream frozen behind its own.  The connections stay
  // locked until they moved: no data call or shutdown can slip in.  (The
  // others on TCP are handled as before: shared_by_fork.)
  std::vector<Conn*> moving, fallback;
  engine::Changes changed;
  for (Conn* c : cs) {
    c->mu.lock();
    if (begin(c))
      moving.push_back(c);
    else if (candidate(c) || (c->ch && c->ch->failed.load() && !c->resumed.load()))
      fallback.push_back(c);
  }
  // 3. The peers' MOVEs (we poll the channels ourselves: records for other
  // connections wait in the inbox until the engine drains it), then move.
  const uint64_t answer_end = engine::now_ms() + kAnswerMs;
  int moved = 0;
  while (!moving.empty()) {
    const bool last = engine::now_ms() >= answer_end;
    for (size_t i = 0; i < moving.size();) {
      int st = complete(moving[i], ResumeCause::fork, t0, &changed);
      if (st == 0 && !last) {
        ++i;
        continue;
      }
      if (st == 1)
        ++moved;
      else
        fallback.push_back(moving[i]);
      moving[i] = moving.back();
      moving.pop_back();
    }
    if (!moving.empty()) usleep(50);
  }
  for (Conn* c : fallback) {
    XP_SLOG(XP_SLOG_INFO, "fd %d: fork: stream %u could not move cleanly: channel failed over",
            c->sock(), c->sid);
    fail_over(c, ResumeCause::fork);
  }
  for (Conn* c : cs)
    c->mu.unlock();
  const uint64_t moved_us = engine::mono_us() - t0;
  changed.wake();
  wake::notify();
  // 4. Bytes owed to the kernel get there before the fork (else both
  // processes would write them): the RESUMEs, the failed-over streams'
  // queues.  The raw bytes below the peer's S of a moved stream should be
  // in the kernel too, so that its readiness needs no engine in the child.
  const uint64_t flush_end = engine::now_ms() + kFlushMs;
  while (true) {
    bool clean = true;
    for (Conn* c : cs) {
      std::lock_guard<std::mutex> l(c->mu);
      Resume* r = c->rs;
      if (r == nullptr || c->closed.load() || c->phase.load() == Phase::tcp) continue;
      if (r->moved) {
        resume::flush_out(c, r); // our RESUME (moved), written once
        c->at_fork.unsafe = r->out.size() > 0;
        int avail = 0;
        if (r->raw_left > 0 && (syscall(SYS_ioctl, c->sock(), FIONREAD, &avail) != 0 ||
                                static_cast<uint64_t>(avail) < r->raw_left))
          clean = false;
        // The peer's RESUME (written right after its MOVE) is read here,
        // once: a copy in each process would be read by whichever reads
        // first, and the other would take the raw bytes after it for a
        // frame (a reset).  Nothing after it is read (fill_rx's limit).
        if (r->raw_left == 0 && r->rx_framed && !r->peer_resumed && !r->rx_raw) {
          bool got = resume::fill_rx(c, r);
          resume::settle(c, r, got);
          clean = clean && (r->peer_resumed || r->rx_raw || r->eof || r->broken);
        }
      } else {
        resume::pump(c);
        c->at_fork.unsafe = r->out.size() > 0 || r->tx == Resume::Tx::wait;
      }
      clean = clean && !c->at_fork.unsafe;
    }
    if (clean || engine::now_ms() >= flush_end) break;
    usleep(1000);
  }
  for (Conn* c : cs)
    c->unref();
  if (moved > 0 || !fallback.empty())
    XP_SLOG(XP_SLOG_INFO,
            "fork: %d stream(s) moved to TCP, %zu failed over, in %llu us (%llu us with the "
            "bytes owed to the kernel)",
            moved, fallback.size(), static_cast<unsigned long long>(moved_us),
            static_cast<unsigned long long>(engine::mono_us() - t0));
}

} // namespace xp::stream::move
