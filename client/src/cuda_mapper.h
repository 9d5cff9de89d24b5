// internal::CudaMapper maps the chunks of CUDA device pools into this process (import, reserve,
// map, set access for the local GPU that has the pool's UUID and every GPU that can reach its
// memory), and does the rest of the client's
// CUDA work: registering host mappings with CUDA (pinning), copying host bytes to a device, and
// waiting for a stream. libcuda is loaded on first use (common/cuda_driver.h).
//
// No call relies on the caller's CUDA state: each one that needs a context pushes the primary
// context of the device it works on for its duration and pops it after, so a thread that never
// touched CUDA works, and one with another GPU's context current keeps it. Each device's primary
// context is retained once, on first use, and released when the mapper goes.
//
// This is the one place in the client that depends on how it was built: without CUDA support
// every call answers Unavailable, saying so, and nothing is mapped or pinned.
//
// Thread-safe: one mutex guards the devices it has retained; the pools it reads are fixed after
// connecting.
#ifndef DEPOT_CLIENT_SRC_CUDA_MAPPER_H_
#define DEPOT_CLIENT_SRC_CUDA_MAPPER_H_

#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>

#include "client/src/mapper.h"
#include "client/src/pools.h"

namespace depot::internal {

class CudaMapper : public Mapper {
 public:
  explicit CudaMapper(const Pools& pools) : pools_(pools) {}
  ~CudaMapper() override;  // releases the primary contexts it retained
  CudaMapper(const CudaMapper&) = delete;
  CudaMapper& operator=(const CudaMapper&) = delete;

  // Imports the chunk behind `fd` and maps it on the local GPU of pool `pool`, with read-write or
  // read-only access for that GPU and for each GPU with peer access to it. The result is a
  // device address.
  Result<void*> Map(int fd, uint64_t size, uint32_t pool, bool writable) override;
  // Waits for the work queued in the primary context of each GPU this mapper retained (work
  // that may still read the range), then unmaps it and frees its address range. A range the
  // driver does not unmap stays reserved. In a child forked since the driver was loaded,
  // Unavailable and nothing done (the driver is the parent's).
  Status Unmap(void* base, uint64_t size) override;

  // Loads the driver: OK when the calls below can work.
  Status Load() const;
  // Registers a host mapping with CUDA as portable memory (pinned for every context), read-only
  // when the mapping is, so that copies between it and any GPU run at full speed. False, and
  // nothing registered, for a read-only mapping that this GPU cannot register (it lacks
  // CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED and cannot register it otherwise):
  // copies from it still work, at the speed of pageable memory. Undone by Unpin.
  Result<bool> Pin(void* base, uint64_t size, bool read_only);
  Status Unpin(void* base);
  // Copies host bytes to device memory of this process's mapping of pool `pool`.
  Status CopyIn(std::span<std::byte> dst, std::span<const std::byte> src, uint32_t pool);
  // Waits for the work queued on `cuda_stream` (a CUstream), or, when it is null, on the legacy
  // default stream of each GPU of `pools`.
  Status Sync(void* cuda_stream, std::span<const uint32_t> pools);

 private:
  // A local GPU: its ordinal, its primary context (a CUcontext, retained), the granularity of
  // address ranges mapped on it.
  struct Device {
    int ordinal = 0;
    void* context = nullptr;
    uint64_t granularity = 0;
  };
  // The local GPU of pool `pool`; pool 0: the GPU that pins host memory (PinDevice).
  Result<Device> DeviceOf(uint32_t pool);
  // GPU `ordinal`, its primary context retained on first use.
  Result<Device> Retained(int ordinal);
  // The GPU whose primary context registers host memory, chosen by the first pin: the GPU of
  // the context current in the pinning thread (the GPU that process works on), or GPU 0 in a
  // thread with none. Every pin and unpin after uses it, so that no process makes a context on a
  // GPU it does not use (each costs hundreds of MiB of that GPU's memory).
  Result<int> PinDevice();

  [[maybe_unused]] const Pools& pools_;  // not read without CUDA support
  std::mutex mu_;
  std::map<int, Device> devices_;  // by ordinal: those whose primary context is retained
  std::optional<int> pin_device_;  // PinDevice's choice, once made
};

}  // namespace depot::internal

#endif  // DEPOT_CLIENT_SRC_CUDA_MAPPER_H_
