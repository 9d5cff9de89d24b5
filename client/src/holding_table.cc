#include "client/src/holding_table.h"

#include <bit>
#include <utility>

namespace depot::internal {
namespace {

uint64_t Mix(uint64_t x) {  // MurmurHash3's finalizer
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

}  // namespace

HoldingTable::HoldingTable() : slots_(kMinSlots), key_(Guid::Random().hi) {}

size_t HoldingTable::Home(const Guid& guid) const {
  // Keyed before `lo` joins in: GUIDs whose halves differ cannot be made to agree on a home
  // without the key.
  return Mix(Mix(guid.hi ^ key_) ^ guid.lo) & (slots_.size() - 1);
}

size_t HoldingTable::Seek(const Guid& guid) const {
  size_t mask = slots_.size() - 1;
  size_t i = Home(guid);
  while (slots_[i].raw != nullptr && slots_[i].guid != guid) i = (i + 1) & mask;
  return i;
}

const HoldingTable::Entry* HoldingTable::Find(const Guid& guid) const {
  const Entry& e = slots_[Seek(guid)];
  return e.raw != nullptr ? &e : nullptr;
}

std::weak_ptr<Holding> HoldingTable::Put(const Guid& guid, const std::shared_ptr<Holding>& h) {
  Reserve(size_ + 1);
  Entry& e = slots_[Seek(guid)];
  if (e.raw == nullptr) ++size_;
  std::weak_ptr<Holding> displaced;
  if (e.raw != nullptr && e.raw != h.get()) displaced = std::move(e.holding);
  e = Entry{guid, h, h.get()};
  return displaced;
}

bool HoldingTable::Erase(const Guid& guid, const Holding* only) {
  size_t mask = slots_.size() - 1;
  size_t i = Seek(guid);
  if (slots_[i].raw == nullptr || (only != nullptr && slots_[i].raw != only)) return false;
  // Backward shift: each later entry of the run that may sit at `i` (its home is not in
  // (i, j] cyclically) moves there, so that no search stops early at the hole.
  for (size_t j = (i + 1) & mask; slots_[j].raw != nullptr; j = (j + 1) & mask) {
    size_t home = Home(slots_[j].guid);
    bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
    if (stays) continue;
    slots_[i] = std::move(slots_[j]);
    i = j;
  }
  slots_[i] = Entry{};
  --size_;
  // A process that let go of most of what it held gives the table's memory back, down to
  // kKeptSlots (see there).
  if (slots_.size() > kKeptSlots && size_ * 8 < slots_.size()) Rehash(slots_.size() / 2);
  return true;
}

void HoldingTable::Reserve(size_t n) {
  if (n * 2 > slots_.size()) Rehash(std::bit_ceil(n * 2));
}

void HoldingTable::Rehash(size_t slots) {
  std::vector<Entry> old = std::exchange(slots_, std::vector<Entry>(slots));
  for (Entry& e : old) {
    if (e.raw != nullptr) slots_[Seek(e.guid)] = std::move(e);
  }
}

}  // namespace depot::internal
