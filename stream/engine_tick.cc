// The engine's tick of upgrading and resumed connections (every kTickMs):
// upgrade timers, rdma_cm retries, the server's wait for an ATTACH, resumed
// streams going back, and the reset of a stream whose peer's kernel closed
// TCP with no FIN over RDMA; then channels whose completions nobody polled
// lately, and keepalives (docs/protocol.md §2, §7).
#include <sys/epoll.h>

#include "stream/engine_internal.h"
#include "stream/resume.h"
#include "stream/wake.h"

namespace xp::stream::engine {

namespace {
// c->mu held.  The peer's SWITCH reached c's stream: its PROOF, which goes
// before it on the channel, waits in the inbox (or was handled), so the
// handshake is not waiting for the peer but for us.  A timeout then would
// give up a stream whose peer already sends over RDMA, and only recovery
// could sort that out (docs/protocol.md §3).
bool peer_switched(Conn* c) {
  if (c->ch == nullptr || c->st == nullptr) return false;
  std::lock_guard<std::mutex> l(c->ch->mu);
  return c->st->rx_started();
}
} // namespace

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
          if (!(c->sess.timer_due(now) && peer_switched(c))) c->sess.tick(now);
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

} // namespace xp::stream::engine
