#include "preload/epoll_regs.h"

#include <iterator>

#include "common/lock_check.h"
#include "stream/wake.h"

namespace xp::epoll {

bool ClaimTable::claim(const void* key, uint32_t gen) {
  for (Claim& c : claims_) {
    if (c.key != key) continue;
    if (c.gen == gen) return false;
    c.gen = gen;
    return true;
  }
  claims_.push_back({key, gen});
  return true;
}

bool ClaimTable::claimable(const void* key, uint32_t gen) {
  for (const Claim& c : claims_)
    if (c.key == key) return c.gen != gen;
  return true;
}

void ClaimTable::forget(const void* key) {
  for (size_t i = 0; i < claims_.size(); ++i) {
    if (claims_[i].key != key) continue;
    claims_[i] = claims_.back();
    claims_.pop_back();
    return;
  }
}

size_t Regs::slot_of(int fd, const void* key) const {
  uint64_t h = static_cast<uint64_t>(static_cast<uint32_t>(fd)) * 0x9e3779b97f4a7c15ull;
  h ^= reinterpret_cast<uintptr_t>(key) * 0xc2b2ae3d27d4eb4full;
  h ^= h >> 29;
  return static_cast<size_t>(h) & (index_.size() - 1);
}

Reg* Regs::find(int fd, const void* key) {
  if (index_.empty()) return nullptr;
  size_t mask = index_.size() - 1;
  for (size_t s = slot_of(fd, key); index_[s] != 0; s = (s + 1) & mask) {
    Reg& r = *regs_[index_[s] - 1];
    if (r.fd == fd && r.key == key) return &r;
  }
  return nullptr;
}

void Regs::index_put(uint32_t pos) {
  size_t mask = index_.size() - 1;
  size_t s = slot_of(regs_[pos]->fd, regs_[pos]->key);
  while (index_[s] != 0)
    s = (s + 1) & mask;
  index_[s] = pos + 1;
}

// Backward-shift deletion keeps linear probing free of tombstones.
void Regs::index_del(size_t i) {
  size_t mask = index_.size() - 1;
  for (;;) {
    index_[i] = 0;
    size_t j = i;
    for (;;) {
      j = (j + 1) & mask;
      if (index_[j] == 0) return;
      const Reg& r = *regs_[index_[j] - 1];
      size_t home = slot_of(r.fd, r.key);
      // The entry at j may move to i unless its home lies cyclically in (i, j].
      bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
      if (!stays) {
        index_[i] = index_[j];
        i = j;
        break;
      }
    }
  }
}

void Regs::grow() {
  size_t cap = index_.empty() ? 16 : index_.size() * 2;
  index_.assign(cap, 0);
  for (uint32_t p = 0; p < regs_.size(); ++p)
    index_put(p);
}

Reg* Regs::insert(const Reg& r) {
  regs_.push_back(std::make_unique<Reg>(r));
  if (regs_.size() * 2 > index_.size())
    grow(); // re-indexes everything, the new entry included
  else
    index_put(static_cast<uint32_t>(regs_.size() - 1));
  Reg& in = *regs_.back();
  in.owner = this;
  in.pos = static_cast<uint32_t>(regs_.size() - 1);
  in.src = nullptr;
  set_src(&in, r.src);
  return &in;
}

void Regs::detach(Reg& r) {
  if (r.src) r.src->unwatch(r);
  std::lock_guard<std::mutex> g(ready_mu_);
  if (r.ready_hook.is_linked()) ready_.erase(ready_.iterator_to(r));
}

void Regs::erase(Reg* r) {
  size_t pos = r->pos;
  size_t last = regs_.size() - 1;
  size_t mask = index_.size() - 1;
  size_t s = slot_of(r->fd, r->key);
  while (index_[s] != pos + 1)
    s = (s + 1) & mask;
  index_del(s);
  detach(*r);
  if (r->src) --n_user_;
  if (user_out(*r)) --n_user_out_;
  if (pos != last) {
    // The last entry moves into the hole: repoint its index slot.
    const Reg& m = *regs_[last];
    size_t t = slot_of(m.fd, m.key);
    while (index_[t] != last + 1)
      t = (t + 1) & mask;
    index_[t] = static_cast<uint32_t>(pos + 1);
    std::swap(regs_[pos], regs_[last]);
    regs_[pos]->pos = static_cast<uint32_t>(pos);
  }
  regs_.pop_back();
}

void Regs::clear() {
  for (auto& r : regs_)
    detach(*r);
  regs_.clear();
  index_.clear();
  n_user_ = n_user_out_ = 0;
}

void Regs::set_src(Reg* r, stream::ReadySource* src) {
  if (user_out(*r)) --n_user_out_;
  if ((r->src != nullptr) != (src != nullptr)) {
    if (src)
      ++n_user_;
    else
      --n_user_;
  }
  const bool fresh = src && src != r->src;
  if (fresh) {
    // A new source: its first look reports the current level (the kernel
    // registration it replaces may have had an event queued).
    r->edge_pending = true;
    r->excl_owned = true;
  }
  if (src != r->src) {
    detach(*r);
    r->src = src;
    if (src) src->watch(*r);
  }
  if (user_out(*r)) ++n_user_out_;
  if (fresh) link(*r);
}

void Regs::rearm(Reg* r, uint32_t events, uint64_t data) {
  if (user_out(*r)) --n_user_out_;
  r->events = events;
  if (user_out(*r)) ++n_user_out_;
  r->data = data;
  r->armed = true;
  r->edge_pending = true;
  r->excl_owned = true;
  link(*r); // ADD/MOD: the current level is looked at once
}

void Regs::link_locked(Reg& r) {
  XP_ASSERT_HELD(ready_mu_);
  if (r.src != nullptr && !r.ready_hook.is_linked()) ready_.push_back(r);
}

void Regs::link(Reg& r) {
  std::lock_guard<std::mutex> g(ready_mu_);
  link_locked(r);
}

void Regs::relink_all() {
  uint32_t gen = stream::wake::all_gen();
  if (gen == all_seen_) return;
  all_seen_ = gen;
  std::lock_guard<std::mutex> g(ready_mu_);
  for (auto& r : regs_)
    link_locked(*r);
}

size_t Regs::ready_len() {
  std::lock_guard<std::mutex> g(ready_mu_);
  return static_cast<size_t>(std::distance(ready_.begin(), ready_.end()));
}

bool Regs::keep_linked(const Reg& r) const {
  short ev = 0;
  return r.src != nullptr && r.src->kernel_watch(&ev) >= 0;
}

bool Reg::on_change(bool wake_exclusive) {
  const bool excl = events & EPOLLEXCLUSIVE;
  {
    std::lock_guard<std::mutex> g(owner->ready_mu_);
    owner->link_locked(*this);
  }
  if (excl && !wake_exclusive) return false;
  bool woke = owner->waker_ && owner->waker_(owner->waker_ctx_);
  return excl && woke;
}

uint32_t Regs::check(Reg& r, bool take) {
  if (r.src == nullptr || !r.armed) return 0;
  const bool et = r.events & EPOLLET;
  const bool ex = r.events & EPOLLEXCLUSIVE;
  // EPOLLEXCLUSIVE: the level reported is one read while the generation
  // stood still.  The generation (g0), the level, catch_up (bytes the
  // kernel holds whose edge nobody counted yet get it now), the generation
  // again: equal, so nothing seen in the level is at an older generation
  // (two sets that owned that one would both report it), and no edge came
  // after the level read (the look that claims it must report what it
  // brought, or an edge-triggered set would take it with nothing, and
  // every other set would lose the claim).  Not equal: again.  Still
  // moving after a few tries: the level read after the generation, which
  // may report an event a later generation's claimer reports too (allowed
  // by epoll(7)), never one lost.
  uint32_t lvl = 0;
  uint32_t gen = et || ex ? r.src->ready_gen(r.events) : 0;
  if (ex) {
    // catch_up adds only EPOLLIN edges: nothing to do for a writer's look.
    const bool reads = r.events & (EPOLLIN | EPOLLPRI | EPOLLRDHUP);
    for (int tries = 0;; ++tries) {
      const uint32_t g0 = gen;
      lvl = r.src->ready_events();
      if (reads) r.src->catch_up();
      gen = r.src->ready_gen(r.events);
      if (gen == g0) break;
      if (tries == 2) {
        lvl = r.src->ready_events();
        break;
      }
    }
  }
  if (ex && !r.edge_pending && gen != r.excl_gen) {
    // A new event on an exclusive registration: the first set to see it wins.
    if (!take) {
      if (!claims_->claimable(r.key, gen)) return 0;
    } else {
      r.excl_gen = gen;
      r.excl_owned = claims_->claim(r.key, gen);
    }
  }
  if (ex && !r.edge_pending && gen == r.excl_gen && !r.excl_owned) return 0;
  if (et && !r.edge_pending && gen == r.last_gen) return 0; // no new edge
  uint32_t ev = widen(ex ? lvl : r.src->ready_events()) & report_mask(r.events);
  if (take) {
    if (ex && r.edge_pending) {
      r.excl_gen = gen; // ADD/MOD: the current level belongs to this set
      r.excl_owned = true;
    }
    r.edge_pending = false;
    r.last_gen = gen;
    if (ev != 0 && (r.events & EPOLLONESHOT)) r.armed = false;
  }
  return ev;
}

// check() runs without ready_mu_: a source may tell its watchers from
// inside ready_gen() (the test sources pump their kernel events there),
// which takes it.  Each entry is taken off the list while it is looked at;
// a change meanwhile links it again (on_change), and the look at most once
// per entry that was listed when it began.
int Regs::harvest(epoll_event* out, int room, bool* residual) {
  *residual = false;
  if (n_user_ == 0) return 0;
  relink_all();
  int n = 0;
  ReadyList again; // kept entries, to the back once the pass is over
  size_t todo = ready_len();
  for (; todo > 0; --todo) {
    Reg* rp;
    {
      std::lock_guard<std::mutex> g(ready_mu_);
      if (ready_.empty()) break;
      rp = &ready_.front();
      ready_.pop_front();
    }
    Reg& r = *rp;
    ++visits_;
    if (n == room) {
      bool ready = check(r, false) != 0;
      std::lock_guard<std::mutex> g(ready_mu_);
      if (ready) {
        *residual = true;
        if (!r.ready_hook.is_linked()) ready_.push_front(r);
        break;
      }
      if (keep_linked(r) && !r.ready_hook.is_linked()) again.push_back(r);
      continue;
    }
    uint32_t ev = check(r, true);
    bool keep = keep_linked(r);
    if (ev != 0) {
      out[n].events = ev;
      out[n].data.u64 = r.data;
      ++n;
      // A level-triggered registration stays ready until the application
      // consumes: other waiters may be told too (the kernel re-queues it, at
      // the back: round robin among ready ones).
      if ((r.events & (EPOLLET | EPOLLONESHOT)) == 0) {
        *residual = true;
        keep = true;
      }
    }
    if (keep) {
      std::lock_guard<std::mutex> g(ready_mu_);
      if (!r.ready_hook.is_linked()) again.push_back(r);
    }
  }
  std::lock_guard<std::mutex> g(ready_mu_);
  ready_.splice(ready_.end(), again);
  return n;
}

bool Regs::reportable() {
  if (n_user_ == 0) return false;
  relink_all();
  ReadyList again;
  bool found = false;
  for (size_t todo = ready_len(); todo > 0 && !found; --todo) {
    Reg* rp;
    {
      std::lock_guard<std::mutex> g(ready_mu_);
      if (ready_.empty()) break;
      rp = &ready_.front();
      ready_.pop_front();
    }
    ++visits_;
    found = check(*rp, false) != 0;
    bool keep = found || keep_linked(*rp);
    std::lock_guard<std::mutex> g(ready_mu_);
    if (keep && !rp->ready_hook.is_linked()) again.push_back(*rp);
  }
  std::lock_guard<std::mutex> g(ready_mu_);
  ready_.splice(ready_.begin(), again);
  return found;
}

int drop_reserved(epoll_event* ev, int n, bool* saw_wake, int* chan_fds, int* nchan) {
  int out = 0;
  for (int i = 0; i < n; ++i) {
    uint64_t d = ev[i].data.u64;
    if (d == kWakeData) {
      *saw_wake = true;
      continue;
    }
    if (d == kShadowData) continue;
    if (is_chan_data(d)) {
      if (nchan && *nchan < kChanFds) chan_fds[(*nchan)++] = static_cast<int>(d & 0xffffffffu);
      continue;
    }
    if (out != i) ev[out] = ev[i];
    ++out;
  }
  return out;
}

int fold_same_data(epoll_event* ev, int na, int nb) {
  int total = na;
  for (int i = na; i < na + nb; ++i) {
    bool folded = false;
    for (int j = 0; j < na; ++j) {
      if (ev[j].data.u64 == ev[i].data.u64) {
        ev[j].events |= ev[i].events;
        folded = true;
        break;
      }
    }
    if (folded) continue;
    if (total != i) ev[total] = ev[i];
    ++total;
  }
  return total;
}

} // namespace xp::epoll
