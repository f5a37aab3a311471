// A fixed-capacity byte FIFO: a stream's receive buffer.  Memory is mapped
// once when the stream is set up; the data path only copies.
#pragma once
#include "common/bulk_copy.h"
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <sys/mman.h>

namespace xp::stream {

class ByteRing {
public:
  explicit ByteRing(size_t capacity) : cap_(capacity) {
    void* p = mmap(nullptr, cap_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    buf_ = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
    if (buf_ == nullptr) {
      cap_ = 0;
      return;
    }
    // Only the pages bytes went through become resident: without this a
    // kernel with transparent huge pages "always" backs the rings (the
    // kernel merges neighbouring ones into one mapping) with 2 MiB pages,
    // so each stream that received a few bytes held its whole buffer.
    madvise(buf_, cap_, MADV_NOHUGEPAGE);
  }
  ~ByteRing() {
    if (buf_) munmap(buf_, cap_);
  }
  ByteRing(const ByteRing&) = delete;
  ByteRing& operator=(const ByteRing&) = delete;

  bool ok() const { return buf_ != nullptr; }
  const void* base() const { return buf_; }
  size_t size() const { return tail_ - head_; }
  size_t space() const { return cap_ - size(); }

  // Appends n bytes; false (and nothing written) when they do not fit.
  bool put(const void* src, size_t n) {
    if (n > space()) return false;
    size_t pos = tail_ % cap_, first = n < cap_ - pos ? n : cap_ - pos;
    bulk_copy(buf_ + pos, src, first);
    bulk_copy(buf_, static_cast<const uint8_t*>(src) + first, n - first);
    tail_ += n;
    return true;
  }
  // Copies up to n bytes out, from `skip` bytes past the head; consumes them
  // unless peek.
  size_t get(void* dst, size_t n, bool peek, size_t skip = 0) {
    if (skip >= size()) return 0;
    if (n > size() - skip) n = size() - skip;
    size_t pos = (head_ + skip) % cap_, first = n < cap_ - pos ? n : cap_ - pos;
    bulk_copy(dst, buf_ + pos, first);
    bulk_copy(static_cast<uint8_t*>(dst) + first, buf_, n - first);
    if (!peek) head_ += n;
    return n;
  }

  // Zero-copy access for the recovery path (stream/resume.cc): the bytes
  // at the head as one contiguous span, and dropping them once used.
  size_t front(const uint8_t** p) const {
    size_t n = size();
    *p = buf_;
    if (n == 0) return 0;
    size_t pos = head_ % cap_;
    *p = buf_ + pos;
    return n < cap_ - pos ? n : cap_ - pos;
  }
  void consume(size_t n) { head_ += n <= size() ? n : size(); }

private:
  uint8_t* buf_ = nullptr;
  size_t cap_;
  uint64_t head_ = 0, tail_ = 0;
};

} // namespace xp::stream
