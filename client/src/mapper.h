// internal::Mapper makes and undoes the mappings of segments, host segments or device pools'
// chunks, that the daemon sent as fds. SegmentMap decides when to map and keeps what is mapped;
// a Mapper knows how. Two kinds: MmapMapper (mmap_mapper.h) for host segments and the tests'
// memfd stand-in for device chunks, CudaMapper (cuda_mapper.h) for chunks of CUDA device pools.
//
// Implementations are thread-safe.
#ifndef DEPOT_CLIENT_SRC_MAPPER_H_
#define DEPOT_CLIENT_SRC_MAPPER_H_

#include <cstdint>

#include "depot/status.h"

namespace depot::internal {

class Mapper {
 public:
  virtual ~Mapper() = default;

  // Maps the `size` bytes behind `fd`, a segment of pool `pool`, read-write or read-only, and
  // returns where they are.
  virtual Result<void*> Map(int fd, uint64_t size, uint32_t pool, bool writable) = 0;

  // Undoes the Map that returned `base`. A mapping that cannot be undone is left as it is (its
  // address range is never reused), and the reason returned.
  virtual Status Unmap(void* base, uint64_t size) = 0;
};

}  // namespace depot::internal

#endif  // DEPOT_CLIENT_SRC_MAPPER_H_
