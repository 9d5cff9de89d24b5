#include "daemon/reference_slots.h"

#include <algorithm>

#include "daemon/shm_source.h"
#include "proto/index_layout.h"

namespace depot {

Result<std::unique_ptr<ReferenceSlots>> ReferenceSlots::Create(const std::string& name) {
  auto memory = SealedMemfd(name, index::kSlotBytes);
  if (!memory.ok()) return memory.status();
  auto map = SharedMapping::Map(memory->fd.get(), memory->size, false, "reference slots");
  if (!map.ok()) return map.status();
  return std::unique_ptr<ReferenceSlots>(
      new ReferenceSlots(std::move(memory->fd), std::move(*map)));
}

std::span<const uint64_t> ReferenceSlots::Used() const {
  uint64_t high = index::Load(map_.words() + index::kSlotHighWater, std::memory_order_acquire);
  return {map_.words(), std::min<uint64_t>(high, index::kSlotCount)};
}

void ReferenceSlots::Collect(std::unordered_set<ObjectId>& ids) const {
  for (const uint64_t& slot : Used()) {
    if (uint64_t id = index::Load(&slot, std::memory_order_acquire); id != 0) ids.insert(id);
  }
}

bool ReferenceSlots::Holds(ObjectId id) const {
  return std::ranges::any_of(Used(), [id](const uint64_t& slot) {
    return index::Load(&slot, std::memory_order_acquire) == id;
  });
}

}  // namespace depot
