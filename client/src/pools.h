// internal::Pools is what a connection knows of the daemon's pools: pool 0 is the host, and each
// device pool (as hello listed them) lives on one GPU, named by its UUID.
//
// Filled once, while connecting and before any other thread can see the connection; only read
// afterwards, so no lock.
#ifndef DEPOT_CLIENT_SRC_POOLS_H_
#define DEPOT_CLIENT_SRC_POOLS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "depot/client.h"
#include "depot/object.h"
#include "depot/status.h"
#include "proto/wire.h"

namespace depot::internal {

// The device pools a hello or status reply lists.
std::vector<DevicePoolInfo> DevicePoolsFromWire(
    const flatbuffers::Vector<flatbuffers::Offset<wire::DevicePoolInfo>>* pools);

class Pools {
 public:
  // Records the device pools of a hello reply, and the daemon's reason when it has none.
  void Set(std::vector<DevicePoolInfo> devices, std::string devices_unavailable);

  // The daemon's device pools; Unavailable with the daemon's reason when none.
  Result<std::vector<DevicePoolInfo>> Devices() const;
  // The pool number of a place: 0 for the host. Unavailable or InvalidArgument when there is no
  // pool on that GPU.
  Result<uint32_t> PoolOf(const Place& place) const;
  // Where a frame of pool `pool` lives.
  Place PlaceOf(uint32_t pool) const;
  // Where each of `frames` lives; empty when every frame is on the host.
  std::vector<Place> Places(const flatbuffers::Vector<const wire::FrameLocation*>* frames) const;
  // Whether `pool` is a device pool on a CUDA GPU (its chunks are imported with CUDA; every
  // other segment is a plain mapping).
  bool IsCuda(uint32_t pool) const;

 private:
  std::vector<DevicePoolInfo> devices_;
  std::string devices_unavailable_;
};

}  // namespace depot::internal

#endif  // DEPOT_CLIENT_SRC_POOLS_H_
