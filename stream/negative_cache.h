// What this process learned about server addresses where rdma_cm finds
// nobody listening (docs/protocol.md §1, "No rdma_cm listener").
//
// Problem: "nobody listens" means either no xpress there, or an xpress
// server that has not accepted its first connection from that socket yet
// (which opens its rdma_cm port).  One more attempt kNoListenerRetryMs later
// tells them apart, but a short connection (one HTTP request to a server
// without xpress) closes before it makes it, and the next one starts over.
//
// Mechanism: the first refusal's time is kept per address and port.  A
// later first refusal at least kNoListenerRetryMs after it is as good as a
// retry (refused() says so); a connection that starts before that time
// holds its first attempt until then (hold_until()), so that attempt is the
// retry whoever made the first.  Two refusals then make an entry that
// answers without an attempt for the cache's time (remember(), cached()).
//
// Example: five sequential 4 MiB fetches that each take 10 ms from
// a static busybox httpd: fetch 1 is refused at t=0 and closes at t=10;
// fetch 2 starts at t=12, holds until t=60, is refused: cached; fetches 3-5
// ask nobody.  Without the hold, fetch 2 (t=12) and fetch 3 (t=24) were both
// "first" refusals and rdma_cm was asked three times or more.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>

#include "recover/upgrade_wire.h"

namespace xp::stream {

// How long after a first "nobody listens" the same address is asked again.
constexpr uint64_t kNoListenerRetryMs = 50;
// A held first attempt goes this long after the retry's time, so that the
// connection that was refused, if it still lives, retries first and the held
// one waits for its outcome (stream/engine_rendezvous.cc, parking).
constexpr uint64_t kHoldSlackMs = 10;

class NegativeCache {
public:
  explicit NegativeCache(size_t cap = 1024) : cap_(cap) {}

  // No xpress at addr:port (known until the entry's time).
  bool cached(const recover::IpAddr& addr, uint16_t port, uint64_t now) const;
  // When a connection's first attempt to addr:port should go: 0 for now,
  // else the time of the pending retry plus kHoldSlackMs.
  uint64_t hold_until(const recover::IpAddr& addr, uint16_t port, uint64_t now,
                      uint64_t keep_ms) const;
  // A connection's first attempt found nobody listening (now).  True when an
  // earlier first attempt found the same at least kNoListenerRetryMs before
  // and within keep_ms: conclusive.  Otherwise its time is kept.
  bool refused(const recover::IpAddr& addr, uint16_t port, uint64_t now, uint64_t keep_ms);
  // Conclusive: no xpress there until now + keep_ms.
  void remember(const recover::IpAddr& addr, uint16_t port, uint64_t now, uint64_t keep_ms);
  // Somebody listens there after all (an attempt got through).
  void forget_refused(const recover::IpAddr& addr, uint16_t port);
  size_t size() const { return m_.size(); }

private:
  struct Entry {
    uint64_t until_ms = 0;   // no xpress there until then (0: not known)
    uint64_t refused_ms = 0; // a first attempt found nobody listening then (0: none)
  };
  struct Key {
    recover::IpAddr addr;
    uint16_t port;
    bool operator<(const Key& o) const {
      return addr < o.addr || (addr == o.addr && port < o.port);
    }
  };
  static Key key(const recover::IpAddr& addr, uint16_t port) { return Key{addr, port}; }
  Entry& slot(const Key& k, uint64_t now, uint64_t keep_ms);
  size_t cap_;
  std::map<Key, Entry> m_;
};

} // namespace xp::stream
