// Connections leave RDMA for good before a kernel feature takes over their
// bytes (see pin.h).  Cold path: called from the program's setsockopt, or
// once when the process gets an io_uring.
#include "stream/pin.h"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <vector>

#include "common/lock_check.h"
#include "common/logsink.h"
#include "stream/engine_internal.h"
#include "stream/move.h"
#include "stream/resume_internal.h"

namespace xp::stream::pin {
namespace {

// How long the bytes xpress still owes the kernel (the moved RESUME frame)
// and the peer's RESUME frame (rx) may take to get where they belong.
constexpr uint64_t kCleanMs = 1000;

// c->mu held: 1 the kernel carries the connection (as pin.h says), 0 not
// yet, -1 never.
int clean(Conn* c, bool rx) {
  XP_ASSERT_HELD(c->mu);
  if (c->closed.load() || c->dead.load()) return 1; // nothing of the stream goes on
  if (!c->resumed.load()) return c->phase.load() == Phase::tcp ? 1 : 0;
  Resume* r = c->rs;
  // The failure path: frames on TCP for good (docs/protocol.md §7).
  if (r == nullptr || !r->moved || r->broken) return -1;
  if (r->tx == Resume::Tx::wait) return 0;
  if (r->tx != Resume::Tx::raw && r->tx != Resume::Tx::shut) return -1;
  resume::flush_out(c, r);
  if (rx) {
    // A moved stream reads only the raw bytes below the peer's S and its
    // RESUME; bytes the program did not read yet cannot go back.
    resume::fill_rx(c, r);
    resume::settle(c, r, false);
    if (r->pre.size() > 0 || r->buf.size() > 0 || r->raw_left > 0) return -1;
    if (r->eof) return 1;
    return c->phase.load() == Phase::tcp ? 1 : 0;
  }
  return r->out.size() == 0 ? 1 : 0;
}

} // namespace

bool to_tcp(Conn* c, Reason why, bool rx) {
  {
    std::lock_guard<std::mutex> l(c->mu);
    const bool first = !c->pinned.exchange(true);
    c->reup.never = true;
    if (first)
      XP_SLOG(XP_SLOG_INFO, "fd %d: %s: the connection stays on TCP", c->sock(), reason_name(why));
    if (c->closed.load()) return true;
    if (c->resumed.load() && c->ch)
      engine::fail(c, why); // going back onto RDMA: that attempt folds, TCP it stays
    else if (c->phase.load() == Phase::upgrading && !move::candidate(c))
      engine::fail(c, why); // nothing switched yet: the upgrade ends here
  }
  move::for_conn(c, ResumeCause::kernel_feature);
  const uint64_t end = engine::now_ms() + kCleanMs;
  while (true) {
    {
      std::lock_guard<std::mutex> l(c->mu);
      int st = clean(c, rx);
      if (st != 0) {
        if (st < 0)
          XP_SLOG(XP_SLOG_WARN, "fd %d: %s cannot be turned on: bytes of the connection are %s",
                  c->sock(), reason_name(why),
                  c->rs && c->rs->moved ? "not read yet" : "framed on TCP (it resumed)");
        return st > 0;
      }
    }
    if (engine::now_ms() >= end) {
      XP_SLOG(XP_SLOG_WARN, "fd %d: %s cannot be turned on: the move to TCP did not finish",
              c->sock(), reason_name(why));
      return false;
    }
    pollfd p{c->sock(), static_cast<short>(rx ? POLLIN | POLLOUT : POLLOUT), 0};
    syscall(SYS_poll, &p, 1, 1);
  }
}

void all_to_tcp(Reason why) {
  std::vector<Conn*> cs;
  {
    std::lock_guard<std::mutex> l(engine::g().mu);
    engine::g().pinned_reason.store(why);
    for (Conn* c : engine::g().conns) {
      if (c->closed.load() || (c->phase.load() == Phase::tcp && !c->resumed.load())) continue;
      c->ref();
      cs.push_back(c);
    }
  }
  for (Conn* c : cs) {
    to_tcp(c, why, true); // the peer's RESUME read too: a ring may read the socket
    c->unref();
  }
}

} // namespace xp::stream::pin
