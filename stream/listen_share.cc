#include "stream/listen_share.h"

#include <cstring>
#include <ctime>
#include <sys/random.h>

namespace xp::stream {

namespace {

thread_local uint64_t t_probes = 0;

uint32_t tag(uint32_t w) {
  return w & 3u;
}

ListenShare::Slot& at(ListenShare* s, uint32_t h, uint32_t i) {
  return s->slots[(h + i) % ListenShare::kSlots];
}

} // namespace

uint32_t share_home(const ListenShare* s, const uint8_t key[recover::kTupleIdBytes]) {
  return static_cast<uint32_t>(recover::siphash24_64(s->hash_key, key, recover::kTupleIdBytes)) %
         ListenShare::kSlots;
}

void share_init(ListenShare* s) {
  if (getrandom(s->hash_key, sizeof s->hash_key, 0) != static_cast<ssize_t>(sizeof s->hash_key)) {
    timespec t{};
    clock_gettime(CLOCK_MONOTONIC, &t);
    memcpy(s->hash_key, &t, sizeof t < sizeof s->hash_key ? sizeof t : sizeof s->hash_key);
  }
}

bool share_publish(ListenShare* s, const uint8_t key[recover::kTupleIdBytes], int32_t pid,
                   uint16_t port) {
  const uint32_t h = share_home(s, key);
  for (uint32_t i = 0; i < ListenShare::kWindow; ++i) {
    ++t_probes;
    ListenShare::Slot& sl = at(s, h, i);
    uint32_t w = sl.state.load(std::memory_order_acquire);
    if (tag(w) != ListenShare::kFree && tag(w) != ListenShare::kDeleted) continue;
    // A new claim count: a reader that saw this slot's previous entry
    // notices the change (listen_share.h).
    const uint32_t claimed = ((w >> 2) + 1) << 2 | ListenShare::kWriting;
    if (!sl.state.compare_exchange_strong(w, claimed, std::memory_order_acq_rel))
      continue; // another process took it first
    sl.pid = pid;
    sl.port = port;
    memcpy(sl.tuple, key, recover::kTupleIdBytes);
    sl.state.store((claimed & ~3u) | ListenShare::kValid, std::memory_order_release);
    s->slots_gen.fetch_add(1, std::memory_order_release);
    return true;
  }
  return false;
}

bool share_find(ListenShare* s, const uint8_t key[recover::kTupleIdBytes], int32_t not_pid,
                uint16_t* port) {
  const uint32_t h = share_home(s, key);
  for (uint32_t i = 0; i < ListenShare::kWindow; ++i) {
    ++t_probes;
    ListenShare::Slot& sl = at(s, h, i);
    const uint32_t w = sl.state.load(std::memory_order_acquire);
    if (tag(w) == ListenShare::kFree) return false; // nothing was ever put past here
    if (tag(w) != ListenShare::kValid) continue;
    const int32_t pid = sl.pid;
    const uint16_t p = sl.port;
    const bool same = memcmp(sl.tuple, key, recover::kTupleIdBytes) == 0;
    // The fields are read before the word is read again.
    std::atomic_thread_fence(std::memory_order_acquire);
    if (sl.state.load(std::memory_order_relaxed) != w) continue; // deleted meanwhile
    if (same && pid != not_pid) {
      if (port) *port = p;
      return true;
    }
  }
  return false;
}

bool share_remove(ListenShare* s, const uint8_t key[recover::kTupleIdBytes], int32_t pid) {
  const uint32_t h = share_home(s, key);
  for (uint32_t i = 0; i < ListenShare::kWindow; ++i) {
    ++t_probes;
    ListenShare::Slot& sl = at(s, h, i);
    uint32_t w = sl.state.load(std::memory_order_acquire);
    if (tag(w) == ListenShare::kFree) return false;
    if (tag(w) != ListenShare::kValid || sl.pid != pid ||
        memcmp(sl.tuple, key, recover::kTupleIdBytes) != 0)
      continue;
    // Only pid deletes pid's entries, and this process does so under the
    // engine's mutex: the word cannot have changed since it was read.
    if (!sl.state.compare_exchange_strong(w, (w & ~3u) | ListenShare::kDeleted,
                                          std::memory_order_acq_rel))
      continue;
    s->slots_gen.fetch_add(1, std::memory_order_release);
    return true;
  }
  return false;
}

uint64_t share_probes() {
  return t_probes;
}

} // namespace xp::stream
