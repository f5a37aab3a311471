// A growable hash table from a 32-bit id to a pointer: a channel's streams
// by stream id (stream/mux.h).  Open addressing with linear probing and
// backward-shift deletion (no tombstones, so a channel that opens and
// closes streams for ever never needs a rebuild); it doubles when half
// full and starts at kMinSlots, so an idle channel costs a few hundred
// bytes and a channel with n streams about 32 n bytes at most.
//
// The peer chooses the ids a server channel holds: slots are found by a
// keyed mix of the id (a per-table random key), so a peer cannot pick ids
// that all land on one probe run.  Not thread-safe (the caller's lock).
#pragma once
#include <cstddef>
#include <cstdint>
#include <new>

namespace xp::stream {

template <class T> class IdTable {
public:
  static constexpr uint32_t kMinSlots = 16;
  explicit IdTable(uint32_t key = 0) : key_(key | 1u) {}
  ~IdTable() { delete[] slots_; }
  IdTable(const IdTable&) = delete;
  IdTable& operator=(const IdTable&) = delete;

  size_t size() const { return n_; }
  size_t capacity() const { return cap_; }

  T* find(uint32_t id) const {
    if (n_ == 0) return nullptr;
    for (uint32_t i = home(id);; i = (i + 1) & (cap_ - 1)) {
      const Slot& s = slots_[i];
      if (s.v == nullptr) return nullptr;
      if (s.id == id) return s.v;
    }
  }
  // False when the id is present already or the table could not grow
  // (no memory).
  bool insert(uint32_t id, T* v) {
    if (v == nullptr || find(id) != nullptr) return false;
    if ((n_ + 1) * 2 > cap_ && !grow()) return false;
    place(id, v);
    ++n_;
    return true;
  }
  // Removes id (nothing if absent): the entries after it in its probe run
  // move back so that every lookup still finds them.
  void erase(uint32_t id) {
    if (n_ == 0) return;
    uint32_t i = home(id);
    while (true) {
      if (slots_[i].v == nullptr) return;
      if (slots_[i].id == id) break;
      i = (i + 1) & (cap_ - 1);
    }
    const uint32_t mask = cap_ - 1;
    uint32_t hole = i;
    for (uint32_t j = (i + 1) & mask; slots_[j].v != nullptr; j = (j + 1) & mask) {
      // Entry j may fill the hole if its home is not in (hole, j].
      const uint32_t h = home(slots_[j].id);
      if (((j - h) & mask) >= ((j - hole) & mask)) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole] = Slot{};
    --n_;
  }
  // Calls f(id, value) for every entry; f must not change the table.
  template <class F> void each(F&& f) const {
    for (uint32_t i = 0; i < cap_; ++i)
      if (slots_[i].v) f(slots_[i].id, slots_[i].v);
  }

private:
  struct Slot {
    uint32_t id = 0;
    T* v = nullptr;
  };
  uint32_t home(uint32_t id) const {
    uint32_t x = (id ^ key_) * 0x9e3779b1u;
    x ^= x >> 15;
    x *= key_ * 0x85ebca6bu | 1u;
    x ^= x >> 13;
    return x & (cap_ - 1);
  }
  void place(uint32_t id, T* v) {
    uint32_t i = home(id);
    while (slots_[i].v != nullptr)
      i = (i + 1) & (cap_ - 1);
    slots_[i] = Slot{id, v};
  }
  bool grow() {
    const uint32_t ncap = cap_ ? cap_ * 2 : kMinSlots;
    if (ncap < cap_) return false;
    Slot* ns = new (std::nothrow) Slot[ncap];
    if (ns == nullptr) return false;
    Slot* old = slots_;
    const uint32_t ocap = cap_;
    slots_ = ns;
    cap_ = ncap;
    for (uint32_t i = 0; i < ocap; ++i)
      if (old[i].v) place(old[i].id, old[i].v);
    delete[] old;
    return true;
  }

  Slot* slots_ = nullptr;
  uint32_t cap_ = 0;
  size_t n_ = 0;
  uint32_t key_;
};

} // namespace xp::stream
