// Where a frame lives (a pool, a segment of it, a byte range there), and the capacity that pools
// reserve their segments against. Plain values: no thread contract of their own.
#ifndef DEPOT_DAEMON_LOCATION_H_
#define DEPOT_DAEMON_LOCATION_H_

#include <cstdint>

namespace depot {

// A frame's place in a pool.
struct Location {
  uint32_t segment = 0;  // or device chunk
  uint32_t pool = 0;     // 0: the host pool; n: device pool n
  uint64_t offset = 0;
  uint64_t size = 0;  // bytes asked for; the block may be larger (alignment)
};

// A capacity that several pools share (one per namespace): each segment is reserved against it.
// Empty segments are kept warm (mapped and faulted in by their clients, ready for the next
// object) while their bytes, over every pool on the budget, stay within warm_limit.
struct PoolBudget {
  uint64_t capacity = 0;
  uint64_t reserved = 0;
  uint64_t warm_limit = 0;  // bytes of empty segments that may be kept
  uint64_t warm = 0;        // bytes of empty segments kept now (part of reserved)
  uint64_t used = 0;        // in allocated blocks, over every pool on this budget
  uint64_t peak_used = 0;   // the most `used` has been since start

  void Use(uint64_t bytes) {
    used += bytes;
    if (used > peak_used) peak_used = used;
  }
};

}  // namespace depot

#endif  // DEPOT_DAEMON_LOCATION_H_
