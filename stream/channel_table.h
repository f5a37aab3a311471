// The process's channels (State::chans, under State::mu), and the one owner
// that frees them.
//
// Problem: a channel that fails or idles out must leave every path that
// finds a channel at once, but a caller may still hold it for a moment (a
// data call that read its connection's channel just before the connection
// left it, a zero-copy send waiting for its completions, a sleeper on its
// completion fd).  Example: freeing it in reap_channels while a spinner
// polls it.  Mechanism: retire() moves it from the live list to the dying
// list; free_quiet() frees a dying channel once its grace period passed
// and nobody counts himself as a user.  Both lists are intrusive (one hook
// per channel: it is in one of them), so adding, retiring and freeing
// allocate nothing and cost O(1).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "common/ptr_table.h"
#include "stream/channel.h"

namespace xp::stream {

class ChannelTable {
public:
  using List = PtrTable<Channel, &Channel::in_table>;
  // How long a retired channel stays allocated at least.
  static constexpr uint64_t kGraceMs = 2000;

  ChannelTable() = default;
  ChannelTable(const ChannelTable&) = delete;
  ChannelTable& operator=(const ChannelTable&) = delete;

  // ch is live from now on, and the table's to free.
  Channel* adopt(std::unique_ptr<Channel> ch) {
    live_.add(ch.get());
    return ch.release();
  }
  // A live channel leaves every lookup; freed by free_quiet() later.
  void retire(Channel* ch, uint64_t now_ms) {
    live_.remove(ch);
    ch->dying_since_ms = now_ms; // non-zero: retired (free_now)
    dying_.add(ch);
  }
  // Frees the dying channels past their grace period that nobody uses;
  // before_free(ch) lets go of what the channel does not own (its link).
  template <class F> void free_quiet(uint64_t now_ms, F&& before_free) {
    for (auto it = dying_.begin(); it != dying_.end();) {
      Channel* ch = *it;
      if (now_ms - ch->dying_since_ms < kGraceMs || ch->zc_users.load() > 0 ||
          ch->sleep_refs.load() > 0) {
        ++it;
        continue;
      }
      it = dying_.erase(it);
      ch->mux.reset(); // before its link
      before_free(ch);
      delete ch;
    }
  }
  // Unlinked from either list and freed at once: only where no other thread
  // can hold it (make_channel's failure path; unit tests' teardown).
  // (A hook does not say which list holds it, and each list counts its
  // members: remove from the right one.)
  void free_now(Channel* ch) {
    (ch->dying_since_ms != 0 ? dying_ : live_).remove(ch);
    delete ch;
  }
  // A fork child: the channels are the parent's (its queue pairs), never
  // freed here; the lists forget them.
  void forget_all() {
    live_.clear();
    dying_.clear();
  }

  List& live() { return live_; }
  List& dying() { return dying_; }
  bool empty() const { return live_.empty() && dying_.empty(); }
  // The live channels, for a walk made without State::mu (a channel retired
  // meanwhile is still allocated for the grace period).
  std::vector<Channel*> snapshot() {
    std::vector<Channel*> v;
    v.reserve(live_.size());
    for (Channel* ch : live_)
      v.push_back(ch);
    return v;
  }

private:
  List live_;
  List dying_;
};

} // namespace xp::stream
