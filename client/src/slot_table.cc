#include "client/src/slot_table.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <atomic>
#include <bit>

namespace depot::internal {
namespace {

constexpr uint64_t kAll = ~uint64_t{0};

}  // namespace

Result<SlotTable> SlotTable::Map(const UniqueFd& fd, uint32_t count) {
  struct stat st {};
  bool file = ::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode);
  auto size = file ? static_cast<uint64_t>(st.st_size) : 0;
  // A daemon that grants no more than the first slots makes the file only that big.
  uint32_t capacity = size >= index::SlotFileBytes(index::kMaxSlots) ? index::kMaxSlots
                      : size >= index::kSlotBytes                    ? index::kSlotCount
                                                                     : 0;
  if (count == 0 || count > capacity) {
    return Status::ProtocolError(
        fmt::format("depotd's reference slots fd does not hold the {} slots it claimed", count));
  }
  auto map = SharedMapping::Map(fd.get(), index::SlotFileBytes(capacity), true, "reference slots");
  if (!map.ok()) return map.status();
  if (Status words = layout::Check(map->words(), index::kSlotsLayout); !words.ok()) return words;
  return SlotTable(std::move(*map), capacity, count);
}

SlotTable::SlotTable(SharedMapping map, uint32_t capacity, uint32_t count)
    : map_(std::move(map)),
      base_(map_.words()),
      capacity_(capacity),
      count_(0),
      used_((capacity + 63) / 64, kAll),
      full_((used_.size() + 63) / 64, kAll) {
  Grow(count);
  StoreHigh();
}

uint32_t SlotTable::count() const {
  std::lock_guard lk(mu_);
  return count_;
}

bool SlotTable::HasFree() const {
  std::lock_guard lk(mu_);
  for (size_t k = first_open_; k < full_.size(); ++k) {
    if (full_[k] != kAll) return true;
  }
  return false;
}

void SlotTable::Grow(uint32_t count) {
  std::lock_guard lk(mu_);
  count = std::min(count, capacity_);
  for (uint32_t n = count_; n < count; ++n) MarkUsed(n, false);
  count_ = std::max(count_, count);
}

void SlotTable::MarkUsed(uint32_t n, bool used) {
  uint64_t bit = uint64_t{1} << (n % 64);
  uint64_t& word = used_[n / 64];
  word = used ? word | bit : word & ~bit;
  uint64_t summary = uint64_t{1} << (n / 64 % 64);
  uint64_t& full = full_[n / 64 / 64];
  full = word == kAll ? full | summary : full & ~summary;
  if (!used) first_open_ = std::min<size_t>(first_open_, n / 64 / 64);
}

void SlotTable::StoreHigh() { index::Store(base_ + index::kSlotHighWater, high_); }

bool SlotTable::Claim(uint64_t id, uint32_t& claimed) {
  while (first_open_ < full_.size() && full_[first_open_] == kAll) ++first_open_;
  if (first_open_ == full_.size()) return false;
  size_t k = first_open_ * 64 + static_cast<size_t>(std::countr_one(full_[first_open_]));
  auto slot = static_cast<uint32_t>(k * 64 + static_cast<size_t>(std::countr_one(used_[k])));
  MarkUsed(slot, true);
  if (slot >= high_) {
    high_ = slot + 1;
    StoreHigh();
  }
  uint64_t* touches = base_ + index::kTouchCount;
  index::Store(touches + 1 + touched_ % index::kTouchRingSize, id);
  index::Store(touches, ++touched_, std::memory_order_release);
  claimed = slot;
  return true;
}

std::optional<uint32_t> SlotTable::Publish(uint64_t id) {
  uint32_t slot = 0;
  {
    std::lock_guard lk(mu_);
    if (!Claim(id, slot)) return std::nullopt;
  }
  index::Store(Slot(slot), id);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return slot;
}

size_t SlotTable::PublishMany(std::span<const uint64_t> ids, std::span<uint32_t> slots) {
  size_t n = 0;
  {
    std::lock_guard lk(mu_);
    while (n < ids.size() && Claim(ids[n], slots[n])) ++n;
  }
  for (size_t k = 0; k < n; ++k) index::Store(Slot(slots[k]), ids[k]);
  // One fence orders every slot written above before the caller's re-reads of the entries.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return n;
}

void SlotTable::Clear(uint32_t slot) {
  index::Store(Slot(slot), 0, std::memory_order_release);
  std::lock_guard lk(mu_);
  MarkUsed(slot, false);
  if (slot + 1 != high_) return;
  // The highest slot in use below: the top ones are free now.
  uint32_t high = slot;
  while (high > 0) {
    uint64_t word = used_[(high - 1) / 64] & (kAll >> (63 - (high - 1) % 64));
    if (word != 0) {
      high = static_cast<uint32_t>((high - 1) / 64 * 64 + 64 - std::countl_zero(word));
      break;
    }
    high = (high - 1) / 64 * 64;
  }
  high_ = high;
  StoreHigh();
}

}  // namespace depot::internal
