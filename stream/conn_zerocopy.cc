// Zero-copy sends: key lookup before the channel lock, and the wait that
// ends a send() whose records were gathered from the program's buffer (see
// conn_zerocopy.h for the lifetime rule).  Runs only for blocking sends of
// at least XPRESS_ZEROCOPY_MIN_KB; small sends never get here.
#include "stream/conn_zerocopy.h"

#include <cerrno>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "alloc/domain.h"
#include "alloc/mem_stats.h"
#include "common/logsink.h"
#include "stream/channel_sleep.h"
#include "stream/engine_internal.h"

namespace xp::stream::zc {
namespace {

// Under ch->mu: are the NIC's reads of the buffer over?  On a failed
// channel nobody polls any more: the link is moved into the error state and
// its flush taken here.
bool reads_done(Channel* ch, uint64_t wr) {
  flow::RecordChannel& rc = ch->mux->channel();
  if (rc.completed() >= wr) return true;
  if (ch->failed.load() || ch->mux->failed() || rc.failed()) return rc.drain_failed(wr);
  return false;
}

// The last range this thread could not register (read-only or brk-heap
// memory, a failed registration): a program that sends from it again and
// again pays no registration attempt per send.
struct Refused {
  const void* p = nullptr;
  size_t n = 0;
  int slot = -1;
};
thread_local Refused t_refused;

} // namespace

bool prepare(Conn* c, Channel* ch, Send* z, const void* p, size_t n) {
  if (z->covers(p, n)) return z->ch == nullptr || z->ch == ch;
  if (n < engine::params().zerocopy_min) return false;
  if (z->ch || z->base) finish(c, z); // the previous buffer first
  int slot = ch->link->mem_domain();
  if (slot < 0 || !ch->mux->channel().zero_copy_capable()) return false;
  uint32_t lkey = 0;
  const Refused& r = t_refused;
  if (alloc::lookup_local(p, n, slot, &lkey)) {
    z->lkey = lkey;
  } else if (!(r.p == p && r.n == n && r.slot == slot) &&
             alloc::reg_cache::get(p, n, slot, &z->ref)) {
    z->ref_held = true;
    z->lkey = z->ref.lkey;
  } else {
    t_refused = Refused{p, n, slot};
    // Arena memory whose unit is not registered with this domain yet (or
    // memory nobody can register: prepare_local says no at once).
    z->prep = p;
    z->prep_len = n;
    z->prep_slot = slot;
    return false;
  }
  z->base = static_cast<const uint8_t*>(p);
  z->len = n;
  return true;
}

void posted(Send* z, Channel* ch, Stream* s, uint32_t id, uint64_t wr) {
  if (z->ch == nullptr) {
    z->ch = ch;
    ch->zc_users.fetch_add(1, std::memory_order_acq_rel);
  }
  z->st = s;
  z->stream_id = id;
  z->last_wr = wr;
}

void finish(Conn* c, Send* z) {
  (void)c;
  int saved = errno;
  if (Channel* ch = z->ch) {
    const uint64_t spin_until = engine::mono_ns() + uint64_t{engine::params().spin_us} * 1000;
    size_t staged = 0;
    // Its own send completion ends the wait: unsolicited, so every
    // completion must raise an event meanwhile (channel_events.cc).
    RoomWait room;
    room.enter();
    for (uint64_t round = 0;; ++round) {
      {
        std::lock_guard<std::mutex> l(ch->mu);
        if (reads_done(ch, z->last_wr)) {
          // Recovery must not need the buffer once we return.  The stream
          // may have left the channel (resumed: recovery already took the
          // bytes from the buffer; closed: nothing will be re-sent).
          if (ch->mux->find(z->stream_id) == z->st) staged = z->st->zero_copy_release();
          break;
        }
      }
      if (round % 4096 == 4095)
        XP_SLOG(XP_SLOG_WARN, "zero-copy send: still waiting for the NIC to finish reading");
      engine::progress(ch); // a failure found here resumes the streams (then we drain)
      if (engine::mono_ns() < spin_until) continue;
      // Sleep on the completion channel (the completion is signaled), at
      // most 1 ms: whoever takes the event re-arms.
      int cfd = !ch->failed.load() ? ch->link->wait_fd() : -1;
      if (cfd >= 0 && engine::rearm(ch)) continue; // nobody took events meanwhile: poll again
      pollfd p{cfd, POLLIN, 0};
      long r = syscall(SYS_poll, &p, cfd >= 0 ? 1 : 0, 1);
      if (r > 0 && (p.revents & POLLIN)) engine::take_event(ch);
    }
    if (staged)
      alloc::mem_stats().tx_zero_copy_staged_bytes.fetch_add(staged, std::memory_order_relaxed);
    ch->zc_users.fetch_sub(1, std::memory_order_acq_rel);
    z->ch = nullptr;
    z->st = nullptr;
  }
  if (z->ref_held) {
    alloc::reg_cache::put(z->ref);
    z->ref_held = false;
  }
  z->base = nullptr;
  z->len = 0;
  if (z->prep) {
    // Cold and idempotent: registers the arena unit once per domain, so the
    // next send from it goes without a copy.  Not under any lock.
    alloc::prepare_local(z->prep, z->prep_len, z->prep_slot);
    z->prep = nullptr;
  }
  errno = saved;
}

} // namespace xp::stream::zc
