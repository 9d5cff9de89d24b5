#include "daemon/namespace.h"

#include <cstring>

namespace depot {

Result<std::vector<Location>> Namespace::Allocate(std::span<const uint64_t> sizes,
                                                  std::span<const uint32_t> pools) {
  std::vector<Location> frames;
  frames.reserve(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    uint32_t pool = pools.empty() ? 0 : pools[i];
    if (sizes[i] == 0) {
      frames.push_back(Location{.pool = pool});
      continue;
    }
    auto loc = pool == 0 ? host_->Allocate(sizes[i]) : devices_[pool - 1]->Allocate(sizes[i]);
    if (!loc.ok()) {
      Free(frames);
      return loc.status();
    }
    loc->pool = pool;
    frames.push_back(*loc);
  }
  return frames;
}

void Namespace::Free(std::span<const Location> frames) {
  for (const Location& f : frames) {
    if (f.size == 0) continue;
    if (f.pool == 0) {
      host_->Free(f);
    } else {
      devices_[f.pool - 1]->Free(f);
    }
  }
}

Status Namespace::WriteInline(std::span<const Location> frames, std::span<const uint8_t> data) {
  for (const Location& f : frames) {
    if (f.size == 0) continue;
    auto base = host_->Map(f.segment);
    if (!base.ok()) return base.status();
    std::memcpy(*base + f.offset, data.data(), f.size);
    data = data.subspan(f.size);
  }
  return Status::OK();
}

SegmentRef Namespace::SegmentOf(uint32_t pool, uint32_t id) const {
  if (pool == 0) {
    const HostPool::Segment* seg = host_->segment(id);
    return {seg->fd(), seg->size, seg->dedicated};
  }
  const DevicePool::Chunk* chunk = devices_.at(pool - 1)->chunk(id);
  return {chunk->memory.fd.get(), chunk->memory.size, chunk->dedicated};
}

uint64_t Namespace::ReleaseSpares() {
  uint64_t released = host_->ReleaseSpares();
  for (auto& d : devices_) released += d->ReleaseSpares();
  return released;
}

}  // namespace depot
