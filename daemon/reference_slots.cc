#include "daemon/reference_slots.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "daemon/shm_source.h"
#include "proto/index_layout.h"

namespace depot {

Result<std::unique_ptr<ReferenceSlots>> ReferenceSlots::Create(const std::string& name) {
  auto memory = SealedMemfd(name, index::kSlotBytes);
  if (!memory.ok()) return memory.status();
  // The layout words are written through the file: the daemon's own mapping stays read-only.
  const uint64_t words[] = {index::kSlotsLayout.magic, index::kSlotsLayout.version};
  if (::pwrite(memory->fd.get(), words, sizeof words, 0) != static_cast<ssize_t>(sizeof words)) {
    return Status::Unavailable(
        fmt::format("cannot write the reference slots' layout words: {}", std::strerror(errno)));
  }
  auto map = SharedMapping::Map(memory->fd.get(), memory->size, false, "reference slots");
  if (!map.ok()) return map.status();
  return std::unique_ptr<ReferenceSlots>(
      new ReferenceSlots(std::move(memory->fd), std::move(*map)));
}

bool ReferenceSlots::Intact() const { return layout::Intact(map_.words(), index::kSlotsLayout); }

std::span<const uint64_t> ReferenceSlots::Used() const {
  if (!Intact()) return {};
  uint64_t high = index::Load(map_.words() + index::kSlotHighWater, std::memory_order_acquire);
  return {map_.words() + index::kSlotsWord, std::min<uint64_t>(high, index::kSlotCount)};
}

uint64_t ReferenceSlots::Fingerprint() const {
  std::span<const uint64_t> used = Used();
  uint64_t h = used.size();
  for (const uint64_t& slot : used) {
    h = (h ^ index::Load(&slot, std::memory_order_relaxed)) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 32;
  }
  return h;
}

void ReferenceSlots::Collect(std::unordered_set<ObjectId>& ids) const {
  for (const uint64_t& slot : Used()) {
    if (uint64_t id = index::Load(&slot, std::memory_order_acquire); id != 0) ids.insert(id);
  }
}

void ReferenceSlots::TakeTouches(std::vector<ObjectId>& ids) {
  if (!Intact()) return;
  uint64_t count = index::Load(map_.words() + index::kTouchCount, std::memory_order_acquire);
  if (count <= touches_read_) {
    touches_read_ = count;
    return;
  }
  uint64_t from = count - std::min<uint64_t>(count - touches_read_, index::kTouchRingSize);
  for (uint64_t n = from; n < count; ++n) {
    ids.push_back(index::Load(map_.words() + index::kTouchRing + n % index::kTouchRingSize));
  }
  touches_read_ = count;
}

bool ReferenceSlots::Holds(ObjectId id) const {
  return std::ranges::any_of(Used(), [id](const uint64_t& slot) {
    return index::Load(&slot, std::memory_order_acquire) == id;
  });
}

}  // namespace depot
