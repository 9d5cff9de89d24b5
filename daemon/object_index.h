// ObjectIndex is the daemon's side of a namespace's shared index (proto/index_layout.h): a
// sealed memfd it maps read-write and sends read-only to every session of the namespace, in
// which clients find a sealed object's frames without a round trip. It is a cache of the object
// table, bounded by its geometry: an object that does not fit (its set full, the arena full, too
// many frames) is simply not indexed, and a client that misses asks the daemon.
//
// The index is shared by every user of the namespace, so no user may fill it for the others: the
// entries and the arena are shared out between the uids whose objects are indexed, each entitled
// to an equal part (all of it while it is alone). An object whose creator would pass its part is
// not indexed; one that finds its set or the arena full while another uid holds more than its
// part takes that uid's entries or records back (their objects stay, only their gets take a
// round trip again) rather than being left out.
//
// Insert publishes an entry (seqlock: odd while written); Remove withdraws one and then issues a
// seq_cst fence, so that a reference slot read after Remove is one published before the client
// re-checked the entry (see ReferenceSlots and docs/design.md).
//
// Not thread-safe: the daemon's single loop owns it; clients read the memory concurrently.
#ifndef DEPOT_DAEMON_OBJECT_INDEX_H_
#define DEPOT_DAEMON_OBJECT_INDEX_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/shared_mapping.h"
#include "common/unique_fd.h"
#include "daemon/allocator.h"
#include "daemon/entry_map.h"
#include "daemon/object_table.h"
#include "proto/index_layout.h"

namespace depot {

class ObjectIndex {
 public:
  // An index of at least `entries` entries (rounded up to a power of two of sets), with a record
  // arena of 32 bytes per entry, in a memfd named `name`. The memfd's error when it cannot be
  // made.
  static Result<std::unique_ptr<ObjectIndex>> Create(uint64_t entries, const std::string& name);

  // Indexes sealed object `o`, in memory, at `frames` (its frames). False when it does not fit.
  // An object already indexed is indexed again (a new seq).
  bool Insert(const StoredObject& o);
  // Withdraws object `id` if it is indexed, then fences (seq_cst).
  void Remove(ObjectId id);
  bool Contains(ObjectId id) const { return Lookup(id).has_value(); }
  // The number of the entry that holds `id`, if it is indexed.
  std::optional<uint64_t> EntryOf(ObjectId id) const {
    auto p = Lookup(id);
    return p ? std::optional<uint64_t>(p->entry) : std::nullopt;
  }

  // Whether three quarters of the entries or of the arena are taken, or half of either with more
  // than one object in 256 left out: a bigger index would hold what is left out (below that,
  // only GUIDs chosen to collide fill both sets of one).
  bool Crowded() const;
  // Copies into `bigger` the objects of entries [from, from + count) that it does not hold yet:
  // one step of a move to a bigger index, between which both are kept as objects come and go
  // (LockFreeGets). Returns the entry to go on from; entries() when the move is done.
  uint64_t MoveInto(ObjectIndex& bigger, uint64_t from, uint64_t count) const;
  // Retirement, in steps, of an index a bigger one replaced; nothing is placed in it after the
  // first. BeginRetire clears the layout words, so that clients that miss ask for the index that
  // replaces it. RetireSome withdraws the entries [from, from + count) still in use (fenced as
  // Remove's) and returns the entry to go on from, entries() at the end; meanwhile the entries
  // not withdrawn yet stay as they were, and Remove withdraws one as before. EndRetire, after
  // the last, gives its memory back.
  void BeginRetire();
  uint64_t RetireSome(uint64_t from, uint64_t count);
  void EndRetire();

  // Sent to sessions: opened O_RDONLY, it cannot back a writable mapping.
  int read_only_fd() const { return read_only_fd_.get(); }
  uint64_t sets() const { return sets_; }
  uint64_t arena_bytes() const { return arena_.size(); }
  uint64_t size() const { return map_.size(); }
  size_t indexed() const { return placed_.size(); }  // (may count one id twice only briefly)
  // Objects left out because their set or the arena was full.
  uint64_t left_out() const { return left_out_; }
  uint64_t entries() const { return used_.size(); }
  // Objects not indexed because their creator had its part of the index already, and entries
  // taken back from a uid over its part.
  uint64_t refused_over_share() const { return refused_over_share_; }
  uint64_t taken_back() const { return taken_back_; }
  // Appends to `out` the objects whose entries were taken back since the last call.
  void TakeDropped(std::vector<ObjectId>& out) {
    out.insert(out.end(), dropped_.begin(), dropped_.end());
    dropped_.clear();
  }

 private:
  // An indexed object, as its entry (which only the daemon writes) says.
  struct Placed {
    ObjectId id;
    uint64_t entry;         // its number
    uint64_t record;        // byte offset of its record in the arena
    uint64_t record_bytes;  // 0: its frame is in its entry (index::kInline)
    uint32_t uid;           // its creator's
  };
  // Entry number `n` (in use) as placed.
  Placed PlacedAt(uint64_t n) const;
  // Object `id` as placed, if it is indexed.
  std::optional<Placed> Lookup(ObjectId id) const;
  struct Use {
    uint64_t entries = 0;
    uint64_t bytes = 0;
  };
  // A uid's part of the entries and of the arena while `uids` uids have objects indexed.
  uint64_t EntryShare(uint64_t uids) const { return used_.size() / std::max<uint64_t>(uids, 1); }
  uint64_t ByteShare(uint64_t uids) const { return arena_.size() / std::max<uint64_t>(uids, 1); }
  // Places an entry for `guid` of `words` (from kId to kShape) and its record for `uid` (in the
  // entry when it is one frame and no metadata, else in the arena), taking entries and records
  // back from uids over their part when `take_back`. False when it does not fit.
  bool Place(const Guid& guid, std::span<const uint64_t> words, std::span<const uint64_t> record,
             uint32_t uid, bool take_back);
  // A free way of one of `guid`'s two sets (of the one with more), taking back an entry of a uid
  // over its part if none is free (not when `uids` is 0); nullopt when every entry there is
  // within its uid's part.
  std::optional<uint64_t> FreeWay(const Guid& guid, uint64_t uids);
  // Withdraws records of uids over their part of the arena until each is within it.
  void TakeBackBytes(uint64_t uids);

  ObjectIndex(UniqueFd fd, UniqueFd read_only_fd, SharedMapping map, uint64_t sets);
  // Word `w` of the memfd (index::EntryWord, TagWord).
  uint64_t* word(uint64_t w) { return map_.words() + w; }
  const uint64_t* word(uint64_t w) const { return map_.words() + w; }
  uint64_t* arena() { return map_.words() + index::ArenaWord(sets_); }

  UniqueFd fd_;
  UniqueFd read_only_fd_;
  SharedMapping map_;
  uint64_t sets_;
  Allocator arena_;
  std::vector<bool> used_;                  // by entry number
  EntryMap placed_;                         // the entry number of each indexed object
  std::unordered_map<uint32_t, Use> uses_;  // by uid, of those with objects indexed
  uint64_t refused_over_share_ = 0;
  uint64_t left_out_ = 0;
  uint64_t taken_back_ = 0;
  std::vector<ObjectId> dropped_;  // taken back since TakeDropped
};

}  // namespace depot

#endif  // DEPOT_DAEMON_OBJECT_INDEX_H_
