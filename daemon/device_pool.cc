#include "daemon/device_pool.h"

#include <fmt/format.h>

#include "depot/units.h"

namespace depot {
namespace {

constexpr uint64_t kAlignment = 256;

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

}  // namespace

DevicePool::DevicePool(DeviceBackend& backend, size_t device, const DeviceInfo& info,
                       uint64_t chunk_size, PoolBudget* budget, RetireFn on_retire)
    : backend_(backend),
      device_(device),
      granularity_(std::max<uint64_t>(info.granularity, kAlignment)),
      chunk_size_(RoundUp(chunk_size, granularity_)),
      budget_(budget),
      on_retire_(std::move(on_retire)) {}

DevicePool::~DevicePool() {
  budget_->reserved -= reserved_;
  for (auto& [id, c] : chunks_) backend_.ReleaseChunk(device_, c.memory);
}

Result<Location> DevicePool::Allocate(uint64_t size) {
  auto full = [&](std::string_view why) {
    return Status::StoreFull(fmt::format("cannot allocate {} on the GPU: {} ({} of {} reserved)",
                                         FormatBytes(size), why, FormatBytes(budget_->reserved),
                                         FormatBytes(budget_->capacity)));
  };
  if (size == 0) return Status::InvalidArgument("cannot allocate 0 bytes");
  bool dedicated = size > chunk_size_ / 2;
  if (!dedicated) {
    for (auto& [id, c] : chunks_) {
      if (c.dedicated) continue;
      if (auto offset = c.allocator.Allocate(size)) return Location{.segment = id, .offset = *offset, .size = size};
    }
  }
  uint64_t bytes = dedicated ? RoundUp(size, granularity_) : chunk_size_;
  if (bytes > budget_->capacity - budget_->reserved) return full("the device pool is full");
  auto memory = backend_.CreateChunk(device_, bytes);
  if (!memory.ok()) return memory.status();
  uint32_t id = next_id_++;
  reserved_ += bytes;
  budget_->reserved += bytes;
  Chunk& c = chunks_.emplace(id, Chunk{id, std::move(*memory), dedicated, Allocator(bytes, kAlignment)})
                 .first->second;
  return Location{.segment = id, .offset = *c.allocator.Allocate(size), .size = size};
}

void DevicePool::Free(const Location& location) {
  auto it = chunks_.find(location.segment);
  if (it == chunks_.end() || !it->second.allocator.Free(location.offset, location.size)) return;
  if (!it->second.allocator.empty()) return;
  if (!it->second.dedicated) {
    // Keep one empty shared chunk: creating one is slow.
    for (auto& [id, other] : chunks_) {
      if (id != it->first && !other.dedicated && other.allocator.empty()) return Retire(it);
    }
    return;
  }
  Retire(it);
}

uint64_t DevicePool::ReleaseSpares() {
  uint64_t released = 0;
  for (auto it = chunks_.begin(); it != chunks_.end();) {
    auto next = std::next(it);
    if (!it->second.dedicated && it->second.allocator.empty()) {
      released += it->second.memory.size;
      Retire(it);
    }
    it = next;
  }
  return released;
}

void DevicePool::Retire(std::map<uint32_t, Chunk>::iterator it) {
  uint32_t id = it->first;
  reserved_ -= it->second.memory.size;
  budget_->reserved -= it->second.memory.size;
  backend_.ReleaseChunk(device_, it->second.memory);
  chunks_.erase(it);
  if (on_retire_) on_retire_(id);
}

const DevicePool::Chunk* DevicePool::chunk(uint32_t id) const {
  auto it = chunks_.find(id);
  return it == chunks_.end() ? nullptr : &it->second;
}

DevicePool::Stats DevicePool::stats() const {
  Stats s;
  s.reserved = reserved_;
  s.chunks = static_cast<uint32_t>(chunks_.size());
  for (const auto& [id, c] : chunks_) s.used += c.allocator.used();
  return s;
}

}  // namespace depot
