#include "daemon/reference_slots.h"

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

void ReferenceSlots::Collect(std::unordered_set<ObjectId>& ids) const {
  for (uint32_t i = 0; i < index::kSlotCount; ++i) {
    if (uint64_t id = index::Load(map_.words() + i, std::memory_order_acquire); id != 0) {
      ids.insert(id);
    }
  }
}

bool ReferenceSlots::Holds(ObjectId id) const {
  for (uint32_t i = 0; i < index::kSlotCount; ++i) {
    if (index::Load(map_.words() + i, std::memory_order_acquire) == id) return true;
  }
  return false;
}

}  // namespace depot
