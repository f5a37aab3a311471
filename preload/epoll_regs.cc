#include "preload/epoll_regs.h"

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
    Reg& r = regs_[index_[s] - 1];
    if (r.fd == fd && r.key == key) return &r;
  }
  return nullptr;
}

void Regs::index_put(uint32_t pos) {
  size_t mask = index_.size() - 1;
  size_t s = slot_of(regs_[pos].fd, regs_[pos].key);
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
      const Reg& r = regs_[index_[j] - 1];
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
  if ((regs_.size() + 1) * 2 > index_.size()) {
    regs_.push_back(r);
    grow(); // re-indexes everything, the new entry included
  } else {
    regs_.push_back(r);
    index_put(static_cast<uint32_t>(regs_.size() - 1));
  }
  Reg& in = regs_.back();
  if (in.src) ++n_user_;
  if (user_out(in)) ++n_user_out_;
  return &in;
}

void Regs::erase(Reg* r) {
  size_t pos = static_cast<size_t>(r - regs_.data());
  size_t last = regs_.size() - 1;
  size_t mask = index_.size() - 1;
  size_t s = slot_of(r->fd, r->key);
  while (index_[s] != pos + 1)
    s = (s + 1) & mask;
  index_del(s);
  if (r->src) --n_user_;
  if (user_out(*r)) --n_user_out_;
  if (pos != last) {
    // The last entry moves into the hole: repoint its index slot.
    const Reg& m = regs_[last];
    size_t t = slot_of(m.fd, m.key);
    while (index_[t] != last + 1)
      t = (t + 1) & mask;
    index_[t] = static_cast<uint32_t>(pos + 1);
    regs_[pos] = regs_[last];
  }
  regs_.pop_back();
  if (cursor_ > regs_.size()) cursor_ = 0;
}

void Regs::clear() {
  regs_.clear();
  index_.clear();
  n_user_ = n_user_out_ = 0;
  cursor_ = 0;
}

void Regs::set_src(Reg* r, stream::ReadySource* src) {
  if (user_out(*r)) --n_user_out_;
  if ((r->src != nullptr) != (src != nullptr)) {
    if (src)
      ++n_user_;
    else
      --n_user_;
  }
  if (src && src != r->src) {
    // A new source: its first look reports the current level (the kernel
    // registration it replaces may have had an event queued).
    r->edge_pending = true;
    r->excl_owned = true;
  }
  r->src = src;
  if (user_out(*r)) ++n_user_out_;
}

void Regs::rearm(Reg* r, uint32_t events, uint64_t data) {
  if (user_out(*r)) --n_user_out_;
  r->events = events;
  if (user_out(*r)) ++n_user_out_;
  r->data = data;
  r->armed = true;
  r->edge_pending = true;
  r->excl_owned = true;
}

uint32_t Regs::check(Reg& r, bool take) {
  if (r.src == nullptr || !r.armed) return 0;
  const bool et = r.events & EPOLLET;
  const bool ex = r.events & EPOLLEXCLUSIVE;
  uint32_t gen = et || ex ? r.src->ready_gen(r.events) : 0;
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
  uint32_t ev = widen(r.src->ready_events()) & report_mask(r.events);
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

int Regs::harvest(epoll_event* out, int room, bool* residual) {
  *residual = false;
  size_t cnt = regs_.size();
  if (n_user_ == 0 || cnt == 0) return 0;
  int n = 0;
  size_t start = cursor_ < cnt ? cursor_ : 0;
  for (size_t i = 0; i < cnt; ++i) {
    size_t pos = start + i < cnt ? start + i : start + i - cnt;
    Reg& r = regs_[pos];
    if (r.src == nullptr) continue;
    if (n < room) {
      uint32_t ev = check(r, true);
      if (ev == 0) continue;
      out[n].events = ev;
      out[n].data.u64 = r.data;
      ++n;
      cursor_ = pos + 1;
      // A level-triggered registration stays ready until the application
      // consumes: other waiters may be told too (the kernel re-queues it).
      if ((r.events & (EPOLLET | EPOLLONESHOT)) == 0) *residual = true;
    } else if (check(r, false) != 0) {
      *residual = true;
      break;
    }
  }
  return n;
}

bool Regs::reportable() {
  if (n_user_ == 0) return false;
  for (Reg& r : regs_)
    if (r.src != nullptr && check(r, false) != 0) return true;
  return false;
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
