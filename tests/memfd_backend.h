// MemfdBackend is a DeviceBackend for machines without a GPU: its "GPUs" are stand-ins and its
// chunks are memfd segments. It exercises device pools, the device protocol and chunk fd passing;
// it is not GPU coverage (that is the [cuda] tests, on a machine with a GPU).
//
// $DEPOT_TEST_GPUS is the number of stand-in GPUs (default 2), each of 256 MiB with a granularity
// of 2 MiB. Not thread-safe, like every DeviceBackend.
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
  void ReleaseChunk(size_t, DeviceChunk& chunk) override;

  // Chunks created and not yet released.
  uint64_t live_chunks() const { return live_; }

 private:
  uint64_t chunks_ = 0;
  uint64_t live_ = 0;
};

}  // namespace depot::test

#endif  // DEPOT_TESTS_MEMFD_BACKEND_H_
