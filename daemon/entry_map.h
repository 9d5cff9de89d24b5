// EntryMap says which entry of a shared index (ObjectIndex) holds each indexed object: 4 bytes an
// object where ObjectIds are dense in their low 32 bits, as ObjectTable's are (its record
// numbers), and a hash map for any other id. The dense part is keyed by the low 32 bits only, so
// two ids may share a key: the index checks the entry's id word before it believes an answer,
// and withdraws the other object before it places one under a shared key.
//
// Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_ENTRY_MAP_H_
#define DEPOT_DAEMON_ENTRY_MAP_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <unordered_map>

#include "daemon/zeroed_array.h"

namespace depot {

class EntryMap {
 public:
  // The entry noted for `id`'s key, if any (it may be another id's: see above).
  std::optional<uint64_t> Find(uint64_t id) const {
    if (auto k = static_cast<uint32_t>(id); k < kDense) {
      if (k < dense_.size() && dense_[k] != 0) return dense_[k] - 1;
      return std::nullopt;
    }
    auto it = sparse_.find(id);
    return it == sparse_.end() ? std::nullopt : std::optional<uint64_t>(it->second);
  }
  // Notes `entry` (below 2^32 - 1: an index has at most 2^26 entries) for `id`'s key, in place
  // of whatever it held.
  void Set(uint64_t id, uint64_t entry) {
    if (auto k = static_cast<uint32_t>(id); k < kDense) {
      if (k >= dense_.size()) {
        dense_ = ZeroedArray<uint32_t>(dense_, std::max<size_t>(k + 1, dense_.size() * 2));
      }
      size_ += dense_[k] == 0 ? 1 : 0;
      dense_[k] = static_cast<uint32_t>(entry + 1);
      return;
    }
    size_ += sparse_.insert_or_assign(id, entry).second ? 1 : 0;
  }
  void Erase(uint64_t id) {
    if (auto k = static_cast<uint32_t>(id); k < kDense) {
      if (k < dense_.size() && dense_[k] != 0) {
        dense_[k] = 0;
        --size_;
      }
      return;
    }
    size_ -= sparse_.erase(id);
  }
  size_t size() const { return size_; }
  // Makes room for the keys below `ids` now (untouched, so costing no memory yet): a map made
  // off the loop (a bigger index) then does not grow on it, copying and zeroing megabytes.
  void Reserve(uint64_t ids) {
    ids = std::min<uint64_t>(ids, kDense);
    if (ids > dense_.size()) dense_ = ZeroedArray<uint32_t>(dense_, ids);
  }
  // Calls fn(entry) for every entry noted.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (uint32_t e : dense_) {
      if (e != 0) fn(uint64_t{e} - 1);
    }
    for (const auto& [id, entry] : sparse_) fn(entry);
  }

 private:
  static constexpr uint32_t kDense = uint32_t{1} << 26;  // at most 256 MiB of keys

  ZeroedArray<uint32_t> dense_;  // by the id's low 32 bits: its entry + 1; 0: none
  std::unordered_map<uint64_t, uint64_t> sparse_;
  size_t size_ = 0;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_ENTRY_MAP_H_
