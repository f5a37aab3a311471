// Zero-copy sends (docs/protocol.md §4 "Zero-copy sends"): the state one
// blocking send() call keeps while records gathered from the program's
// buffer are on the wire.  Internal to stream/conn_io.cc.
//
// The lifetime rule: send() returns only after (1) the NIC finished every
// work request that reads the buffer (their signaled completions, or the
// flush of a failed channel), and (2) the bytes recovery might still re-send
// (neither acknowledged nor credited by the peer: at most a window) were
// copied into their staged records.  Until (2), recovery copies them from
// the buffer itself (Stream::zero_copy_overlay), which is safe because the
// buffer is the program's until send() returns.
#pragma once
#include <cstddef>
#include <cstdint>

#include "alloc/reg_cache.h"

namespace xp::stream {

class Conn;
class Stream;
struct Channel;

namespace zc {

struct Send {
  bool on = false; // this call may send zero-copy (blocking, XPRESS_ZEROCOPY, large)
  // The registered region element 0 of the remaining iovec lies in.
  const uint8_t* base = nullptr;
  size_t len = 0;
  uint32_t lkey = 0;
  alloc::reg_cache::Ref ref;
  bool ref_held = false;
  // Where zero-copy records were posted (holds ch->zc_users until finish).
  Channel* ch = nullptr;
  Stream* st = nullptr;
  uint32_t stream_id = 0;
  uint64_t last_wr = 0;
  // Arena memory not registered with this domain yet: registered at finish,
  // after the copy (cold, once per arena unit and protection domain).
  const void* prep = nullptr;
  size_t prep_len = 0;
  int prep_slot = -1;

  bool covers(const void* p, size_t n) const {
    auto a = static_cast<const uint8_t*>(p);
    return base != nullptr && a >= base && a + n <= base + len;
  }
};

// Before taking ch->mu: whether [p, p+n) (element 0 of what is left to
// send) can go zero-copy on ch; finds its key (lookup_local lock-free, the
// registration cache on a miss).  A different region than the one pending
// finishes that one first.
bool prepare(Conn* c, Channel* ch, Send* z, const void* p, size_t n);
// Records posted on ch for stream s: remember what to wait for.
void posted(Send* z, Channel* ch, Stream* s, uint32_t id, uint64_t wr);
// Before send() returns (and before it continues on TCP after a failure):
// the lifetime rule above; keeps errno.
void finish(Conn* c, Send* z);

} // namespace zc
} // namespace xp::stream
