// Log-linear latency histogram in the spirit of HdrHistogram.
//
// Values below 2^7 are counted exactly; above, every power of two is split into 2^7 linear
// sub-buckets, so a reported percentile is within 0.4% of the true value over the whole
// 64-bit range with a fixed 7,424 counters.  Each worker thread records into its own
// histogram (no sharing on the hot path) and the results are merged afterwards.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

namespace xb {

class Histogram {
public:
  static constexpr int kSubBits = 7;
  static constexpr uint64_t kSub = 1ull << kSubBits;
  static constexpr size_t kBuckets = kSub * (64 - kSubBits + 1);

  Histogram() : counts_(kBuckets, 0) {}

  void record(uint64_t v) {
    ++counts_[index(v)];
    ++count_;
    sum_ += v;
    min_ = std::min(min_, v);
    max_ = std::max(max_, v);
  }

  void merge(const Histogram& o) {
    for (size_t i = 0; i < kBuckets; ++i)
      counts_[i] += o.counts_[i];
    count_ += o.count_;
    sum_ += o.sum_;
    min_ = std::min(min_, o.min_);
    max_ = std::max(max_, o.max_);
  }

  uint64_t count() const { return count_; }
  uint64_t min() const { return count_ ? min_ : 0; }
  uint64_t max() const { return max_; }
  double mean() const { return count_ ? static_cast<double>(sum_) / count_ : 0.0; }

  // Value at percentile p (0 < p <= 100): the midpoint of the bucket holding that rank,
  // clamped to the exact observed min/max.
  uint64_t percentile(double p) const {
    if (count_ == 0) return 0;
    auto rank = static_cast<uint64_t>(std::ceil(p / 100.0 * static_cast<double>(count_)));
    rank = std::clamp<uint64_t>(rank, 1, count_);
    uint64_t seen = 0;
    for (size_t i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= rank) return std::clamp(midpoint(i), min_, max_);
    }
    return max_;
  }

private:
  static size_t index(uint64_t v) {
    if (v < kSub) return v;
    int shift = (63 - std::countl_zero(v)) - kSubBits;
    return kSub * (shift + 1) + ((v >> shift) - kSub);
  }
  static uint64_t midpoint(size_t i) {
    if (i < kSub) return i;
    uint64_t shift = i / kSub - 1;
    uint64_t low = (kSub + i % kSub) << shift;
    return low + ((1ull << shift) - 1) / 2;
  }

  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  uint64_t sum_ = 0;
  uint64_t min_ = UINT64_MAX;
  uint64_t max_ = 0;
};

} // namespace xb
