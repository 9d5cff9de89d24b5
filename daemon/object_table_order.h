// GuidOrder keeps slots (32-bit record numbers of ObjectTable) in the order of the GUIDs their
// records hold, so that a listing resumes after any GUID with a seek instead of a walk: a sorted
// run of leaves, each a sorted array of up to kLeafMax slots, under a sorted array of the leaves'
// lower bounds. About 6 bytes per object (a std::map<Guid, ObjectId> costs 64); an insert or
// erase costs two binary searches and a move of at most a leaf, plus, when a leaf splits or
// goes, a move of the leaf array (one entry per ~kLeafMax/2 objects).
//
// The GUIDs live in the records: `KeyOf` gives the GUID of a slot, and every compare inside a
// leaf reads it. A slot must be erased before its record's GUID changes.
//
// Invariants (Check verifies them, for tests): the leaves are non-empty, each sorted strictly by
// GUID; leaf i's slots all lie in [bound(i), bound(i+1)) (a bound is a lower bound: it may be a
// GUID since erased); no two neighbouring leaves together hold kLeafMax/4 slots or fewer, so the
// leaves stay at least about a quarter full on average. Not thread-safe: the daemon's loop owns
// it.
#ifndef DEPOT_DAEMON_OBJECT_TABLE_ORDER_H_
#define DEPOT_DAEMON_OBJECT_TABLE_ORDER_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "depot/guid.h"

namespace depot {

// KeyOf: a callable, `const Guid&(uint32_t slot)`, valid for every slot while it is present.
template <class KeyOf>
class GuidOrder {
 public:
  static constexpr size_t kLeafMax = 256;

  explicit GuidOrder(KeyOf key_of) : key_of_(std::move(key_of)) {}

  size_t size() const { return size_; }
  size_t leaves() const { return leaves_.size(); }

  // Adds `slot`, whose GUID no slot present has.
  void Insert(uint32_t slot) {
    const Guid& key = key_of_(slot);
    ++size_;
    if (leaves_.empty()) {
      leaves_.push_back({key, {slot}});
      return;
    }
    size_t l = LeafOf(key);
    Leaf& leaf = leaves_[l];
    if (key < leaf.bound) leaf.bound = key;  // only leaf 0 can be below its bound
    leaf.slots.insert(leaf.slots.begin() + static_cast<ptrdiff_t>(LowerBound(leaf, key)), slot);
    if (leaf.slots.size() <= kLeafMax) return;
    // Split in half: the right half's first GUID bounds it.
    std::vector<uint32_t> right(leaf.slots.begin() + kLeafMax / 2, leaf.slots.end());
    leaf.slots.resize(kLeafMax / 2);
    leaf.slots.shrink_to_fit();
    Guid bound = key_of_(right.front());
    leaves_.insert(leaves_.begin() + static_cast<ptrdiff_t>(l + 1), Leaf{bound, std::move(right)});
  }

  // Removes `slot` (present; its GUID still readable through KeyOf). False when it is not there.
  bool Erase(uint32_t slot) {
    if (leaves_.empty()) return false;
    const Guid& key = key_of_(slot);
    size_t l = LeafOf(key);
    Leaf& leaf = leaves_[l];
    size_t i = LowerBound(leaf, key);
    if (i == leaf.slots.size() || leaf.slots[i] != slot) return false;
    leaf.slots.erase(leaf.slots.begin() + static_cast<ptrdiff_t>(i));
    --size_;
    if (leaf.slots.empty()) {
      leaves_.erase(leaves_.begin() + static_cast<ptrdiff_t>(l));
      return true;
    }
    if (leaf.slots.size() * 4 < leaf.slots.capacity()) leaf.slots.shrink_to_fit();
    // Merge with a neighbour, the next one first, when both fit in a quarter leaf: bounds the
    // leaves kept nearly empty. The left one keeps its bound; the right one's range joins it.
    if (!MergeWithNext(l) && l > 0) MergeWithNext(l - 1);
    return true;
  }

  // Calls fn(slot) for the slots whose GUIDs follow `after` (all of them for nullopt), in GUID
  // order, while fn returns true.
  template <class Fn>
  void ForEachAfter(const std::optional<Guid>& after, Fn fn) const {
    if (leaves_.empty()) return;
    size_t l = 0;
    size_t i = 0;
    if (after) {
      l = LeafOf(*after);
      const Leaf& leaf = leaves_[l];
      i = static_cast<size_t>(
          std::upper_bound(leaf.slots.begin(), leaf.slots.end(), *after,
                           [this](const Guid& g, uint32_t s) { return g < key_of_(s); }) -
          leaf.slots.begin());
    }
    for (; l < leaves_.size(); ++l, i = 0) {
      for (; i < leaves_[l].slots.size(); ++i) {
        if (!fn(leaves_[l].slots[i])) return;
      }
    }
  }

  // Whether every invariant of the class comment holds (for tests: walks everything).
  bool Check() const {
    size_t n = 0;
    for (size_t l = 0; l < leaves_.size(); ++l) {
      const Leaf& leaf = leaves_[l];
      if (leaf.slots.empty() || leaf.slots.size() > kLeafMax) return false;
      if (l + 1 < leaves_.size()) {
        if (!(leaf.bound < leaves_[l + 1].bound)) return false;
        if (!(key_of_(leaf.slots.back()) < leaves_[l + 1].bound)) return false;
        if (leaf.slots.size() + leaves_[l + 1].slots.size() <= kLeafMax / 4) return false;
      }
      if (key_of_(leaf.slots.front()) < leaf.bound) return false;
      for (size_t i = 1; i < leaf.slots.size(); ++i) {
        if (!(key_of_(leaf.slots[i - 1]) < key_of_(leaf.slots[i]))) return false;
      }
      n += leaf.slots.size();
    }
    return n == size_;
  }

 private:
  struct Leaf {
    Guid bound;  // no slot of this leaf is below it; every slot of the leaf before is
    std::vector<uint32_t> slots;
  };

  // Merges leaf l + 1 into leaf l when together they hold kLeafMax / 4 slots or fewer.
  bool MergeWithNext(size_t l) {
    if (l + 1 >= leaves_.size()) return false;
    std::vector<uint32_t>& a = leaves_[l].slots;
    const std::vector<uint32_t>& b = leaves_[l + 1].slots;
    if (a.size() + b.size() > kLeafMax / 4) return false;
    a.insert(a.end(), b.begin(), b.end());
    leaves_.erase(leaves_.begin() + static_cast<ptrdiff_t>(l + 1));
    return true;
  }

  // The leaf whose range holds `key`: the last whose bound is not above it, or the first.
  size_t LeafOf(const Guid& key) const {
    auto it = std::upper_bound(leaves_.begin(), leaves_.end(), key,
                               [](const Guid& g, const Leaf& leaf) { return g < leaf.bound; });
    return it == leaves_.begin() ? 0 : static_cast<size_t>(it - leaves_.begin()) - 1;
  }
  size_t LowerBound(const Leaf& leaf, const Guid& key) const {
    return static_cast<size_t>(
        std::lower_bound(leaf.slots.begin(), leaf.slots.end(), key,
                         [this](uint32_t s, const Guid& g) { return key_of_(s) < g; }) -
        leaf.slots.begin());
  }

  KeyOf key_of_;
  std::vector<Leaf> leaves_;
  size_t size_ = 0;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_OBJECT_TABLE_ORDER_H_
