// The wall clock in nanoseconds since the Unix epoch: for timestamps people read (when an object
// was created, when a client connected), never for measuring intervals.
#ifndef DEPOT_COMMON_WALL_CLOCK_H_
#define DEPOT_COMMON_WALL_CLOCK_H_

#include <chrono>
#include <cstdint>

namespace depot {

inline int64_t WallClockNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace depot

#endif  // DEPOT_COMMON_WALL_CLOCK_H_
