#include "preload/poll_watch.h"

#include <new>
#include <sys/syscall.h>
#include <unistd.h>

namespace xp::readiness {

bool PollWatch::begin(size_t n) {
  end();
  if (n == 0) return false;
  Entry* e = reinterpret_cast<Entry*>(inline_);
  if (n > kInline) {
    e = static_cast<Entry*>(::operator new(n * sizeof(Entry), std::nothrow));
    if (e == nullptr) return false;
  }
  entries_ = e;
  for (size_t i = 0; i < n; ++i) {
    Entry* x = new (e + i) Entry;
    x->owner = this;
    x->idx = static_cast<uint32_t>(i);
  }
  n_ = n;
  nlisted_ = 0;
  overflow_ = false;
  efd_ = -1;
  return true;
}

void PollWatch::watch(size_t i, SocketRef rec, stream::ReadySource* src) {
  if (i >= n_ || src == nullptr) return;
  Entry* e = at(i);
  e->rec = static_cast<SocketRef&&>(rec);
  e->src = src;
  src->watch(*e);
}

void PollWatch::end() {
  if (n_ == 0) return;
  for (size_t i = 0; i < n_; ++i) {
    Entry* e = at(i);
    if (e->src) e->src->unwatch(*e);
    e->~Entry(); // releases the record
  }
  if (entries_ != reinterpret_cast<Entry*>(inline_)) ::operator delete(entries_);
  entries_ = nullptr;
  n_ = 0;
}

bool PollWatch::Entry::on_change(bool) {
  // Under the source's watch lock; mu_ is taken inside it and nowhere
  // around a watch()/unwatch().  Not exclusive: every poll wakes, as the
  // kernel's poll does for each of its fds.
  PollWatch& w = *owner;
  std::lock_guard<std::mutex> g(w.mu_);
  if (!listed) {
    listed = true;
    if (w.nlisted_ < kListed)
      w.listed_[w.nlisted_++] = idx;
    else
      w.overflow_ = true;
  }
  if (w.efd_ >= 0) {
    uint64_t one = 1;
    long r = syscall(SYS_write, w.efd_, &one, sizeof one);
    (void)r; // EAGAIN: the counter is saturated, the sleeper wakes anyway
    w.efd_ = -1;
  }
  return false;
}

int PollWatch::take(uint32_t* out, int efd) {
  std::lock_guard<std::mutex> g(mu_);
  efd_ = efd;
  int k = overflow_ ? -1 : nlisted_;
  if (overflow_) {
    for (size_t i = 0; i < n_; ++i)
      at(i)->listed = false;
  } else {
    for (int i = 0; i < nlisted_; ++i) {
      out[i] = listed_[i];
      at(listed_[i])->listed = false;
    }
  }
  nlisted_ = 0;
  overflow_ = false;
  return k;
}

void PollWatch::disarm() {
  std::lock_guard<std::mutex> g(mu_);
  efd_ = -1;
}

} // namespace xp::readiness
