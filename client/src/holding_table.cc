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

HoldingTable::HoldingTable() : slots_(kMinSlots), tags_(kMinSlots), key_(Guid::Random().hi) {}

uint64_t HoldingTable::Hash(const Guid& guid) const {
  // Keyed before `lo` joins in: GUIDs whose halves differ cannot be made to agree on a home
  // without the key.
  return Mix(Mix(guid.hi ^ key_) ^ guid.lo);
}

size_t HoldingTable::Seek(const Guid& guid, uint64_t hash) const {
  size_t mask = slots_.size() - 1;
  uint8_t tag = TagOf(hash);
  size_t i = hash & mask;
  while (tags_[i] != 0 && (tags_[i] != tag || slots_[i].guid != guid)) i = (i + 1) & mask;
  return i;
}

const HoldingTable::Entry* HoldingTable::Find(const Guid& guid) const {
  size_t i = Seek(guid, Hash(guid));
  return tags_[i] != 0 ? &slots_[i] : nullptr;
}

std::weak_ptr<Holding> HoldingTable::Put(const Guid& guid, std::weak_ptr<Holding> holding,
                                         const Holding* raw) {
  Reserve(size_ + 1);
  uint64_t hash = Hash(guid);
  size_t i = Seek(guid, hash);
  Entry& e = slots_[i];
  std::weak_ptr<Holding> displaced;
  if (tags_[i] == 0) {
    // A free slot's entry is empty (Entry{}): written over without being read, so that the
    // write need not wait for its line (storage reuse without a destructor call is allowed, and
    // an empty weak_ptr's would do nothing).
    std::construct_at(&e, Entry{guid, std::move(holding), raw});
    tags_[i] = TagOf(hash);
    ++size_;
    return displaced;
  }
  if (e.raw != raw) displaced = std::move(e.holding);
  e = Entry{guid, std::move(holding), raw};
  return displaced;
}

bool HoldingTable::Erase(const Guid& guid, const Holding* only) {
  size_t mask = slots_.size() - 1;
  size_t i = Seek(guid, Hash(guid));
  if (tags_[i] == 0 || (only != nullptr && slots_[i].raw != only)) return false;
  // Backward shift: each later entry of the run that may sit at `i` (its home is not in
  // (i, j] cyclically) moves there, so that no search stops early at the hole.
  for (size_t j = (i + 1) & mask; tags_[j] != 0; j = (j + 1) & mask) {
    size_t home = Home(slots_[j].guid);
    bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
    if (stays) continue;
    slots_[i] = std::move(slots_[j]);
    tags_[i] = tags_[j];
    i = j;
  }
  slots_[i] = Entry{};
  tags_[i] = 0;
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
  tags_.assign(slots, 0);
  for (Entry& e : old) {
    if (e.raw == nullptr) continue;
    uint64_t hash = Hash(e.guid);
    size_t i = Seek(e.guid, hash);
    tags_[i] = TagOf(hash);
    slots_[i] = std::move(e);
  }
}

}  // namespace depot::internal
