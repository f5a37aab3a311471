// The cold end of recv_tcp (stream/conn_io.cc): the kernel's end of stream
// met before any SWITCH from a peer that may have switched.  Rare (a peer
// that switched and closed within a round trip), so a plain polling wait.
#include <algorithm>
#include <unistd.h>

#include "common/logsink.h"
#include "stream/conn_io.h"
#include "stream/engine_internal.h"

namespace xp::stream::io {
// The peer's FIN record with no SWITCH before it ends the wait, and so does
// silence for as long as a keepalive takes to fail the channel.
bool peer_ended_on_tcp(Conn* c) {
  const EngineParams& ep = engine::params();
  const uint64_t limit_ms = std::max<uint64_t>(ep.keepalive_ms, ep.handshake_timeout_ms);
  const uint64_t until = engine::mono_ns() + limit_ms * 1000000ull;
  for (int round = 0;; ++round) {
    Channel* ch = c->ch;
    if (ch == nullptr || c->resumed.load()) return false;
    if (c->sess.rx_mode() == Mode::rdma || c->sess.state() == recover::State::failed) {
      engine::advance(c); // switches our reading, or ends the upgrade
      return false;
    }
    {
      // A FIN (or RST: its close) with no SWITCH before it (which would have
      // started the stream's receive side): the peer's direction ended on TCP.
      std::lock_guard<std::mutex> chl(ch->mu);
      if (c->st == nullptr ||
          ((c->st->peer_finished() || c->st->was_reset()) && !c->st->rx_started()))
        return true;
    }
    if (engine::mono_ns() > until) {
      XP_SLOG(XP_SLOG_WARN,
              "fd %d: end of the TCP stream, and neither a SWITCH nor a FIN came over the channel "
              "in %llu ms: end of stream",
              c->sock(), static_cast<unsigned long long>(limit_ms));
      return true;
    }
    c->mu.unlock();
    engine::progress(ch); // records polled here are handled here too
    usleep(round < 50 ? 100 : 1000);
    c->mu.lock();
  }
}

} // namespace xp::stream::io
