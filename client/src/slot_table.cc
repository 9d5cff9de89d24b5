#include "client/src/slot_table.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <atomic>

#include "proto/index_layout.h"

namespace depot::internal {

Result<SlotTable> SlotTable::Map(const UniqueFd& fd, uint32_t count) {
  struct stat st {};
  if (count == 0 || count > index::kSlotCount || ::fstat(fd.get(), &st) != 0 ||
      !S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) < index::kSlotBytes) {
    return Status::ProtocolError(
        fmt::format("depotd's reference slots fd does not hold the {} slots it claimed", count));
  }
  auto map = SharedMapping::Map(fd.get(), index::kSlotBytes, true, "reference slots");
  if (!map.ok()) return map.status();
  if (Status words = layout::Check(map->words(), index::kSlotsLayout); !words.ok()) return words;
  return SlotTable(std::move(*map), count);
}

SlotTable::SlotTable(SharedMapping map, uint32_t count)
    : map_(std::move(map)),
      slots_(map_.words() + index::kSlotsWord),
      high_word_(map_.words() + index::kSlotHighWater),
      touches_(map_.words() + index::kTouchCount) {
  for (uint32_t i = 0; i < count; ++i) free_.insert(free_.end(), i);
  StoreHigh();
}

void SlotTable::StoreHigh() { index::Store(high_word_, high_); }

std::optional<uint32_t> SlotTable::Publish(uint64_t id) {
  uint32_t slot;
  {
    std::lock_guard lk(mu_);
    if (free_.empty()) return std::nullopt;
    slot = *free_.begin();
    free_.erase(free_.begin());
    if (slot >= high_) {
      high_ = slot + 1;
      StoreHigh();
    }
    index::Store(touches_ + 1 + touched_ % index::kTouchRingSize, id);
    index::Store(touches_, ++touched_, std::memory_order_release);
  }
  index::Store(slots_ + slot, id);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return slot;
}

void SlotTable::Clear(uint32_t slot) {
  index::Store(slots_ + slot, 0, std::memory_order_release);
  std::lock_guard lk(mu_);
  free_.insert(slot);
  uint32_t high = high_;
  while (high > 0 && free_.contains(high - 1)) --high;
  if (high == high_) return;
  high_ = high;
  StoreHigh();
}

}  // namespace depot::internal
