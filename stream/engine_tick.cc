// The engine's tick of upgrading and resumed connections (every kTickMs):
// upgrade timers, rdma_cm retries, the server's wait for an ATTACH, resumed
// streams going back, and the reset of a stream whose peer's kernel closed
// TCP with no FIN over RDMA; then channels whose completions nobody polled
// lately, and keepalives (docs/protocol.md §2, §7); idle and failed
// channels reaped, lost listeners back.
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

void tick_conns(uint64_t now) {
  std::vector<Conn*> cs;
  {
    std::lock_guard<std::mutex> gl(g().mu);
    for (Conn* c : g().conns) {
      const Phase ph = c->phase.load();
      if (ph == Phase::tcp) continue;
      // An upgrade that times nothing (recover/upgrade.h untimed: it waits
      // for a program's bytes) has nothing to tick: its session cannot
      // time out and no direction can switch before the peer proved
      // itself.  A burst of thousands of connections waits here at once.
      if (ph == Phase::upgrading && c->untimed.load(std::memory_order_relaxed)) continue;
      c->ref();
      cs.push_back(c);
    }
  }
  for (Conn* c : cs) {
    // A stream settled on RDMA with its TCP socket quiet has nothing to
    // tick: leave its lock to the program's calls (this tick runs every
    // 10 ms while a request/response loop spins, and the loop's thread
    // waited for the lock, or the engine for the loop's, in the futex).
    bool quiet = !c->resumed.load() && c->phase.load() != Phase::upgrading &&
                 !(c->rx_rdma.load() && (c->tcp_bits.load() & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)));
    if (quiet) {
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
          } else if (c->retry_at_ms && now >= c->retry_at_ms && c->ch == nullptr) {
            c->retry_at_ms = 0;
            c->cm_tried = false;
            c->ref();
            std::lock_guard<std::mutex> ql(g().qmu);
            g().start_queue.push_back(c);
            kick();
          } else if (c->deadline_ms && now > c->deadline_ms && c->ch == nullptr) {
            // A server nobody asked for: the client does not run xpress.
            fail(c, c->role == recover::Role::server && !c->heard_from_peer.load()
                        ? Reason::peer_not_accelerated
                        : Reason::handshake_timeout);
          } else if (c->ch) {
            advance(c); // a direction that had nothing to send switches too
          }
        } else if (c->rx_rdma.load()) {
          // The peer's kernel closed TCP (its process died?) but no FIN came
          // over RDMA: after a grace period the stream is reset.
          uint32_t tb = c->tcp_bits.load();
          bool fin = c->stream_bits.load() & (Conn::kFin | Conn::kReset);
          if ((tb & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) && !fin) {
            if (c->hup_since_ms == 0)
              c->hup_since_ms = now;
            else if (now - c->hup_since_ms > g().p.hangup_grace_ms && !c->dead.load()) {
              c->dead.store(true);
              c->err_pending.store(true);
              c->gen.fetch_add(1);
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
    std::lock_guard<std::mutex> gl(g().mu);
    chs = g().channels;
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
  keepalive(now);
}

// Channels nobody uses for a while, and failed ones, go (client channels
// after kClientIdleMs idle, server ones after kServerIdleMs); listeners whose device
// went away listen again.
void reap_channels(uint64_t now) {
  XP_ASSERT_HELD(g().mu);
  auto& chs = g().channels;
  for (size_t i = 0; i < chs.size();) {
    Channel* ch = chs[i];
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
    if (!ch->client_side && (!empty || pending_attaches_of(ch) > 0)) ch->idle_since_ms = 0;
    const uint64_t idle_ms = ch->client_side ? kClientIdleMs : kServerIdleMs;
    bool idle_long = empty && ch->idle_since_ms != 0 && now - ch->idle_since_ms > idle_ms;
    if ((ch->failed.load() && empty) || idle_long) {
      // Unlink now; free later: a caller that read a connection's channel
      // just before the connection left it may still poll it briefly.
      syscall(SYS_epoll_ctl, g().epfd, EPOLL_CTL_DEL, ch->link->wait_fd(), nullptr);
      drop_attaches(ch); // nothing pending may name it once it is freed
      ch->dying_since_ms = now;
      g().dying.push_back(ch);
      chs[i] = chs.back();
      chs.pop_back();
      continue;
    }
    ++i;
  }
  auto& dy = g().dying;
  for (size_t i = 0; i < dy.size();) {
    if (now - dy[i]->dying_since_ms < 2000 || dy[i]->zc_users.load() > 0 ||
        dy[i]->sleep_refs.load() > 0) {
      ++i;
      continue;
    }
    Channel* ch = dy[i];
    delete ch->mux;
    g().cm->destroy(ch->link); // disconnects: the peer tears its side down
    delete ch;
    dy[i] = dy.back();
    dy.pop_back();
  }
}

void relisten(uint64_t now) {
  XP_ASSERT_HELD(g().mu);
  if (now < g().relisten_ms) return;
  g().relisten_ms = now + 500; // a device comes back in seconds: no hurry
  for (OwnedListener& o : g().listeners) {
    if (o.l) continue;
    uint16_t port = 0;
    if (g().cm->listen(reinterpret_cast<sockaddr*>(&o.share->addr), o.user, &o.l, &port,
                       o.share->af_only) == Status::ok)
      XP_SLOG(XP_SLOG_INFO, "rdma_cm listener back on port %u", port);
  }
  if (g().private_lost) {
    uint16_t port = 0;
    if (g().cm->listen(reinterpret_cast<sockaddr*>(&g().private_addr), &g().private_user,
                       &g().private_l, &port, g().private_af_only) == Status::ok)
      g().private_lost = false;
  }
}

} // namespace xp::stream::engine
