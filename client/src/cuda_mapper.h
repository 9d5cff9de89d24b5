// internal::CudaMapper maps the chunks of CUDA device pools into this process (import, reserve,
// map, set access on the local GPU that has the pool's UUID), and does the rest of the client's
// CUDA work: registering host mappings with CUDA (pinning), copying host bytes to a device, and
// waiting for a stream. libcuda is loaded on first use (common/cuda_driver.h).
//
// This is the one place in the client that depends on how it was built: without CUDA support
// every call answers Unavailable, saying so, and nothing is mapped or pinned.
//
// Thread-safe: it keeps no state of its own, and the pools it reads are fixed after connecting.
#ifndef DEPOT_CLIENT_SRC_CUDA_MAPPER_H_
#define DEPOT_CLIENT_SRC_CUDA_MAPPER_H_

#include <cstddef>
#include <span>

#include "client/src/mapper.h"
#include "client/src/pools.h"

namespace depot::internal {

class CudaMapper : public Mapper {
 public:
  explicit CudaMapper(const Pools& pools) : pools_(pools) {}

  // Imports the chunk behind `fd` and maps it on the local GPU of pool `pool`, with read-write or
  // read-only access for that GPU. The result is a device address.
  Result<void*> Map(int fd, uint64_t size, uint32_t pool, bool writable) override;
  void Unmap(void* base, uint64_t size) override;

  // Loads the driver: OK when the calls below can work.
  Status Load() const;
  // Registers a host mapping with CUDA (read-only when the mapping is), so that copies between
  // it and a GPU run at full speed. Undone by Unpin.
  Status Pin(void* base, uint64_t size, bool read_only) const;
  void Unpin(void* base) const;
  // Copies host bytes to device memory of this process's mapping.
  Status CopyIn(std::span<std::byte> dst, std::span<const std::byte> src) const;
  // Waits for the work queued on `cuda_stream` (a CUstream; null: the legacy default stream).
  Status Sync(void* cuda_stream) const;

 private:
  [[maybe_unused]] const Pools& pools_;  // not read without CUDA support
};

}  // namespace depot::internal

#endif  // DEPOT_CLIENT_SRC_CUDA_MAPPER_H_
