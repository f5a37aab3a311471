// A poll or select call's watch of its user-mode fds, as an epoll set's
// registrations watch their sources (stream/ready_source.h): each fd's
// source tells the call's entry of a change, which lists the entry and,
// while the thread sleeps, wakes it.  So a change of another connection
// does not wake the call, and after a wake-up only the listed entries are
// looked at, not every fd of the call.  Lives for one poll/select call
// (preload/readiness.cc); entries sit in the call's own memory up to
// kInline fds, on the heap above.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "preload/fd_table.h"
#include "stream/ready_source.h"

namespace xp::readiness {

class PollWatch {
public:
  static constexpr size_t kInline = 64;
  // Changed entries listed between two looks; beyond that every entry is
  // looked at (take() returns -1).
  static constexpr int kListed = 32;

  PollWatch() = default;
  ~PollWatch() { end(); }
  PollWatch(const PollWatch&) = delete;
  PollWatch& operator=(const PollWatch&) = delete;

  // Room for n entries (none watching yet).  False: above kInline and no
  // memory (the caller then waits for any change instead).
  bool begin(size_t n);
  // Entry i (< n of begin) watches src; rec, held until end(), keeps the
  // socket's record and so its connection (the source) alive meanwhile.
  void watch(size_t i, SocketRef rec, stream::ReadySource* src);
  // Unwatches every entry: once it returns no change reaches this watch.
  void end();
  bool on() const { return n_ != 0; }

  // The entries that changed since the last take, in out[0..k) (k <=
  // kListed); -1: more than that, look at every entry.  efd >= 0 arms the
  // watch: the next change writes efd once (the thread is about to sleep
  // on it); -1 leaves it disarmed (changes are only listed).
  int take(uint32_t* out, int efd = -1);
  // No more writes to efd (the thread is awake).
  void disarm();

private:
  struct Entry final : stream::ReadyWatch {
    PollWatch* owner = nullptr;
    stream::ReadySource* src = nullptr;
    SocketRef rec;
    uint32_t idx = 0;
    bool listed = false; // guarded by owner->mu_
    bool on_change(bool wake_exclusive) override;
  };
  Entry* at(size_t i) { return entries_ + i; }

  alignas(Entry) unsigned char inline_[kInline * sizeof(Entry)];
  Entry* entries_ = nullptr;
  size_t n_ = 0; // entries constructed (0: off)
  // Innermost lock: taken by on_change() under a source's watch lock.
  std::mutex mu_;
  uint32_t listed_[kListed];
  int nlisted_ = 0;
  bool overflow_ = false;
  int efd_ = -1; // armed: written at the next change
};

} // namespace xp::readiness
