// GuidHash finds a slot (a 32-bit record number of ObjectTable) by the GUID its record holds: an
// open-addressing table of 4-byte buckets, with linear probing and backward-shift deletion (no
// tombstones), so that a store of millions of objects pays 5 to 11 bytes per object for it where
// a node-based map pays 60 or more. The GUIDs live in the records, not here: `KeyOf` gives the
// GUID of a slot, and a probe compares it.
//
// Clients choose GUIDs, so the hash is keyed by a secret seed drawn per table: no client can
// aim GUIDs at one run of buckets and slow every other client's lookups.
//
// It grows (and shrinks) a little at a time, as Redis's dictionaries do: a resize makes the new
// table and then, at each insert or erase, moves the old one's next runs of full buckets (about
// kMovesPerChange slots, or kPassesPerChange empty buckets passed), and a lookup meanwhile looks
// in both.
// Moving a million slots at once (each a read of its record, for its GUID) held the daemon's loop
// for 80 ms.
//
// Invariants: each slot present is in exactly one bucket of one table; in each table, every
// bucket from a slot's home bucket (its hash) up to its own is occupied (what a lookup relies on
// to stop at the first empty one); the old table's buckets that the move passed are empty, and
// its cursor is at an empty bucket between changes; at most 3/4 of the new table's buckets are
// full. Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_OBJECT_TABLE_HASH_H_
#define DEPOT_DAEMON_OBJECT_TABLE_HASH_H_

#include <cstdint>
#include <optional>
#include <random>
#include <utility>

#include "daemon/zeroed_array.h"
#include "depot/guid.h"

namespace depot {

// KeyOf: a callable, `const Guid&(uint32_t slot)`, valid for every slot while it is present.
template <class KeyOf>
class GuidHash {
 public:
  explicit GuidHash(KeyOf key_of, uint64_t seed = std::random_device{}() * 0x9e3779b97f4a7c15ull +
                                                  std::random_device{}())
      : key_of_(std::move(key_of)), seed_(seed) {}

  // Slots of the old table moved (whole runs), or its empty buckets passed, at each change
  // during a resize: a growth ends before the new table is 3/4 full (the old one held at most
  // 3/4 of half as many buckets, and is moved within a tenth as many changes as it has buckets).
  static constexpr size_t kMovesPerChange = 16;
  static constexpr size_t kPassesPerChange = 256;

  size_t size() const { return size_; }
  size_t buckets() const { return buckets_.size(); }
  // Whether a resize is under way (slots left in the old table).
  bool resizing() const { return !old_.empty(); }

  // The slot whose GUID is `guid`, or nullopt.
  std::optional<uint32_t> Find(const Guid& guid) const {
    if (size_ == 0) return std::nullopt;
    if (auto slot = FindIn(buckets_, guid)) return slot;
    return old_.empty() ? std::nullopt : FindIn(old_, guid);
  }

  // Adds `slot`, whose GUID no slot present has (the caller checked with Find).
  void Insert(uint32_t slot) {
    MoveSome();
    if (old_.empty() && (size_ + 1) * 4 > buckets_.size() * 3) {
      Resize(buckets_.empty() ? 16 : buckets_.size() * 2);
    }
    Place(buckets_, slot);
    ++size_;
  }

  // Removes `slot` (its GUID still readable through KeyOf). False when it is not there.
  bool Erase(uint32_t slot) {
    if (size_ == 0) return false;
    MoveSome();
    if (!EraseFrom(buckets_, slot) && (old_.empty() || !EraseFrom(old_, slot))) return false;
    --size_;
    if (old_.empty() && buckets_.size() > 16 && size_ * 16 < buckets_.size()) {
      Resize(buckets_.size() / 2);
    }
    return true;
  }

 private:
  static constexpr uint32_t kEmpty = 0;  // a bucket holds slot + 1
  // A power of two of buckets, or none; made lazily zeroed (ZeroedArray): a vector's zeroing of
  // a new table faulted in 8 MiB at once (37 ms of the loop at 2,097,152 buckets).
  using Table = ZeroedArray<uint32_t>;

  size_t Home(const Table& t, const Guid& g) const {
    uint64_t x = (g.hi ^ seed_) * 0x9e3779b97f4a7c15ull;
    x ^= g.lo + (seed_ >> 7);
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ull;
    x ^= x >> 32;
    return static_cast<size_t>(x) & (t.size() - 1);
  }
  static size_t Next(const Table& t, size_t b) { return (b + 1) & (t.size() - 1); }

  std::optional<uint32_t> FindIn(const Table& t, const Guid& guid) const {
    for (size_t b = Home(t, guid);; b = Next(t, b)) {
      uint32_t v = t[b];
      if (v == kEmpty) return std::nullopt;
      if (key_of_(v - 1) == guid) return v - 1;
    }
  }
  void Place(Table& t, uint32_t slot) {
    size_t b = Home(t, key_of_(slot));
    while (t[b] != kEmpty) b = Next(t, b);
    t[b] = slot + 1;
  }
  bool EraseFrom(Table& t, uint32_t slot) {
    if (t.empty()) return false;
    size_t hole = Home(t, key_of_(slot));
    for (; t[hole] != slot + 1; hole = Next(t, hole)) {
      if (t[hole] == kEmpty) return false;
    }
    EmptyAt(t, hole);
    return true;
  }
  // Backward shift: each later slot of the run that may move into the hole (its home is not
  // inside the stretch (hole, b]) moves there, and leaves a hole of its own.
  void EmptyAt(Table& t, size_t hole) {
    for (size_t b = Next(t, hole);; b = Next(t, b)) {
      uint32_t v = t[b];
      if (v == kEmpty) break;
      size_t home = Home(t, key_of_(v - 1));
      bool stays = hole < b ? (hole < home && home <= b) : (hole < home || home <= b);
      if (stays) continue;
      t[hole] = v;
      hole = b;
    }
    t[hole] = kEmpty;
  }
  void Resize(size_t n) {
    old_ = std::exchange(buckets_, Table(n));
    if (old_.empty()) return;
    // From an empty bucket (at most 3/4 are full): runs then move whole, and the slots of a run
    // that has not moved all have their home in it, so that lookups in the old table stay true.
    cursor_ = 0;
    while (old_[cursor_] != kEmpty) ++cursor_;
    passed_ = 0;
    MoveSome();
  }
  // A change's share of the resize under way: the next runs of the old table go to the new one,
  // slot by slot, until kMovesPerChange slots moved or kPassesPerChange empty buckets were
  // passed; it stops only at an empty bucket, never inside a run.
  void MoveSome() {
    size_t moves = 0, passes = 0;
    while (!old_.empty()) {
      if (passed_ == old_.size()) {
        old_ = Table();
        return;
      }
      uint32_t& b = old_[cursor_];
      if (b == kEmpty) {
        if (moves >= kMovesPerChange || passes >= kPassesPerChange) return;
        ++passes;
      } else {
        Place(buckets_, b - 1);
        b = kEmpty;
        ++moves;
      }
      cursor_ = Next(old_, cursor_);
      ++passed_;
    }
  }

  KeyOf key_of_;
  uint64_t seed_;
  Table buckets_;      // where slots go
  Table old_;          // during a resize: the table before, emptied run by run
  size_t cursor_ = 0;  // of old_: where the move goes on
  size_t passed_ = 0;  // buckets of old_ the move passed (from an empty one, around)
  size_t size_ = 0;    // slots in both
};

}  // namespace depot

#endif  // DEPOT_DAEMON_OBJECT_TABLE_HASH_H_
