#include "client/src/pools.h"

#include <fmt/format.h>

#include <algorithm>

namespace depot::internal {

std::vector<DevicePoolInfo> DevicePoolsFromWire(
    const flatbuffers::Vector<flatbuffers::Offset<wire::DevicePoolInfo>>* pools) {
  std::vector<DevicePoolInfo> out;
  if (pools == nullptr) return out;
  auto str = [](const flatbuffers::String* s) { return s ? s->str() : std::string(); };
  for (const wire::DevicePoolInfo* p : *pools) {
    out.push_back({p->pool(), str(p->uuid()), str(p->name()), str(p->kind()), p->capacity(),
                   p->chunk_size(), p->reserved(), p->used(), p->chunks(), p->retired_held()});
  }
  return out;
}

void Pools::Set(std::vector<DevicePoolInfo> devices, std::string devices_unavailable) {
  devices_ = std::move(devices);
  devices_unavailable_ = std::move(devices_unavailable);
}

Result<std::vector<DevicePoolInfo>> Pools::Devices() const {
  if (devices_.empty()) {
    return Status::Unavailable(fmt::format("device pools: unavailable ({})", devices_unavailable_));
  }
  return devices_;
}

Result<uint32_t> Pools::PoolOf(const Place& place) const {
  if (place.host()) return 0u;
  for (const DevicePoolInfo& p : devices_) {
    if (p.uuid == place.gpu) return p.pool;
  }
  if (auto pools = Devices(); !pools.ok()) return pools.status();
  return Status::InvalidArgument(fmt::format("depotd has no device pool on {}", place.gpu));
}

Place Pools::PlaceOf(uint32_t pool) const {
  for (const DevicePoolInfo& p : devices_) {
    if (p.pool == pool) return Place::Gpu(p.uuid);
  }
  return Place::Host();
}

std::vector<Place> Pools::Places(
    const flatbuffers::Vector<const wire::FrameLocation*>* frames) const {
  std::vector<Place> places;
  if (frames == nullptr) return places;
  bool device = std::any_of(frames->begin(), frames->end(),
                            [](const wire::FrameLocation* f) { return f->pool() != 0; });
  if (!device) return places;  // empty: every frame on the host
  for (const wire::FrameLocation* f : *frames) places.push_back(PlaceOf(f->pool()));
  return places;
}

bool Pools::IsCuda(uint32_t pool) const {
  for (const DevicePoolInfo& p : devices_) {
    if (p.pool == pool) return p.kind == "cuda";
  }
  return false;
}

}  // namespace depot::internal
