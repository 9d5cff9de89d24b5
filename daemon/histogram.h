// Histogram: counts of observations in fixed buckets, for metrics. Observe is a few comparisons
// and two additions, with no allocation, so that the request path can afford one per request.
// The bounds are the buckets' upper limits, in the unit observed (nanoseconds, bytes); metrics
// print them scaled to their own unit (seconds).
//
// A plain value; not thread-safe (the daemon's loop owns it).
#ifndef DEPOT_DAEMON_HISTOGRAM_H_
#define DEPOT_DAEMON_HISTOGRAM_H_

#include <array>
#include <cstdint>
#include <span>

namespace depot {

class Histogram {
 public:
  static constexpr size_t kMaxBuckets = 15;  // bounds; one more bucket counts what exceeds them

  Histogram() = default;  // no buckets yet: assign one made with bounds
  // `bounds` ascending, at most kMaxBuckets, and outliving the histogram (a static array).
  explicit Histogram(std::span<const uint64_t> bounds) : bounds_(bounds) {}

  void Observe(uint64_t value) {
    size_t i = 0;
    while (i < bounds_.size() && value > bounds_[i]) ++i;
    ++counts_[i];
    sum_ += value;
  }

  std::span<const uint64_t> bounds() const { return bounds_; }
  // Observations in bucket i alone (not cumulative); bucket bounds().size() is above them all.
  uint64_t bucket(size_t i) const { return counts_[i]; }
  uint64_t sum() const { return sum_; }

 private:
  std::span<const uint64_t> bounds_;
  std::array<uint64_t, kMaxBuckets + 1> counts_{};
  uint64_t sum_ = 0;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_HISTOGRAM_H_
