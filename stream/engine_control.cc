// The upgrade's control records and the decisions that follow them: attach,
// proofs, each direction's switch, giving up (docs/protocol.md §1-3).  Cold
// path: runs a handful of times per connection.
#include <arpa/inet.h>
#include <cstring>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/lock_check.h"
#include "common/logsink.h"
#include "stream/engine_internal.h"
#include "stream/listen_addr.h"
#include "stream/move.h"
#include "stream/ready_source.h"
#include "stream/reattach.h"
#include "stream/wake.h"

namespace xp::stream::engine {
namespace {

using flow::RecordType;

// Under ch->mu.  Sent, or queued behind the channel's other control
// records when it finds no room (flow::RecordChannel::send_control): never
// dropped.
bool send_msg_locked(Channel* ch, const recover::Message& m) {
  Status st = ch->mux->channel().send_control(static_cast<RecordType>(m.type), m.stream, m.seq,
                                              m.payload, m.len);
  if (st != Status::ok)
    XP_SLOG(XP_SLOG_DEBUG, "channel: control record type %u for stream %u not sent (%s)",
            static_cast<unsigned>(m.type), m.stream, status_name(st));
  else
    XP_SLOG(XP_SLOG_TRACE, "channel: control record type %u for stream %u sent",
            static_cast<unsigned>(m.type), m.stream);
  return st == Status::ok;
}

bool send_msg(Channel* ch, const recover::Message& m) {
  std::lock_guard<std::mutex> l(ch->mu);
  return send_msg_locked(ch, m);
}

} // namespace

// Handle one ATTACH; false when no connection with its 4-tuple exists here
// (yet: the application may not have accepted it).
bool handle_attach(Channel* ch, const ControlRecord& r, bool last_chance) {
  XP_ASSERT_HELD(g().mu);
  recover::TcpTuple t;
  recover::Nonce n;
  recover::NakCode nak;
  const flow::RecordHeader& h = r.h;
  if (recover::parse_attach(r.payload, h.len, &t, &n, &nak) != Status::ok) {
    send_msg(ch, recover::make_nak(h.stream, nak));
    return true;
  }
  // Only the TCP client may attach its connection: the channel's rdma_cm
  // requester must be the tuple's client address (docs/protocol.md §2).
  if (!ch->peer_addr.known() || !(ch->peer_addr == recover::client_addr(t))) {
    send_msg(ch, recover::make_nak(h.stream, recover::NakCode::unknown_stream));
    return true;
  }
  // Its address used up its failed bindings for now (stream/bind_failures.h).
  if (g().bind_failures.blocked(ch->peer_addr, now_ms())) {
    send_msg(ch, recover::make_nak(h.stream, recover::NakCode::busy));
    return true;
  }
  uint8_t key[recover::kTupleIdBytes];
  recover::tuple_id(t, key);
  Conn* c = find_by_key(g(), key);
  if (c == nullptr) {
    // Wait for the application to accept it only when it can still come
    // here: one of our listening sockets, and no sibling process took it.
    bool ours = false, sibling = false;
    for (ListenShare* sh : g().shares) {
      if (listen_port(sh->addr) != t.server_port) continue;
      ours = true;
      sibling |= share_find(sh, key, getpid(), nullptr);
    }
    if (!last_chance && ours && !sibling) return false;
    send_msg(ch, recover::make_nak(h.stream, recover::NakCode::unknown_stream));
    return true;
  }
  c->rv.heard_from_peer.store(true);
  std::lock_guard<std::mutex> l(c->mu);
  bool id_free;
  {
    std::lock_guard<std::mutex> chl(ch->mu);
    id_free = ch->mux->find(h.stream) == nullptr;
  }
  if (!id_free || c->ch != nullptr || c->rv.accepting || c->closed.load()) {
    send_msg(ch, recover::make_nak(h.stream, recover::NakCode::busy));
    return true;
  }
  // Its address holds as many streams waiting for their clients' first
  // proof as we allow (docs/protocol.md §8): this one stays on TCP.
  if (c->sess.state() == recover::State::idle && !unproven_room(g(), ch->peer_addr)) {
    send_msg(ch, recover::make_nak(h.stream, recover::NakCode::limit));
    fail(c, Reason::resources_exhausted, "streams waiting for their client's proof at the cap");
    return true;
  }
  recover::Message reply;
  c->sess.set_channel(ch->binding);
  Status st = c->sess.on_attach(h.stream, h.seq, r.payload, h.len, &reply);
  send_msg(ch, reply);
  if (st != Status::ok) {
    if (c->sess.state() == recover::State::failed) fail(c, c->sess.fallback_reason());
    return true;
  }
  Stream* s;
  {
    std::lock_guard<std::mutex> chl(ch->mu);
    s = ch->mux->open(h.stream, 0, 0);
    if (s) {
      s->owner = c;
      ch->conns.add(c);
      c->ref();
    }
  }
  if (s == nullptr) {
    c->sess.fail(Reason::resources_exhausted);
    flush(c);
    fail(c, Reason::resources_exhausted);
    return true;
  }
  c->ch = ch;
  c->st = s;
  c->sid = h.stream;
  advance(c);
  return true;
}

namespace {

// A client's ATTACH over ch bound nothing: c leaves ch (c->mu held).
void leave_attach_channel(Conn* c, Channel* ch) {
  XP_ASSERT_HELD(c->mu);
  {
    std::lock_guard<std::mutex> chl(ch->mu);
    detach(c, ch);
  }
  c->ch = nullptr;
}

// Whether c's refused or lost ATTACH followed a redirect; c may then be
// redirected once more (c->mu held).
bool take_redirect_attach(Conn* c) {
  XP_ASSERT_HELD(c->mu);
  if (!c->rv.redirect_attach) return false;
  c->rv.redirect_attach = false;
  c->rv.redirected = false;
  return true;
}

// ... and asks rdma_cm next, whose rendezvous redirects to the process that
// holds the connection, with a handshake's time of its own, not what was
// left of the ATTACH's (c->mu held).
void retry_through_rdma_cm(Conn* c) {
  XP_ASSERT_HELD(c->mu);
  c->rv.attach_refused = true; // start_client goes to rdma_cm directly
  c->deadline_ms = now_ms() + g().p.handshake_timeout_ms;
  c->ref();
  {
    std::lock_guard<std::mutex> ql(g().qmu);
    g().start_queue.push_back(c);
  }
  kick();
}

void handle_record(Channel* ch, const ControlRecord& r) {
  XP_SLOG(XP_SLOG_TRACE, "channel: control record type %u for stream %u received",
          static_cast<unsigned>(r.h.type), r.h.stream);
  if (r.h.type == static_cast<uint8_t>(RecordType::attach)) {
    if (ch->client_side) return; // only the channel's client attaches
    std::lock_guard<std::mutex> gl(g().mu);
    // A failing channel binds and queues nothing: it is about to be
    // unlinked and freed (docs/protocol.md §8, "Bounded state").
    if (ch->failed.load() || ch->dying_since_ms != 0) return;
    if (!handle_attach(ch, r, false)) {
      // It waits for the application's accept, within the caps
      // (engine_pending.cc); beyond them the client hears busy at once.
      recover::TcpTuple t;
      recover::Nonce n;
      recover::NakCode nak;
      uint8_t key[recover::kTupleIdBytes] = {};
      if (recover::parse_attach(r.payload, r.h.len, &t, &n, &nak) == Status::ok)
        recover::tuple_id(t, key);
      if (!queue_attach(g(), ch, r, key)) {
        XP_SLOG(XP_SLOG_DEBUG, "channel: ATTACH for stream %u refused: too many waiting",
                r.h.stream);
        send_msg(ch, recover::make_nak(r.h.stream, recover::NakCode::busy));
      }
    }
    return;
  }
  if (r.h.type == static_cast<uint8_t>(RecordType::reattach)) {
    std::lock_guard<std::mutex> gl(g().mu);
    reattach::on_reattach(ch, r); // a resumed stream comes back (stream/reattach.cc)
    return;
  }
  // A failed channel's records are not processed any more, even those
  // polled before it failed (docs/protocol.md §7): a SWITCH verified now
  // would make this end expect frames that the peer, which cannot know
  // that, does not write.
  if (ch->failed.load()) return;
  Conn* c = nullptr;
  {
    std::lock_guard<std::mutex> chl(ch->mu);
    c = ch->conn_of(r.h.stream);
    if (c) c->ref();
  }
  if (c == nullptr) return; // a stream closed here meanwhile
  {
    std::lock_guard<std::mutex> l(c->mu);
    if (c->resumed.load()) {
      reattach::on_record(c, ch, r); // going back to RDMA (stream/reattach.cc)
    } else if (r.h.type == static_cast<uint8_t>(RecordType::move_)) {
      move::on_peer_move(c, ch); // the peer moves the stream to TCP (it forks)
    } else if (c->ch == ch && !c->closed.load()) {
      c->sess.on_message(r.h.type, r.h.stream, r.h.seq, r.payload, r.h.len);
      if (c->sess.state() == recover::State::refused) {
        // NAK unknown_stream/busy: this channel's process does not hold
        // the connection; try rdma_cm (a redirect finds the right process).
        leave_attach_channel(c, ch);
        // NAK moved: the server forked; rdma_cm finds the process holding it.
        const bool moved = c->sess.take_moved();
        // An ATTACH that followed a redirect (engine_rendezvous.cc
        // attach_at_port): the redirect is asked for once more and then
        // connected to, as it would have been without the channel.
        const bool redirected = take_redirect_attach(c);
        if ((!c->rv.cm_tried && !c->rv.attach_refused) || moved || redirected) {
          retry_through_rdma_cm(c);
        } else {
          fail(c, Reason::handshake_failed, "attach refused, and rdma_cm tried already");
        }
      } else {
        advance(c);
      }
    }
  }
  c->unref();
}

} // namespace

void link_stream(Conn* c, Channel* ch, Stream* st, uint32_t id) {
  XP_ASSERT_HELD(ch->mu);
  st->owner = c;
  ch->conns.add(c);
  ch->idle_since_ms = 0;
  c->ref();
  c->ch = ch;
  c->st = st;
  c->sid = id;
}

bool bind_stream(Conn* c, Channel* ch, uint32_t id) {
  Stream* st = ch->mux->open(id, 0, 0);
  if (st == nullptr) return false;
  link_stream(c, ch, st, id);
  return true;
}

void detach(Conn* c, Channel* ch) {
  XP_ASSERT_HELD(ch->mu);
  if (c->st) ch->mux->close(c->st);
  c->st = nullptr;
  if (ch->conns.remove(c)) c->unref();
}

void flush(Conn* c) {
  XP_ASSERT_HELD(c->mu);
  recover::Message m;
  while (c->sess.pop_output(&m)) {
    if (c->ch == nullptr || !send_msg(c->ch, m)) { // send_msg logged why
      if (c->ch == nullptr)
        XP_SLOG(XP_SLOG_DEBUG, "fd %d: control record type %u not sent (no channel)", c->sock(),
                static_cast<unsigned>(m.type));
      c->sess.fail(Reason::handshake_failed);
      break;
    }
  }
}

void advance(Conn* c) {
  XP_ASSERT_HELD(c->mu);
  flush(c);
  const bool untimed = c->sess.untimed();
  c->untimed.store(untimed); // seq_cst: pairs with tick_conns (State::maybe_timed)
  if (!untimed && c->phase.load() == Phase::upgrading) g().maybe_timed.store(true);
  mark_unproven(c);
  if (c->sess.state() == recover::State::failed) return fail(c, c->sess.fallback_reason());
  if (c->st == nullptr) return;
  // While the process forks no direction switches (streams on RDMA move to
  // TCP, upgrades stay there); acknowledging the peer's switch still
  // happens, so that its stream can settle and move (stream/move.cc).
  // The same once a kernel feature pinned the connection to TCP (stream/pin.h).
  const bool forking = g().forking.load(std::memory_order_acquire) || c->pinned.load();
  bool changed = false;
  if (!forking && !c->tx_rdma.load() && !c->tx_shut && c->sess.try_switch_tx() == Status::ok) {
    {
      // The window starts at S before the SWITCH leaves: the peer's
      // acknowledgement of it (Stream::ack_switch) may come back at once.
      std::lock_guard<std::mutex> chl(c->ch->mu);
      c->st->set_tx_start(c->sess.tx_offset());
      refresh(c);
    }
    flush(c); // the SWITCH goes before any data over RDMA
    c->tx_rdma.store(true, std::memory_order_release);
    XP_SLOG(XP_SLOG_DEBUG, "fd %d: sending over RDMA from byte %llu (stream %u)", c->sock(),
            static_cast<unsigned long long>(c->sess.tx_offset()), c->sid);
    report_switch(c, true, c->sess.tx_offset());
    changed = true;
  }
  if (!c->switch_acked && c->sess.rx_mode() == Mode::rdma) {
    // The peer's SWITCH verified: tell it at once, so that after a failure
    // it knows we expect frames after its S (docs/protocol.md §7).
    c->switch_acked = true;
    std::lock_guard<std::mutex> chl(c->ch->mu);
    c->st->ack_switch();
  }
  if (!forking && !c->rx_rdma.load() && c->sess.rx_mode() == Mode::rdma &&
      c->sess.rx_tcp_remaining() == 0) {
    {
      std::lock_guard<std::mutex> chl(c->ch->mu);
      refresh(c);
    }
    c->rx_rdma.store(true, std::memory_order_release);
    if (const resume::AfterS t = resume::tcp_after_s(c->sock()); t != resume::AfterS::nothing) {
      // The peer resumed on TCP while we still read its bytes below S; or
      // bytes that are no frame follow S (the stream resets, §7).
      mark_failed(c->ch, t == resume::AfterS::frames ? ResumeCause::peer_resumed
                                                     : ResumeCause::protocol_error);
      resume::start(c, static_cast<ResumeCause>(c->ch->fail_cause.load()));
      return;
    }
    XP_SLOG(XP_SLOG_DEBUG, "fd %d: receiving over RDMA from byte %llu (stream %u)", c->sock(),
            static_cast<unsigned long long>(c->sess.rx_offset()), c->sid);
    report_switch(c, false, c->sess.rx_offset());
    changed = true;
  }
  if (changed) {
    if (c->phase.load() == Phase::upgrading) {
      c->phase.store(Phase::rdma, std::memory_order_release);
      report(c, Mode::rdma, Reason::none);
    }
    // The readiness source moved from the kernel to the stream: an edge
    // only if that made something ready that was not.
    c->note_ready(false);
    wake::notify();
  }
}

void fail(Conn* c, Reason why, const char* detail) {
  if (c->resumed.load()) { // on TCP already; going back to RDMA: on TCP again
    if (c->ch) reattach::fold(c);
    return;
  }
  if (detail == nullptr) detail = c->sess.fail_detail();
  XP_SLOG(XP_SLOG_DEBUG, "fd %d: upgrade ends: %s%s%s (tx %s, rx %s)", c->sock(), reason_name(why),
          *detail ? ": " : "", detail, c->tx_rdma.load() ? "rdma" : "tcp",
          c->rx_rdma.load() ? "rdma" : "tcp");
  // The session may have failed on its own (a timeout in tick, a proof that
  // does not verify): its NAK still waits in the outbox.
  if (c->sess.state() != recover::State::failed) c->sess.fail(why);
  if (c->sess.binding_refused() && c->ch && !c->ch->client_side)
    g().bind_failures.note(c->ch->peer_addr, now_ms()); // docs/protocol.md §8
  bool resume = !fails_by_nak(c);
  if (!resume && c->phase.load() == Phase::upgrading && c->ch) {
    // The peer may have switched its direction already (it may have had our
    // PROOF).  The check and the NAK are one step under the channel's lock:
    // a SWITCH polled after it finds the stream gone (its bytes are dropped
    // here, and credited only after the NAK), one polled before started the
    // stream's receive side (docs/protocol.md §3).
    Channel* ch = c->ch;
    std::lock_guard<std::mutex> chl(ch->mu);
    if (c->st && c->st->rx_started()) {
      // Its bytes after S may be credited here already: only recovery can
      // tell the two ends apart now (or reset both, never a short stream).
      resume = true;
    } else {
      recover::Message m;
      while (c->sess.pop_output(&m)) {
        // Nothing of the peer's direction was read over RDMA, nor will be:
        // it continues on TCP, unframed, at its S (if it had switched).
        if (m.type == recover::msg::attach_nak) m.seq |= recover::kNakReadsPlain;
        send_msg_locked(ch, m);
      }
      detach(c, ch);
      c->ch = nullptr;
    }
  }
  {
    recover::Message m;
    while (c->sess.pop_output(&m))
      if (c->ch) send_msg(c->ch, m);
  }
  if (resume) {
    // Bytes may have moved over RDMA: the stream resumes on its TCP
    // connection (docs/protocol.md §7).  When the peer gave the upgrade up
    // before it processed our SWITCH (its NAK says it reads us plain), only
    // this stream leaves the channel (§3).  Otherwise a channel is failed as
    // a whole (both ends then agree on every stream's state); its other
    // streams resume when it is next polled.
    if (resume::start_alone(c, ResumeCause::local)) return;
    if (Channel* ch = c->ch) {
      mark_failed(ch, ResumeCause::local);
      resume::start(c, static_cast<ResumeCause>(ch->fail_cause.load()));
      return;
    }
    if (!c->dead.exchange(true)) c->err_pending.store(true);
    c->ready.gen.fetch_add(1);
    wake::notify();
    return;
  }
  // Still upgrading: the channel was left above, under its lock.
  if (c->phase.load() != Phase::upgrading) return;
  to_tcp(c, why);
}

void to_tcp(Conn* c, Reason why) {
  XP_ASSERT_HELD(c->mu);
  c->reason = why;
  c->phase.store(Phase::tcp, std::memory_order_release);
  if (!c->closed.load()) {
    syscall(SYS_epoll_ctl, g().epfd, EPOLL_CTL_DEL, c->sock(), nullptr);
    report(c, Mode::tcp, why);
    notify_mode(c->sock(), nullptr); // the kernel answers readiness again
  }
  c->ready.gen.fetch_add(1);
  wake::notify();
}

bool refresh(Conn* c) {
  Stream* s = c->st;
  if (s == nullptr) return false;
  XP_ASSERT_HELD(c->ch->mu);
  uint32_t b = (s->readable() ? Conn::kIn : 0) | (s->writable() ? Conn::kOut : 0) |
               (s->peer_finished() ? Conn::kFin : 0) | (s->was_reset() ? Conn::kReset : 0) |
               (s->write_shut() ? Conn::kWriteShut : 0);
  uint64_t rcv = s->received(), ack = s->send_acked();
  if (b == c->ready.seen_bits && rcv == c->ready.seen_received && ack == c->ready.seen_acked)
    return false;
  if ((b & Conn::kReset) && !(c->ready.seen_bits & Conn::kReset)) c->err_pending.store(true);
  // An EPOLLET edge: new bytes, or a condition that was not there (an ACK
  // that only moves the window of a writable stream is no edge).
  // Only bytes the reader can get count: before the receive switch the
  // stream's sequence moves to S without any new byte (readiness then comes
  // from TCP).
  bool new_data = c->rx_rdma.load(std::memory_order_acquire) && rcv != c->ready.seen_received;
  // What a sleeper may wait for: a condition that appeared, bytes, the
  // window moving.  Readiness that only went away (the reader took every
  // byte, the window filled) wakes nobody: no waiter waits for less
  // (a request/response loop's every receive and send, and with an epoll
  // waiter in the process, a wake-up of it per call).
  bool wake =
      (b & ~c->ready.seen_bits) != 0 || rcv != c->ready.seen_received || ack != c->ready.seen_acked;
  c->ready.seen_bits = b;
  c->ready.seen_received = rcv;
  c->ready.seen_acked = ack;
  c->ready.stream_bits.store(b, std::memory_order_release);
  // TCP bytes whose edge this counted: the relay of them (tcp_event) finds
  // them taken, and its wake-up may have come before this edge.
  if (c->note_ready(new_data)) wake = true;
  return wake;
}

void shut_write(Conn* c) {
  XP_ASSERT_HELD(c->mu);
  bool woke = false;
  if (Channel* ch = c->ch) {
    std::lock_guard<std::mutex> chl(ch->mu);
    if (c->st) c->st->shutdown_write();
    woke = refresh(c);
  }
  if (woke) wake::notify(c); // an edge refresh counted (refresh above)
}

Status on_control_record(void* ctx, const flow::RecordHeader& h, const uint8_t* payload) {
  auto* ch = static_cast<Channel*>(ctx);
  // Keepalives move the receive cursor (keepalive() watches it); one from
  // an end with streams (seq 0) asks an end without any for an answer.
  if (h.type == static_cast<uint8_t>(RecordType::keepalive)) {
    if (h.seq == recover::kKeepaliveAsks) ch->ka_asked = true;
    return Status::ok;
  }
  // The peer's data follows its SWITCH on the channel: accept it from S on
  // at once; it is delivered only once the switch is verified and the TCP
  // bytes below S were read (Conn::rx_rdma).
  if (h.type == static_cast<uint8_t>(RecordType::switch_)) {
    if (Conn* c = ch->conn_of(h.stream)) {
      if (c->st) c->st->set_rx_start(h.seq);
    }
  }
  // A NAK "reads plain": the peer dropped the stream with it, and answers
  // our records that follow with RST, which the stream must not take for
  // its own (it would fail the channel: resume::start_alone refuses a
  // reset stream).  Marked now, in the channel's order; the NAK itself is
  // handled from the inbox (docs/protocol.md §3).
  if (h.type == static_cast<uint8_t>(RecordType::attach_nak) &&
      (h.seq & recover::kNakReadsPlain) != 0) {
    if (Conn* c = ch->conn_of(h.stream); c != nullptr && !c->resumed.load() && c->st != nullptr)
      c->st->peer_dropped();
  }
  if (h.type == static_cast<uint8_t>(RecordType::move_)) {
    int m = move::on_record(ch, h, payload);
    if (m < 0) return Status::invalid;
    if (m == 0) return Status::ok;
  }
  if (h.len > flow::kMaxControlPayload || ch->inbox.size() >= 4096) return Status::invalid;
  ControlRecord r;
  r.h = h;
  if (h.len) memcpy(r.payload, payload, h.len);
  ch->inbox.push_back(r);
  ch->inbox_pending.store(true, std::memory_order_release);
  return Status::ok;
}

namespace {
std::atomic<RecordHandler> g_record_handler{nullptr};
} // namespace

void set_record_handler_for_tests(RecordHandler h) {
  g_record_handler.store(h, std::memory_order_release);
}

namespace {
// Control records one handled record may make us send: its answer (ATTACH_ACK
// or NAK), then a PROOF and a SWITCH of the stream it binds.
constexpr uint32_t kAnswerRecords = 4;

// Whether the channel can take the answers to one more record of the peer.
// A record is handled only then: its answers would otherwise find the send
// queue and the control backlog full and be dropped (a burst of ATTACHes
// answered at once lost every answer past the backlog).  The peer cannot
// make us hold more than this: what waits stays in the inbox, whose own cap
// fails the channel (on_control_record).
bool answer_room(Channel* ch) {
  std::lock_guard<std::mutex> l(ch->mu);
  if (ch->mux == nullptr) return true;
  const flow::RecordChannel& rc = ch->mux->channel();
  return ch->failed.load() || rc.failed() ||
         rc.deferred() + kAnswerRecords <= flow::RecordChannel::kDeferredMax;
}
} // namespace

void drain_inbox(Channel* ch) {
  // Several threads poll a channel (the engine, callers that spin); each
  // took the records it polled into the inbox in arrival order.  Were two
  // of them to hand out batches at once, a stream's ATTACH_ACK could be
  // handled after the PROOF that follows it (memcslap, four connections
  // attaching at once: "PROOF/SWITCH before binding").  So one drainer at a
  // time; a thread that finds one at work leaves its records to it, and
  // the drainer looks again after letting go, for records pushed meanwhile.
  while (ch->inbox_pending.load(std::memory_order_acquire)) {
    std::unique_lock<std::mutex> d(ch->drain_mu, std::try_to_lock);
    if (!d.owns_lock()) return;
    while (true) {
      std::vector<ControlRecord> batch;
      {
        std::lock_guard<std::mutex> l(ch->mu);
        ch->inbox_pending.store(false, std::memory_order_release);
        if (ch->inbox.empty()) break;
        batch.swap(ch->inbox);
      }
      RecordHandler test_handler = g_record_handler.load(std::memory_order_acquire);
      for (size_t i = 0; i < batch.size(); ++i) {
        if (!answer_room(ch)) {
          // The rest waits, in order, ahead of anything polled meanwhile;
          // the next poll (its completions free the room) drains it again.
          std::lock_guard<std::mutex> l(ch->mu);
          ch->inbox.insert(ch->inbox.begin(), batch.begin() + static_cast<long>(i), batch.end());
          ch->inbox_pending.store(true, std::memory_order_release);
          return;
        }
        test_handler ? test_handler(ch, batch[i]) : handle_record(ch, batch[i]);
      }
    }
  }
}

void Changes::wake() {
  if (all) return wake::notify();
  for (int i = 0; i < n; ++i)
    wake::notify(list[i]);
}

void mark_failed(Channel* ch, ResumeCause why) {
  uint8_t none = 0;
  ch->fail_cause.compare_exchange_strong(none, static_cast<uint8_t>(why));
  ch->failed.store(true);
}

void progress_locked(Channel* ch, Conn* except, Changes* out) {
  XP_ASSERT_HELD(ch->mu);
  ++ch->polls;
  Status st = ch->mux->progress();
  if (st != Status::ok)
    mark_failed(ch, st == Status::invalid ? ResumeCause::protocol_error
                                          : ResumeCause::completion_error);
  for (Conn* o : ch->conns)
    if (o != except && refresh(o)) out->add(o);
}

namespace {
void after_progress(Channel* ch, Changes& changed) {
  if (ch->inbox_pending.load(std::memory_order_acquire)) drain_inbox(ch);
  if (ch->failed.load()) channel_failed(ch);
  changed.wake();
}
} // namespace

void progress(Channel* ch) {
  Changes changed;
  {
    std::lock_guard<std::mutex> l(ch->mu);
    if (!ch->failed.load()) progress_locked(ch, nullptr, &changed);
  }
  after_progress(ch, changed);
}

bool progress_if_free(Channel* ch) {
  Changes changed;
  {
    std::unique_lock<std::mutex> l(ch->mu, std::try_to_lock);
    if (!l.owns_lock()) return false;
    if (!ch->failed.load()) progress_locked(ch, nullptr, &changed);
  }
  after_progress(ch, changed);
  return true;
}

namespace {

// A client's ATTACH went over ch, which failed before the answer came: the
// process at its other end is gone (a fork-per-connection server's child
// that served an earlier connection exits while the client still has its
// channel, docs/protocol.md §7).  Nothing was bound there, so the
// connection asks rdma_cm instead (which redirects to the process holding
// it), as after a NAK unknown_stream; once only (c->mu held).
bool attach_elsewhere(Conn* c, Channel* ch) {
  if (c->role != recover::Role::client || c->resumed.load() || c->closed.load() ||
      c->phase.load() != Phase::upgrading || c->tx_rdma.load() || c->rx_rdma.load() ||
      ((c->rv.cm_tried || c->rv.attach_refused) && !c->rv.redirect_attach) ||
      !c->sess.attach_channel_lost())
    return false;
  (void)take_redirect_attach(c);
  leave_attach_channel(c, ch);
  XP_SLOG(XP_SLOG_DEBUG, "fd %d: the channel of its ATTACH failed before the answer: rdma_cm next",
          c->sock());
  retry_through_rdma_cm(c);
  return true;
}

} // namespace

void channel_failed(Channel* ch, ResumeCause why) {
  mark_failed(ch, why);
  std::vector<Conn*> cs;
  {
    std::lock_guard<std::mutex> l(ch->mu);
    if (!ch->fail_logged) {
      ch->fail_logged = true;
      // A channel without streams that the peer closed (its process
      // exited, its idle channel was reaped) is routine: not a warning.
      const char* cause = resume_cause_name(static_cast<ResumeCause>(ch->fail_cause.load()));
      if (ch->conns.empty())
        XP_SLOG(XP_SLOG_DEBUG, "RDMA channel without streams ended (%s)", cause);
      else {
        const flow::RecordChannel& rc = ch->mux->channel();
        XP_SLOG(XP_SLOG_WARN,
                "RDMA channel failed (%s): its %zu stream(s) resume on TCP (records sent %llu, "
                "%llu of them gathered by autocorking; %zu bytes held unposted)",
                cause, ch->conns.size(),
                static_cast<unsigned long long>(rc.counters().records_sent),
                static_cast<unsigned long long>(rc.counters().corked_records), rc.cork_len());
      }
    }
    for (Conn* c : ch->conns) {
      c->ref();
      cs.push_back(c);
    }
  }
  for (Conn* c : cs) {
    {
      std::lock_guard<std::mutex> l(c->mu);
      if (c->ch == ch && !attach_elsewhere(c, ch)) fail(c, Reason::rdma_error_fallback);
    }
    c->unref();
  }
}

bool tcp_after_switch(Conn* c) {
  const resume::AfterS t = resume::tcp_after_s(c->sock());
  if (t == resume::AfterS::nothing) return false;
  Channel* ch;
  {
    std::lock_guard<std::mutex> l(c->mu);
    ch = c->ch; // a channel with c on it is not reaped meanwhile
  }
  // Frames: the peer resumed.  Anything else after S: the TCP peer is not
  // the channel's (a forged SWITCH) or broke the protocol; the resume that
  // follows finds no RESUME there and resets the stream (docs/protocol.md §7).
  if (t == resume::AfterS::garbage)
    XP_SLOG(XP_SLOG_INFO, "fd %d: bytes on TCP after the peer's switch are no frame", c->sock());
  if (ch)
    channel_failed(ch, t == resume::AfterS::frames ? ResumeCause::peer_resumed
                                                   : ResumeCause::protocol_error);
  return true;
}

} // namespace xp::stream::engine
