// One GPU's device pool, as the daemon reports it at hello and in its status.
#ifndef DEPOT_DEVICE_POOL_INFO_H_
#define DEPOT_DEVICE_POOL_INFO_H_

#include <cstdint>
#include <string>

namespace depot {

// One GPU's device pool.
struct DevicePoolInfo {
  uint32_t pool = 0;  // as in FrameInfo::pool
  std::string uuid;
  std::string name;
  std::string kind;  // how chunks are shared: "cuda" (a test build may show "memfd-test")
  uint64_t capacity = 0;
  uint64_t chunk_size = 0;
  uint64_t reserved = 0;  // bytes in chunks
  uint64_t used = 0;      // bytes allocated to frames
  uint32_t chunks = 0;
  uint64_t retired_held = 0;  // bytes of retired chunks clients still map (part of reserved)

  bool operator==(const DevicePoolInfo&) const = default;
};

}  // namespace depot

#endif  // DEPOT_DEVICE_POOL_INFO_H_
