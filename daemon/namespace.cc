#include "daemon/namespace.h"

#include <cstring>

namespace depot {

Result<std::vector<Location>> Namespace::Allocate(std::span<const uint64_t> sizes,
                                                  std::span<const uint32_t> pools, uint32_t owner) {
  std::vector<Location> frames;
  frames.reserve(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    uint32_t pool = pools.empty() ? 0 : pools[i];
    if (sizes[i] == 0) {
      frames.push_back(Location{.pool = pool});
      continue;
    }
    auto loc = pools_[pool]->Allocate(sizes[i], owner);
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
    if (f.size > 0) pools_[f.pool]->Free(f);
  }
}

Status Namespace::WriteInline(std::span<const Location> frames, std::span<const uint8_t> data) {
  for (const Location& f : frames) {
    if (f.size == 0) continue;
    auto base = pools_[0]->Map(f.segment);
    if (!base.ok()) return base.status();
    std::memcpy(*base + f.offset, data.data(), f.size);
    data = data.subspan(f.size);
  }
  return Status::OK();
}

Result<std::span<uint8_t>> Namespace::HostBytes(const Location& frame) {
  if (frame.size == 0) return std::span<uint8_t>();
  auto base = pools_[0]->Map(frame.segment);
  if (!base.ok()) return base.status();
  return std::span<uint8_t>(*base + frame.offset, frame.size);
}

SegmentRef Namespace::SegmentOf(uint32_t pool, uint32_t id) const {
  const SegmentedPool::Segment* seg = pools_.at(pool)->segment(id);
  return {seg->fd(), seg->read_only_fd(), seg->size(), seg->dedicated};
}

uint64_t Namespace::ReleaseSpares() {
  uint64_t released = 0;
  for (auto& pool : pools_) released += pool->ReleaseSpares();
  return released;
}

}  // namespace depot
