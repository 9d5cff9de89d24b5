#include "daemon/reference_slots.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "daemon/shm_source.h"
#include "proto/index_layout.h"

namespace depot {

Result<std::unique_ptr<ReferenceSlots>> ReferenceSlots::Create(const std::string& name) {
  auto memory = SealedMemfd(name, index::SlotFileBytes(index::kMaxSlots), index::kSlotBytes);
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

Status ReferenceSlots::Grant(uint32_t count) {
  count = std::min(count, index::kMaxSlots);
  if (count <= granted_) return Status::OK();
  // Reserved before the client may write there or the daemon read there: a page of a hole would
  // be allocated by the fault, which may fail (SIGBUS) when memory is short.
  if (int err = ::posix_fallocate(fd_.get(), 0, static_cast<off_t>(index::SlotFileBytes(count)));
      err != 0) {
    return Status::StoreFull(
        fmt::format("cannot reserve {} reference slots: {}", count, std::strerror(err)));
  }
  granted_ = count;
  return Status::OK();
}

std::array<std::span<const uint64_t>, 2> ReferenceSlots::Used() const {
  if (!Intact()) return {};
  uint64_t high = index::Load(map_.words() + index::kSlotHighWater, std::memory_order_acquire);
  high = std::min<uint64_t>(high, granted_);
  uint64_t first = std::min<uint64_t>(high, index::kSlotCount);
  return {std::span<const uint64_t>(map_.words() + index::kSlotsWord, first),
          std::span<const uint64_t>(map_.words() + index::kMoreSlotsWord, high - first)};
}

uint64_t ReferenceSlots::Fingerprint() const {
  auto used = Used();
  uint64_t h = used[0].size() + used[1].size();
  ForEach([&](uint64_t id) {
    h = (h ^ id) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 32;
  });
  return h;
}

void ReferenceSlots::Collect(std::unordered_set<ObjectId>& ids) const {
  ForEach([&](uint64_t id) { ids.insert(id); });
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
  return std::ranges::any_of(Used(), [id](std::span<const uint64_t> used) {
    return std::ranges::any_of(used, [id](const uint64_t& slot) {
      return index::Load(&slot, std::memory_order_acquire) == id;
    });
  });
}

}  // namespace depot
