#include "client/src/slot_table.h"

#include <sys/stat.h>

#include <atomic>

#include <fmt/format.h>

#include "proto/index_layout.h"

namespace depot::internal {

Result<SlotTable> SlotTable::Map(const UniqueFd& fd, uint32_t count) {
  struct stat st {};
  uint64_t size = uint64_t{count} * 8;
  if (count == 0 || count > index::kSlotCount || ::fstat(fd.get(), &st) != 0 ||
      !S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) < size) {
    return Status::ProtocolError(
        fmt::format("depotd's reference slots fd does not hold the {} slots it claimed", count));
  }
  auto map = SharedMapping::Map(fd.get(), size, true, "reference slots");
  if (!map.ok()) return map.status();
  return SlotTable(std::move(*map));
}

SlotTable::SlotTable(SharedMapping map) : map_(std::move(map)) {
  size_t count = map_.size() / 8;
  free_.reserve(count);
  for (size_t i = count; i > 0; --i) free_.push_back(static_cast<uint32_t>(i - 1));
}

std::optional<uint32_t> SlotTable::Publish(uint64_t id) {
  uint32_t slot;
  {
    std::lock_guard lk(mu_);
    if (free_.empty()) return std::nullopt;
    slot = free_.back();
    free_.pop_back();
  }
  index::Store(map_.words() + slot, id);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return slot;
}

void SlotTable::Clear(uint32_t slot) {
  index::Store(map_.words() + slot, 0, std::memory_order_release);
  std::lock_guard lk(mu_);
  free_.push_back(slot);
}

}  // namespace depot::internal
