// DeviceSet is the GPUs the daemon pools: found at start-up through the DeviceBackend, filtered
// by the `devices` setting, each with a budget (its device_capacity) that every namespace's pool
// on that GPU draws on. Device pool n (as frames and replies number them) is devices()[n - 1];
// pool 0 is the host. A set that found none may take what a later look found (Adopt; the
// daemon looks with a DeviceWatch): at boot the GPU's kernel modules may not be loaded yet when
// the daemon starts. Once found, the set never changes, so that pool numbers and budgets stay
// put.
//
// Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_DEVICE_SET_H_
#define DEPOT_DAEMON_DEVICE_SET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/device_backend.h"
#include "daemon/location.h"

namespace depot {

struct DeviceOptions {
  DeviceBackend* backend = nullptr;  // null: this build or machine has none (unavailable says why)
  std::string unavailable;
  bool all = false;                // pool every GPU found
  std::vector<std::string> uuids;  // else only these (empty: none)
  std::string capacity;            // per GPU: bytes or a % of its memory
  uint64_t chunk_size = 0;
};

class DeviceSet {
 public:
  // Opens the GPUs to pool. When there are none (no backend, none found, none named), the set
  // is empty and unavailable() says why; InvalidArgument only for a malformed capacity.
  explicit DeviceSet(DeviceOptions options);

  DeviceSet(const DeviceSet&) = delete;
  DeviceSet& operator=(const DeviceSet&) = delete;

  size_t size() const { return devices_.size(); }
  bool empty() const { return devices_.empty(); }
  // Device pool n is device n - 1.
  const DeviceInfo& device(size_t i) const { return devices_[i].info; }
  size_t backend_index(size_t i) const { return devices_[i].backend_index; }
  PoolBudget* mutable_budget(size_t i) { return &devices_[i].budget; }
  const PoolBudget& budget(size_t i) const { return devices_[i].budget; }
  DeviceBackend& backend() const { return *options_.backend; }
  uint64_t chunk_size() const { return options_.chunk_size; }
  const std::string& unavailable() const { return options_.unavailable; }

  // "2 GPUs (cuda); pool 1: GPU-... name, capacity ...", or "unavailable (<reason>)".
  std::string Summary() const;

  // Takes the GPUs a later look of the backend found (`found`), when the set has none and could
  // have some. Returns whether it has some now; unavailable() says why not.
  bool Adopt(Result<std::vector<DeviceInfo>> found);
  // Whether a later look could give it any: false with GPUs already, without a backend, or with
  // `devices = none`.
  bool may_redetect() const {
    return devices_.empty() && options_.backend != nullptr &&
           (options_.all || !options_.uuids.empty());
  }

 private:
  struct Device {
    DeviceInfo info;
    size_t backend_index;  // in the backend's own list, which the backend's calls take
    PoolBudget budget;
  };
  Status Open(Result<std::vector<DeviceInfo>> found);

  DeviceOptions options_;
  std::vector<Device> devices_;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_DEVICE_SET_H_
