// MemfdBackend is a DeviceBackend for machines without a GPU: its "GPUs" are stand-ins and its
// chunks are memfd segments. It exercises device pools, the device protocol and chunk fd passing;
// it is not GPU coverage (that is the [cuda] tests, on a machine with a GPU).
//
// $DEPOT_TEST_GPUS is the number of stand-in GPUs (default 2), or the file $DEPOT_TEST_GPUS_FILE
// holds it (read at each look, so that GPUs can appear later, as they do when their kernel modules
// load after the daemon started), each of 256 MiB with a granularity
// of 2 MiB. Like a real backend it holds each device to its own memory and names each chunk after
// the device it is on ("depot-test-gpu<index>-chunk", index in Devices()' list), so that a test
// sees which device's memory an object took. Not thread-safe, like every DeviceBackend.
#ifndef DEPOT_TESTS_MEMFD_BACKEND_H_
#define DEPOT_TESTS_MEMFD_BACKEND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/device_backend.h"

namespace depot::test {

class MemfdBackend : public DeviceBackend {
 public:
  std::string kind() const override { return "memfd-test"; }
  Result<std::vector<DeviceInfo>> Devices() override;
  Result<DeviceChunk> CreateChunk(size_t index, uint64_t size) override;
  Result<DeviceChunk> AdoptChunk(size_t index, UniqueFd fd, uint64_t size) override;
  void ReleaseChunk(size_t index, DeviceChunk& chunk) override;

  // Chunks created and not yet released.
  uint64_t live_chunks() const { return live_; }

 private:
  static constexpr uint64_t kMemory = uint64_t{256} << 20;  // of each stand-in GPU

  uint64_t chunks_ = 0;
  uint64_t live_ = 0;
  std::vector<uint64_t> used_;  // bytes in chunks, per device of the last Devices()
};

}  // namespace depot::test

#endif  // DEPOT_TESTS_MEMFD_BACKEND_H_
