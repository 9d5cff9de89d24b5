// GuidHash finds a slot (a 32-bit record number of ObjectTable) by the GUID its record holds: an
// open-addressing table of 4-byte buckets, with linear probing and backward-shift deletion (no
// tombstones), so that a store of millions of objects pays 5 to 11 bytes per object for it where
// a node-based map pays 60 or more. The GUIDs live in the records, not here: `KeyOf` gives the
// GUID of a slot, and a probe compares it.
//
// Clients choose GUIDs, so the hash is keyed by a secret seed drawn per table: no client can
// aim GUIDs at one run of buckets and slow every other client's lookups.
//
// Invariants: each slot present is in exactly one bucket; every bucket from a slot's home bucket
// (its hash) up to its own is occupied (what a lookup relies on to stop at the first empty one);
// at most 3/4 of the buckets are full. Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_OBJECT_TABLE_HASH_H_
#define DEPOT_DAEMON_OBJECT_TABLE_HASH_H_

#include <cstdint>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "depot/guid.h"

namespace depot {

// KeyOf: a callable, `const Guid&(uint32_t slot)`, valid for every slot while it is present.
template <class KeyOf>
class GuidHash {
 public:
  explicit GuidHash(KeyOf key_of, uint64_t seed = std::random_device{}() * 0x9e3779b97f4a7c15ull +
                                                  std::random_device{}())
      : key_of_(std::move(key_of)), seed_(seed) {}

  size_t size() const { return size_; }
  size_t buckets() const { return buckets_.size(); }

  // The slot whose GUID is `guid`, or nullopt.
  std::optional<uint32_t> Find(const Guid& guid) const {
    if (size_ == 0) return std::nullopt;
    for (size_t b = Home(guid);; b = Next(b)) {
      uint32_t v = buckets_[b];
      if (v == kEmpty) return std::nullopt;
      if (key_of_(v - 1) == guid) return v - 1;
    }
  }

  // Adds `slot`, whose GUID no slot present has (the caller checked with Find).
  void Insert(uint32_t slot) {
    if ((size_ + 1) * 4 > buckets_.size() * 3) Rehash(buckets_.empty() ? 16 : buckets_.size() * 2);
    Place(slot);
    ++size_;
  }

  // Removes `slot` (its GUID still readable through KeyOf). False when it is not there.
  bool Erase(uint32_t slot) {
    if (size_ == 0) return false;
    size_t hole = Home(key_of_(slot));
    for (; buckets_[hole] != slot + 1; hole = Next(hole)) {
      if (buckets_[hole] == kEmpty) return false;
    }
    // Backward shift: each later slot of the run that may move into the hole (its home is not
    // inside the stretch (hole, b]) moves there, and leaves a hole of its own.
    for (size_t b = Next(hole);; b = Next(b)) {
      uint32_t v = buckets_[b];
      if (v == kEmpty) break;
      size_t home = Home(key_of_(v - 1));
      bool stays = hole < b ? (hole < home && home <= b) : (hole < home || home <= b);
      if (stays) continue;
      buckets_[hole] = v;
      hole = b;
    }
    buckets_[hole] = kEmpty;
    --size_;
    if (buckets_.size() > 16 && size_ * 16 < buckets_.size()) Rehash(buckets_.size() / 2);
    return true;
  }

 private:
  static constexpr uint32_t kEmpty = 0;  // a bucket holds slot + 1

  size_t Home(const Guid& g) const {
    uint64_t x = (g.hi ^ seed_) * 0x9e3779b97f4a7c15ull;
    x ^= g.lo + (seed_ >> 7);
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ull;
    x ^= x >> 32;
    return static_cast<size_t>(x) & (buckets_.size() - 1);
  }
  size_t Next(size_t b) const { return (b + 1) & (buckets_.size() - 1); }
  void Place(uint32_t slot) {
    size_t b = Home(key_of_(slot));
    while (buckets_[b] != kEmpty) b = Next(b);
    buckets_[b] = slot + 1;
  }
  void Rehash(size_t n) {
    std::vector<uint32_t> old(n, kEmpty);
    old.swap(buckets_);
    for (uint32_t v : old) {
      if (v != kEmpty) Place(v - 1);
    }
  }

  KeyOf key_of_;
  uint64_t seed_;
  std::vector<uint32_t> buckets_;  // a power of two of them, or none
  size_t size_ = 0;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_OBJECT_TABLE_HASH_H_
