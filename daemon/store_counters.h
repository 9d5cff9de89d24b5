// StoreCounters: what the Store counts for metrics as requests go by, beyond what its units keep
// anyway (object counts, evictions, errors): the time it spent on each request, by type, and the
// sizes of the objects created. Each observation is an increment or two in a fixed array: no
// lock, no allocation on the request path.
//
// Not thread-safe: the daemon's loop owns it (the metrics endpoint renders on that loop too).
#ifndef DEPOT_DAEMON_STORE_COUNTERS_H_
#define DEPOT_DAEMON_STORE_COUNTERS_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <span>
#include <string_view>

#include "daemon/histogram.h"
#include "proto/messages.h"

namespace depot {

class StoreCounters {
 public:
  // Latency buckets: 1 us to 1 s, by fours, in nanoseconds.
  static constexpr std::array<uint64_t, 11> kLatencyBoundsNs = {
      1'000,     4'000,      16'000,     64'000,      256'000,      1'000'000,
      4'000'000, 16'000'000, 64'000'000, 256'000'000, 1'000'000'000};
  // Object sizes: 64 B to 16 GiB, by sixteens.
  static constexpr std::array<uint64_t, 8> kSizeBounds = {
      64, 1ull << 10, 16ull << 10, 256ull << 10, 4ull << 20, 64ull << 20, 1ull << 30, 16ull << 30};

  StoreCounters() {
    for (Histogram& h : latency_) h = Histogram(kLatencyBoundsNs);
  }

  // A request of `type` took `spent` of the daemon's time (not the time a get waited parked).
  void ObserveRequest(uint16_t type, std::chrono::nanoseconds spent) {
    latency_[proto::RequestIndex(type)].Observe(static_cast<uint64_t>(spent.count()));
  }
  // An object of `bytes` was created.
  void ObserveObject(uint64_t bytes) { sizes_.Observe(bytes); }

  // Of a request type a client may send (proto/messages.h).
  const Histogram& latency(uint16_t type) const { return latency_[proto::RequestIndex(type)]; }
  const Histogram& object_sizes() const { return sizes_; }

 private:
  std::array<Histogram, proto::kRequestCount> latency_;  // [0]: any other type
  Histogram sizes_{kSizeBounds};
};

}  // namespace depot

#endif  // DEPOT_DAEMON_STORE_COUNTERS_H_
