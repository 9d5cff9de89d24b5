// MemoryFloor times what the host's memory alone gives a multi-GUID get's access pattern, for
// section 9 to print beside the multi-get itself: for each of 1,000 objects, the tags' lines of
// two sets at random in the shared index this process maps (a GUID's two sets), then an entry of
// the first set that its tags name (found only once they arrived), and a line written at random
// in a table the size of the getting process's holdings; in blocks of 512, each pass's misses in
// flight together, as Connection::FromIndexMany's passes are. No instruction of
// depot's runs in it, and on a virtual machine its time moves with the host's other guests.
#ifndef DEPOT_BENCH_MEMORY_FLOOR_H_
#define DEPOT_BENCH_MEMORY_FLOOR_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace depot::bench {

class MemoryFloor {
 public:
  // The largest shared index this process maps (/proc/self/maps), and a table for `held`
  // holdings: two slots of 40 bytes each.
  explicit MemoryFloor(uint64_t held);
  // Seconds for the pattern over 1,000 objects.
  double Time1000();

 private:
  std::span<const std::byte> index_;
  std::vector<std::array<uint64_t, 5>> table_;
  std::mt19937_64 rng_{9};
};

}  // namespace depot::bench

#endif  // DEPOT_BENCH_MEMORY_FLOOR_H_
