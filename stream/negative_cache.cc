#include "stream/negative_cache.h"

#include <iterator>

namespace xp::stream {

bool NegativeCache::cached(const recover::IpAddr& addr, uint16_t port, uint64_t now) const {
  auto it = m_.find(key(addr, port));
  return it != m_.end() && now < it->second.until_ms;
}

uint64_t NegativeCache::hold_until(const recover::IpAddr& addr, uint16_t port, uint64_t now,
                                   uint64_t keep_ms) const {
  if (keep_ms == 0) return 0;
  auto it = m_.find(key(addr, port));
  if (it == m_.end() || it->second.refused_ms == 0) return 0;
  const uint64_t retry = it->second.refused_ms + kNoListenerRetryMs;
  return now < retry ? retry + kHoldSlackMs : 0;
}

NegativeCache::Entry& NegativeCache::slot(const Key& k, uint64_t now, uint64_t keep_ms) {
  auto it = m_.find(k);
  if (it != m_.end()) return it->second;
  if (m_.size() >= cap_) {
    for (auto e = m_.begin(); e != m_.end();) {
      const bool stale = now >= e->second.until_ms &&
                         (e->second.refused_ms == 0 || now >= e->second.refused_ms + keep_ms);
      e = stale ? m_.erase(e) : std::next(e);
    }
    if (m_.size() >= cap_) m_.erase(m_.begin());
  }
  return m_[k];
}

bool NegativeCache::refused(const recover::IpAddr& addr, uint16_t port, uint64_t now,
                            uint64_t keep_ms) {
  if (keep_ms == 0) return false;
  Entry& e = slot(key(addr, port), now, keep_ms);
  if (e.refused_ms != 0 && now >= e.refused_ms + kNoListenerRetryMs && now < e.refused_ms + keep_ms)
    return true;
  if (e.refused_ms == 0 || now >= e.refused_ms + keep_ms) e.refused_ms = now;
  return false;
}

void NegativeCache::remember(const recover::IpAddr& addr, uint16_t port, uint64_t now,
                             uint64_t keep_ms) {
  slot(key(addr, port), now, keep_ms).until_ms = now + keep_ms;
}

void NegativeCache::forget_refused(const recover::IpAddr& addr, uint16_t port) {
  auto it = m_.find(key(addr, port));
  if (it != m_.end()) it->second.refused_ms = 0;
}

} // namespace xp::stream
