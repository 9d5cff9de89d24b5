// DeviceSource makes a device pool's segments: chunks of one GPU's memory from the DeviceBackend,
// each exported as an fd that clients import. Creating a chunk is slow, so its pool keeps a spare.
//
// Not thread-safe: the daemon's single loop owns it, through its pool.
#ifndef DEPOT_DAEMON_DEVICE_SOURCE_H_
#define DEPOT_DAEMON_DEVICE_SOURCE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/device_backend.h"
#include "daemon/segment_source.h"

namespace depot {

class DeviceSource : public SegmentSource {
 public:
  // Of every device frame: what cudaMalloc guarantees, so kernels may assume it too.
  static constexpr uint64_t kAlignment = 256;

  // Chunks of device `index` of backend.Devices(), described by `info`. `backend` outlives this.
  DeviceSource(DeviceBackend& backend, size_t index, const DeviceInfo& info)
      : backend_(backend), index_(index), uuid_(info.uuid), granularity_(info.granularity) {}

  Result<SegmentMemory> Create(uint32_t id, uint64_t size) override;
  Result<SegmentMemory> Adopt(UniqueFd fd, uint64_t size, std::string name) override;
  void Release(SegmentMemory& memory) override;
  uint64_t granularity() const override { return granularity_; }
  std::string_view describe() const override { return "on the GPU"; }

 private:
  DeviceBackend& backend_;
  size_t index_;
  std::string uuid_;
  uint64_t granularity_;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_DEVICE_SOURCE_H_
