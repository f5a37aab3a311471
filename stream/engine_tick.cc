// The engine's tick of upgrading and resumed connections (every kTickMs):
// upgrade timers, rdma_cm retries, the server's wait for an ATTACH, resumed
// streams going back, and the reset of a stream whose peer's kernel closed
// TCP with no FIN over RDMA; then channels whose completions nobody polled
// lately, and keepalives with their stall report (docs/protocol.md §2,
// §7); idle and failed channels reaped, lost listeners back.
#include <algorithm>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/lock_check.h"
#include "common/logsink.h"
#include "stream/engine_internal.h"
#include "stream/resume.h"
#include "stream/wake.h"

namespace xp::stream::engine {

void tick_handshake(Conn* c, uint64_t now) {
  XP_ASSERT_HELD(c->mu);
  Channel* ch = c->ch;
  if (ch == nullptr || c->st == nullptr || !c->sess.timer_due(now)) return c->sess.tick(now);
  // The check, the timeout and what the stream takes from then on are one
  // step under the channel's lock: a SWITCH polled between a check and the
  // NAK of fail() started the stream's receive side, and fail() then
  // failed the whole channel for it (docs/protocol.md §3).
  std::lock_guard<std::mutex> l(ch->mu);
  // The peer's SWITCH reached c's stream: its PROOF, which goes before it
  // on the channel, waits in the inbox (or was handled), so the handshake
  // is not waiting for the peer but for us.
  if (c->st->rx_started()) return;
  c->sess.tick(now);
  // Only where fail() takes the NAK path (nothing switched): a stream that
  // resumes needs the peer's records, its ACK of our SWITCH among them.
  if (c->sess.state() == recover::State::failed && fails_by_nak(c))
    c->st->peer_dropped(); // fail() follows
}

namespace {

// An upgrade past its deadline with no channel yet, while the other end's
// host shows it is working through a burst (a client sets up
// XPRESS_CHANNELS_PER_PEER channels at a time; under load a burst of
// connects to a multi-process server outlasts the handshake timeouts):
// waits this many more handshake timeouts before it gives up.  A server
// connection nobody asked for waits while its client's host has a channel
// to this process; a client connection while an rdma_cm attempt to its
// server's host is under way (it may be parked behind it).
constexpr uint8_t kMaxWaitExtensions = 3;

bool waits_for_client(const Conn* c) {
  return c->role == recover::Role::server && !c->rv.heard_from_peer.load();
}

// The hosts that show such a burst (eng.mu held).
struct BusyHosts {
  std::vector<recover::IpAddr> clients; // with a server channel here
  // With an rdma_cm attempt under way, and whose attempt it is: a
  // connection's own attempt is not a burst it waits behind (an rdma_cm
  // peer that never answers keeps it no longer than the handshake).
  std::vector<std::pair<recover::IpAddr, const Conn*>> servers;
  void collect(State& eng) {
    XP_ASSERT_HELD(eng.mu);
    for (const Channel* ch : eng.chans.live())
      if (!ch->client_side && !ch->failed.load()) clients.push_back(ch->peer_addr);
    for (const CmUser* u : eng.inflight)
      if (!u->conn->closed.load())
        servers.emplace_back(recover::server_addr(u->conn->tuple), u->conn);
  }
  bool busy(const Conn* c) const {
    if (c->role == recover::Role::server)
      return std::find(clients.begin(), clients.end(), recover::client_addr(c->tuple)) !=
             clients.end();
    const recover::IpAddr a = recover::server_addr(c->tuple);
    return std::any_of(servers.begin(), servers.end(),
                       [&](const auto& s) { return s.second != c && s.first == a; });
  }
};

// A stream settled on RDMA with its TCP socket quiet has nothing to tick:
// leave its lock to the program's calls (this tick runs every 10 ms while
// a request/response loop spins, and the loop's thread waited for the
// lock, or the engine for the loop's, in the futex).
bool quiet(const Conn* c) {
  return !c->resumed.load() && c->phase.load() != Phase::upgrading &&
         !(c->rx_rdma.load() && (c->ready.tcp_bits.load() & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)));
}

} // namespace

void tick_conns(State& eng, uint64_t now) {
  std::vector<Conn*> cs;
  BusyHosts hosts;
  {
    std::lock_guard<std::mutex> gl(eng.mu);
    bool any_waiting = false, timed = false;
    eng.maybe_timed.store(false); // before the walk: see State::maybe_timed
    for (Conn* c : eng.conns) {
      const Phase ph = c->phase.load();
      if (ph == Phase::tcp) continue;
      // An upgrade that times nothing (recover/upgrade.h untimed: it waits
      // for a program's bytes) has nothing to tick: its session cannot
      // time out and no direction can switch before the peer proved
      // itself.  A burst of thousands of connections waits here at once.
      if (ph == Phase::upgrading && c->untimed.load()) continue;
      timed |= ph == Phase::upgrading;
      if (quiet(c)) continue; // no reference taken for a stream that needs nothing
      c->ref();
      cs.push_back(c);
      any_waiting |=
          ph == Phase::upgrading && (waits_for_client(c) || c->role == recover::Role::client);
    }
    if (timed) eng.maybe_timed.store(true);
    if (any_waiting) hosts.collect(eng);
  }
  for (Conn* c : cs) {
    if (quiet(c)) { // settled since the walk
      c->unref();
      continue;
    }
    {
      std::lock_guard<std::mutex> l(c->mu);
      if (c->resumed.load()) {
        if (!c->closed.load()) resume::tick(c, now);
      } else if (!c->closed.load()) {
        if (c->phase.load() == Phase::upgrading) {
          tick_handshake(c, now);
          if (c->sess.state() == recover::State::failed) {
            fail(c, c->sess.fallback_reason());
          } else if (c->rv.retry_at_ms && now >= c->rv.retry_at_ms && c->ch == nullptr) {
            c->rv.retry_at_ms = 0;
            c->rv.cm_tried = false;
            c->ref();
            std::lock_guard<std::mutex> ql(eng.qmu);
            eng.start_queue.push_back(c);
            kick();
          } else if (c->deadline_ms && now > c->deadline_ms && c->ch == nullptr) {
            const bool waiting = waits_for_client(c);
            if ((waiting || c->role == recover::Role::client) &&
                c->waits_extended < kMaxWaitExtensions && hosts.busy(c)) {
              if (c->waits_extended++ == 0)
                XP_SLOG(XP_SLOG_DEBUG, "fd %d: the peer's host is still setting up: waiting longer",
                        c->sock());
              c->deadline_ms = now + eng.p.handshake_timeout_ms;
            } else {
              // A server nobody asked for: the client does not run xpress.
              fail(c, waiting ? Reason::peer_not_accelerated : Reason::handshake_timeout);
            }
          } else if (c->ch) {
            advance(c); // a direction that had nothing to send switches too
          }
        } else if (c->rx_rdma.load()) {
          // The peer's kernel closed TCP (its process died?) but no FIN came
          // over RDMA: after a grace period the stream is reset.
          uint32_t tb = c->ready.tcp_bits.load();
          bool fin = c->ready.stream_bits.load() & (Conn::kFin | Conn::kReset);
          if ((tb & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) && !fin) {
            if (c->hup_since_ms == 0)
              c->hup_since_ms = now;
            else if (now - c->hup_since_ms > eng.p.hangup_grace_ms && !c->dead.load()) {
              c->dead.store(true);
              c->err_pending.store(true);
              c->ready.gen.fetch_add(1);
              wake::notify();
            }
          }
        }
      }
    }
    c->unref();
  }
  // Channels whose completions nobody polled lately (no event armed?): poll.
  std::vector<Channel*> chs;
  {
    std::lock_guard<std::mutex> gl(eng.mu);
    chs = eng.chans.snapshot();
  }
  for (Channel* ch : chs) {
    if (!ch->failed.load()) {
      // Not a channel someone spins on (the spinner polls it), nor one
      // whose lock a sender holds (owed: it pays the poll).
      if (!spun_lately(ch) && !progress_if_free(ch)) owe_poll(ch);
    } else {
      bool streams;
      {
        std::lock_guard<std::mutex> l(ch->mu);
        streams = !ch->conns.empty();
      }
      if (streams) channel_failed(ch); // failed by one stream: the others follow
    }
  }
  keepalive(eng, now);
}

// Channels nobody uses for a while, and failed ones, go (client channels
// after kClientIdleMs idle, server ones after kServerIdleMs); listeners whose device
// went away listen again.
void reap_channels(State& eng, uint64_t now) {
  XP_ASSERT_HELD(eng.mu);
  auto& chs = eng.chans.live();
  for (auto it = chs.begin(); it != chs.end();) {
    Channel* ch = *it;
    // A channel whose lock is taken is in use: not idle this tick (a
    // request/response loop's thread would otherwise wait for this tick,
    // which comes every 10 ms while it spins, in the futex).
    bool empty = false;
    {
      std::unique_lock<std::mutex> l(ch->mu, std::try_to_lock);
      if (l.owns_lock()) empty = ch->conns.empty();
    }
    if (empty && !ch->failed.load() && ch->idle_since_ms == 0) ch->idle_since_ms = now;
    // A server channel's streams come by ATTACH (no link_stream): any
    // stream, or an ATTACH waiting for the application, makes it busy.
    if (!ch->client_side && (!empty || pending_attaches_of(eng, ch) > 0)) ch->idle_since_ms = 0;
    const uint64_t idle_ms = ch->client_side ? kClientIdleMs : kServerIdleMs;
    bool idle_long = empty && ch->idle_since_ms != 0 && now - ch->idle_since_ms > idle_ms;
    if ((ch->failed.load() && empty) || idle_long) {
      // Unlink now; free later: a caller that read a connection's channel
      // just before the connection left it may still poll it briefly.
      syscall(SYS_epoll_ctl, eng.epfd, EPOLL_CTL_DEL, ch->link->wait_fd(), nullptr);
      drop_attaches(eng, ch); // nothing pending may name it once it is freed
      ++it;
      eng.chans.retire(ch, now);
      continue;
    }
    ++it;
  }
  // Destroying the link disconnects: the peer tears its side down.
  eng.chans.free_quiet(now, [&eng](Channel* ch) { eng.cm->destroy(ch->link); });
}

void relisten(State& eng, uint64_t now) {
  XP_ASSERT_HELD(eng.mu);
  if (now < eng.relisten_ms) return;
  eng.relisten_ms = now + 500; // a device comes back in seconds: no hurry
  for (OwnedListener& o : eng.listeners) {
    if (o.l) continue;
    uint16_t port = 0;
    if (eng.cm->listen(reinterpret_cast<sockaddr*>(&o.share->addr), o.user, &o.l, &port,
                       o.share->af_only) == Status::ok)
      XP_SLOG(XP_SLOG_INFO, "rdma_cm listener back on port %u", port);
  }
  if (eng.private_lost) {
    uint16_t port = 0;
    if (eng.cm->listen(reinterpret_cast<sockaddr*>(&eng.private_addr), &eng.private_user,
                       &eng.private_l, &port, eng.private_af_only) == Status::ok)
      eng.private_lost = false;
  }
}

namespace {
// Debug log only: a channel whose streams moved no byte for kStallMs while
// one of them holds unread bytes or unacknowledged ones is reported once,
// with what each side of the wait looks like (a hang in a test then says
// whether the bytes sat in the ring, in the stream, or never came).
constexpr uint64_t kStallMs = 5000;

void report_stall(Channel* ch, uint64_t now) {
  uint64_t sig = 0;
  bool waiting = false;
  for (Conn* c : ch->conns) {
    if (Stream* s = c->st) {
      sig = sig * 1000003 + s->received() * 31 + s->delivered() * 17 + s->send_next() * 7 +
            s->send_acked();
      waiting |= s->readable_bytes() > 0 || s->send_next() > s->send_acked();
    }
  }
  if (sig != ch->stall_sig || ch->stall_since_ms == 0) {
    ch->stall_sig = sig;
    ch->stall_since_ms = now;
    ch->stall_logged = false;
    return;
  }
  if (!waiting || ch->stall_logged || now - ch->stall_since_ms < kStallMs) return;
  ch->stall_logged = true;
  const flow::RecordChannel& rc = ch->mux->channel();
  int sleepers;
  {
    std::lock_guard<std::mutex> sl(ch->sleep_mu);
    sleepers = ch->sleepers;
  }
  XP_SLOG(XP_SLOG_DEBUG,
          "channel: no byte moved for %llu ms: armed %d, spinners %d, sleepers %d, control "
          "backlog %u, credit %llu, sent %llu, received %llu records",
          static_cast<unsigned long long>(now - ch->stall_since_ms), ch->armed.load() ? 1 : 0,
          ch->spinners.load(), sleepers, rc.deferred(),
          static_cast<unsigned long long>(rc.send_credit_available()),
          static_cast<unsigned long long>(rc.counters().records_sent),
          static_cast<unsigned long long>(rc.counters().records_received));
  for (Conn* c : ch->conns)
    if (Stream* s = c->st)
      XP_SLOG(XP_SLOG_DEBUG,
              "channel: fd %d stream %u: received %llu, delivered %llu, %zu unread; sent %llu, "
              "acked %llu; bits %#x, tx %s, rx %s",
              c->sock(), c->sid, static_cast<unsigned long long>(s->received()),
              static_cast<unsigned long long>(s->delivered()), s->readable_bytes(),
              static_cast<unsigned long long>(s->send_next()),
              static_cast<unsigned long long>(s->send_acked()),
              c->ready.stream_bits.load(std::memory_order_relaxed),
              c->tx_rdma.load() ? "rdma" : "tcp", c->rx_rdma.load() ? "rdma" : "tcp");
}

// The receive cursor moves only when someone polls the channel: before the
// keepalive calls the peer silent it polls once itself.  Records that were
// only waiting (nobody polled the channel for the whole period: a lost
// wake-up, or every thread of the process starved) mean a live peer, and
// failing the channel for them sent every stream through a resume (VM,
// memcached under load, before the fix in channel_events.cc: "nothing
// heard for 3000 ms" with the peer's keepalives in the ring).  True: still
// silent (fail it); false: heard, or the poll failed it already.
bool silent_after_poll(Channel* ch, uint64_t now) {
  progress(ch);
  std::lock_guard<std::mutex> l(ch->mu);
  if (ch->failed.load()) return false;
  const uint64_t cur = ch->mux->channel().recv_cursor();
  if (cur == ch->ka_cursor) return true;
  XP_SLOG(XP_SLOG_INFO, "RDMA channel: records waited %llu ms for anyone to poll it",
          static_cast<unsigned long long>(now - ch->ka_heard_ms));
  ch->ka_heard_ms = now;
  ch->ka_cursor = cur;
  return false;
}
} // namespace

void keepalive(State& eng, uint64_t now) {
  const uint32_t ka = eng.p.keepalive_ms;
  if (ka == 0) return;
  std::vector<Channel*> chs;
  {
    std::lock_guard<std::mutex> gl(eng.mu);
    chs = eng.chans.snapshot();
  }
  for (Channel* ch : chs) {
    if (ch->failed.load()) continue;
    // Twice per keepalive period is enough to send one each period and see
    // a silence within a sixth of its timeout; the engine ticks every 10 ms
    // while a request/response loop spins, and taking the channel's lock
    // on each tick made the loop's thread wait for it in the futex.
    const uint64_t since_check = now - ch->ka_checked_ms;
    if (since_check < ka / 6) continue;
    bool expired = false;
    {
      // Nor does the look that is due wait for the lock: a data call holds
      // it (a spinner, most of the time), and the engine blocked in the
      // futex costs that call a wake-up system call and puts the engine on
      // a CPU the loop wants.  The look comes
      // at a later tick that finds the lock free; a spinner lets go of it
      // between rounds, one that sleeps for good.
      std::unique_lock<std::mutex> l(ch->mu, std::try_to_lock);
      if (!l.owns_lock()) continue;
      ch->ka_checked_ms = now;
      if (ch->conns.empty()) { // idle channels cost nothing ...
        ch->ka_heard_ms = 0;
        // ... but one whose peer still has streams here (one this end
        // closed first, or an ATTACH another process holds) answers that
        // peer's keepalives, which would otherwise take this end's silence
        // for a dead channel (docs/protocol.md §7).  The answer asks for none.
        if (ch->ka_asked && now - ch->ka_sent_ms >= ka / 3 &&
            ch->mux->channel().send_control(flow::RecordType::keepalive, UINT32_MAX,
                                            recover::kKeepaliveAnswers) == Status::ok) {
          ch->ka_sent_ms = now;
          ch->ka_asked = false;
        }
        continue;
      }
      ch->ka_asked = false; // our own keepalives go anyway
      uint64_t cur = ch->mux->channel().recv_cursor();
      // A check that comes long after the previous one (this thread did
      // not run: the process was stopped, or the host was loaded) cannot
      // tell the peer's silence from its own: what the peer sent meanwhile
      // is still unpolled.  The period starts again now (a stall of this
      // process as long as the timeout must not expire the keepalive).
      if (ch->ka_heard_ms == 0 || cur != ch->ka_cursor || since_check > ka / 2) {
        ch->ka_heard_ms = now;
        ch->ka_cursor = cur;
      }
      if (now - ch->ka_sent_ms >= ka / 3 &&
          ch->mux->channel().send_control(flow::RecordType::keepalive, UINT32_MAX,
                                          recover::kKeepaliveAsks) == Status::ok)
        ch->ka_sent_ms = now;
      expired = now - ch->ka_heard_ms > ka;
      report_stall(ch, now);
    }
    if (expired && silent_after_poll(ch, now)) {
      XP_SLOG(XP_SLOG_INFO, "RDMA channel: nothing heard for %u ms", ka);
      channel_failed(ch, ResumeCause::keepalive_timeout);
    }
  }
}

} // namespace xp::stream::engine
