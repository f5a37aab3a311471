#include "stream/channel_sleep.h"

#include "stream/engine_internal.h"

namespace xp::stream {

bool ChannelSleep::enabled() {
  return engine::params().sleep_on_channel;
}

void ChannelSleep::add(const ReadySource* src) {
  if (!enabled()) return;
  Channel* ch = src ? src->sleep_channel() : nullptr;
  if (ch == nullptr || n_ == kMax) return;
  for (int i = 0; i < n_; ++i)
    if (chs_[i] == ch) return;
  const int fd = ch->link->wait_fd();
  if (fd < 0) return;
  // The channel read from the connection may have been unlinked since;
  // it is freed only after a grace period (engine_rendezvous.cc,
  // reap_channels), and not while this reference lives.
  ch->sleep_refs.fetch_add(1, std::memory_order_acq_rel);
  chs_[n_] = ch;
  fds_[n_++] = fd;
}

bool ChannelSleep::begin() {
  for (int i = 0; i < n_;) {
    Channel* ch = chs_[i];
    if (ch->failed.load() || ch->spinners.load(std::memory_order_seq_cst) > 0)
      drop(i); // failed: its streams resume (the engine wakes them); spun on: the spinner relays
    else
      ++i;
  }
  bool polled = false;
  for (int i = 0; i < n_; ++i) {
    if (!engine::arm_for_news(chs_[i])) continue;
    engine::progress(chs_[i]); // unarmed until now: its completions raised no event
    polled = true;
  }
  if (polled) return true;
  // One sleeper per channel: a completion wakes it alone, and it passes
  // the others' news on (its poll wakes their eventfds) as the engine would.
  for (int i = 0; i < n_;)
    if (engine::sleep_enter_alone(chs_[i]))
      ++i;
    else
      drop(i);
  entered_ = true;
  return false;
}

void ChannelSleep::end(uint32_t fired) {
  if (!entered_) return;
  entered_ = false;
  // The event first, then the engine's watch again: re-enabling a watch on
  // a readable fd would wake the engine for an event this thread takes.
  for (int i = 0; i < n_; ++i)
    if (fired & (1u << i)) engine::take_event(chs_[i]);
  // A solicited-only arm stays: the engine arms so itself (arm_for_news),
  // and whoever needs every completion widens it and polls.
  for (int i = 0; i < n_; ++i)
    engine::sleep_leave(chs_[i]);
}

void ChannelSleep::drop(int i) {
  if (entered_) engine::sleep_leave(chs_[i]);
  chs_[i]->sleep_refs.fetch_sub(1, std::memory_order_acq_rel);
  for (int j = i + 1; j < n_; ++j) {
    chs_[j - 1] = chs_[j];
    fds_[j - 1] = fds_[j];
  }
  --n_;
}

void ChannelSleep::clear() {
  end(0);
  while (n_ > 0)
    drop(n_ - 1);
}

void RoomWait::enter() {
  if (!in_) in_ = engine::room_wait_enter();
}

void RoomWait::leave() {
  if (!in_) return;
  in_ = false;
  engine::room_wait_leave();
}

} // namespace xp::stream
