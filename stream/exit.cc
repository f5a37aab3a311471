// The process ends by exit() or _exit() with connections still open.  The
// kernel closes their sockets then: a FIN after the bytes written (a reset
// when unread bytes are left), and TCP delivers what was written after the
// process is gone.  A channel cannot outlive the process (its QP goes with
// it), and a peer that sees it disconnect before a stream's end resumes the
// stream on a TCP connection with nobody behind it: the peer's program read
// an error after all the bytes.  So each stream ends
// here as its close() would end it, and the process waits, within a bound,
// until the NIC took everything posted.  Cold path: once per process.
#include <algorithm>
#include <unistd.h>
#include <vector>

#include "common/logsink.h"
#include "stream/engine.h"
#include "stream/engine_internal.h"

namespace xp::stream::engine {
namespace {

// try_lock until the deadline: exit may run while another thread holds a
// lock (or in a signal handler that interrupted one); then it gives up.
template <typename M> bool lock_until(M& m, uint64_t until_ns) {
  while (!m.try_lock()) {
    if (mono_ns() > until_ns) return false;
    usleep(50);
  }
  return true;
}

// End one connection's stream as the kernel's close at exit would; the
// channel it used, or nullptr.
Channel* end_stream(Conn* c, uint64_t until) {
  if (!lock_until(c->mu, until)) return nullptr;
  Channel* ch = c->ch;
  if (ch == nullptr || c->st == nullptr || c->closed.load() || c->resumed.load() ||
      !lock_until(ch->mu, until)) {
    c->mu.unlock();
    return nullptr;
  }
  ch->mux->channel().signal_all();
  // A direction still on TCP sends its FIN record too: the reader then knows
  // that no SWITCH follows the kernel's FIN (docs/protocol.md §3).  Either
  // record posts a held one before it.
  c->st->end_as_close();
  ch->mu.unlock();
  c->mu.unlock();
  return ch;
}

} // namespace

void before_exit(uint32_t budget_ms) {
  State* sp = g_if_created();
  if (sp == nullptr) return; // no connection ever: nothing to end
  State& s = *sp;
  // Before any lock: a fork child's copy of a lock another thread of its
  // parent held would cost it the whole budget, and fork children _exit
  // often.  Both flags are set before the threads that could race them.
  if (!s.started || s.forked_child) return;
  const uint64_t until = mono_ns() + uint64_t{budget_ms} * 1000000ull;
  std::vector<Conn*> cs;
  if (!lock_until(s.mu, until)) return;
  for (Conn* c : s.conns) {
    if (c->closed.load() || c->phase.load() == Phase::tcp) continue;
    c->ref();
    cs.push_back(c);
  }
  s.mu.unlock();
  std::vector<Channel*> chs;
  for (Conn* c : cs) {
    Channel* ch = end_stream(c, until);
    if (ch && std::find(chs.begin(), chs.end(), ch) == chs.end()) chs.push_back(ch);
    c->unref();
  }
  // Channels are freed only after a grace period (reap_channels): these
  // stay valid for the moment this takes.
  size_t busy = chs.size();
  while (busy > 0) {
    busy = 0;
    for (Channel* ch : chs) {
      if (ch->failed.load()) continue; // recovery's, as for any failure
      progress_if_free(ch);            // completions; credits let the backlog leave
      std::unique_lock<std::mutex> l(ch->mu, std::try_to_lock);
      if (!l.owns_lock() || !ch->mux->channel().settled()) ++busy;
    }
    if (busy == 0 || mono_ns() > until) break;
    usleep(100);
  }
  if (busy > 0)
    XP_SLOG(XP_SLOG_WARN,
            "exit: %zu RDMA channel(s) still sending after %u ms; the peer may see its streams "
            "end with an error",
            busy, budget_ms);
}

} // namespace xp::stream::engine
