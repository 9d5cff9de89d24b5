#include "daemon/device_set.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "depot/units.h"

namespace depot {

DeviceSet::DeviceSet(DeviceOptions options) : options_(std::move(options)) {
  if (Status st = Open(); !st.ok()) {
    devices_.clear();
    options_.unavailable = st.message();
  }
}

Status DeviceSet::Open() {
  if (!options_.all && options_.uuids.empty()) return Status::Unavailable("devices = none");
  if (options_.backend == nullptr) return Status::Unavailable(options_.unavailable);
  auto found = options_.backend->Devices();
  if (!found.ok()) return found.status();
  for (size_t i = 0; i < found->size(); ++i) {
    const DeviceInfo& d = (*found)[i];
    if (!options_.all &&
        std::find(options_.uuids.begin(), options_.uuids.end(), d.uuid) == options_.uuids.end()) {
      continue;
    }
    auto capacity = ParseSize(options_.capacity, d.memory);
    if (!capacity) {
      return Status::InvalidArgument(
          fmt::format("device_capacity {} is not a size", options_.capacity));
    }
    uint64_t granularity = std::max<uint64_t>(d.granularity, 1);
    devices_.push_back({d, i, {std::min(*capacity, d.memory) / granularity * granularity, 0}});
  }
  if (devices_.empty()) {
    return Status::Unavailable(fmt::format("none of the GPUs named in devices ({}) is here",
                                           fmt::join(options_.uuids, ",")));
  }
  return Status::OK();
}

bool DeviceSet::Redetect() {
  if (!may_redetect()) return !devices_.empty();
  if (Status st = Open(); !st.ok()) {
    devices_.clear();
    options_.unavailable = st.message();
    return false;
  }
  options_.unavailable.clear();
  return true;
}

std::string DeviceSet::Summary() const {
  if (devices_.empty()) return fmt::format("unavailable ({})", options_.unavailable);
  std::string out = fmt::format("{} GPU{} ({})", devices_.size(), devices_.size() == 1 ? "" : "s",
                                options_.backend->kind());
  for (size_t i = 0; i < devices_.size(); ++i) {
    const DeviceInfo& d = devices_[i].info;
    out += fmt::format("; pool {}: {} {}, capacity {}{}{}", i + 1, d.uuid, d.name,
                       FormatBytes(devices_[i].budget.capacity), d.caveat.empty() ? "" : ", ",
                       d.caveat);
  }
  return out;
}

}  // namespace depot
