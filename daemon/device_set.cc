#include "daemon/device_set.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "depot/units.h"

namespace depot {

DeviceSet::DeviceSet(DeviceOptions options) : options_(std::move(options)) {
  Status st = !options_.all && options_.uuids.empty() ? Status::Unavailable("devices = none")
              : options_.backend == nullptr           ? Status::Unavailable(options_.unavailable)
                                                      : Open(options_.backend->Devices());
  if (!st.ok()) {
    devices_.clear();
    options_.unavailable = st.message();
  }
}

Status DeviceSet::Open(Result<std::vector<DeviceInfo>> found) {
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
  std::vector<std::string> missing;
  for (const std::string& uuid : options_.uuids) {
    if (std::none_of(found->begin(), found->end(),
                     [&](const DeviceInfo& d) { return d.uuid == uuid; })) {
      missing.push_back(uuid);
    }
  }
  // A CUDA process enumerates one MIG instance only (the first it is given): a daemon cannot
  // pool several, and one that is not the first is never found.
  bool mig = std::any_of(missing.begin(), missing.end(),
                         [](const std::string& uuid) { return uuid.rfind("MIG-", 0) == 0; });
  std::string why = fmt::format("{} named in devices {} not here{}", fmt::join(missing, ","),
                                missing.size() == 1 ? "is" : "are",
                                mig ? " (a CUDA process sees only one MIG instance: the first "
                                      "that CUDA_VISIBLE_DEVICES names)"
                                    : "");
  if (devices_.empty()) return Status::Unavailable(why);
  if (!missing.empty()) spdlog::warn("device pools: {}", why);
  return Status::OK();
}

bool DeviceSet::Adopt(Result<std::vector<DeviceInfo>> found) {
  if (!may_redetect()) return !devices_.empty();
  if (Status st = Open(std::move(found)); !st.ok()) {
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
