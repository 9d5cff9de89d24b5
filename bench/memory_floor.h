// MemoryFloor times what the host's memory alone gives a multi-GUID get's access pattern, for
// section 9 to print beside the multi-get itself. For each of 1,000 objects drawn at random from
// those the shared index this process maps holds: the tags' line of the object's first set; when
// the object lies in its second set (which a lookup learns only from the first line), the second
// set's line after it; then the object's entry; and a line written at random in a table the size
// of the getting process's holdings. In blocks of 512, each pass's misses in flight together, as
// Connection::FromIndexMany's passes are. No instruction of depot's runs in it, and on a virtual
// machine its time moves with the host's other guests.
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
  // The largest shared index this process maps (/proc/self/maps), the objects in it, and a table
  // for `held` holdings: two slots of 40 bytes each.
  explicit MemoryFloor(uint64_t held);
  // Seconds for the pattern over 1,000 objects.
  double Time1000();

 private:
  std::span<const std::byte> index_;
  // The entries in use: each one's number, and its GUID's first set (another set than the
  // entry's when the object lies in its second).
  struct Object {
    uint64_t entry, first_set;
  };
  std::vector<Object> objects_;
  std::vector<std::array<uint64_t, 5>> table_;
  std::mt19937_64 rng_{9};
  volatile uint64_t opaque_zero_ = 0;
};

}  // namespace depot::bench

#endif  // DEPOT_BENCH_MEMORY_FLOOR_H_
