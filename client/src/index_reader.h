// internal::IndexReader reads the daemon's shared index of its namespace (proto/index_layout.h):
// where a sealed object's frames are, found without a round trip. The mapping is read-only; the
// daemon writes it concurrently, under a seqlock per entry.
//
// It trusts nothing it reads (a corrupt index, or a daemon of another user, must not crash the
// process): counts are bounded, records must lie in the arena, and frames are checked against
// their segments by whoever maps them (SegmentMap::MapIndexed). What it returns is consistent
// (read between two equal, even seqs) but may be out of date at once: a caller that wants to
// hold the object publishes its id in a reference slot and then asks Unchanged.
//
// Thread-safe: it only reads.
#ifndef DEPOT_CLIENT_SRC_INDEX_READER_H_
#define DEPOT_CLIENT_SRC_INDEX_READER_H_

#include <boost/container/small_vector.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "common/prefetch.h"
#include "common/shared_mapping.h"
#include "common/unique_fd.h"
#include "depot/guid.h"
#include "depot/status.h"
#include "proto/index_layout.h"
#include "proto/wire.h"

namespace depot::internal {

// One object as the index says, read under its entry's seqlock.
struct IndexHit {
  uint64_t entry = 0;                                             // word offset of its entry
  uint64_t seq = 0;                                               // the entry's seq when read
  uint64_t id = 0;                                                // the daemon's ObjectId
  boost::container::small_vector<wire::FrameLocation, 1> frames;  // most objects have one
  std::vector<std::byte> metadata;
  std::optional<uint64_t> checksum;
  uint32_t creator_uid = 0;
  int32_t creator_pid = 0;
};

class IndexReader {
 public:
  // Maps the index of `sets` sets and an arena of `arena_bytes` from `fd` (read-only).
  // ProtocolError when the file is smaller than that, the geometry makes no sense, or its layout
  // words are not this library's (proto/layout_words.h).
  static Result<IndexReader> Map(const UniqueFd& fd, uint64_t sets, uint64_t arena_bytes);

  // The entry of `guid`, read consistently; nullopt when it is not indexed (or the entry kept
  // changing, or made no sense).
  std::optional<IndexHit> Find(const Guid& guid) const;
  // Find into `hit`, whose vectors keep their capacity: a batch reads many entries into one
  // IndexHit without an allocation each. False when `guid` is not indexed (`hit` then holds
  // nothing of use).
  // When `entry` (from Locate) is not 0, that entry is read first.
  bool FindInto(const Guid& guid, IndexHit& hit, uint64_t entry = 0) const;

  // A batch reads many entries at random in a table that may be far bigger than the cache (and
  // than the TLB's reach): it walks each GUID through steps, several GUIDs apart, so that the
  // misses of one step overlap those of the GUIDs around it. First Prefetch the tags' line of the
  // GUID's first set, then Locate in it (the entry whose tag matched, its line loading); for a
  // GUID not there, Prefetch and Locate in its second set; then FindInto with the entry located
  // (the checked read). A GUID's second set is loaded only when its first lacks it: about a third
  // of the objects, where loading both lines for every GUID left a batch waiting on both.
  enum class Set { kFirst, kSecond };
  void Prefetch(const Guid& guid, Set set) const {
    depot::Prefetch(map_.words() + index::TagWord(SetNumber(guid, set) * index::kWays));
  }
  // The entry of `set` whose tag is `guid` (read without the seqlock: a hint), its line loading;
  // 0 when none seems to.
  uint64_t Locate(const Guid& guid, Set set) const;

  // Whether `hit`'s entry is still as it was read. Called after the caller published the id and
  // fenced (SlotTable::Publish): true means the daemon will see that slot before it lets the
  // object go.
  bool Unchanged(const IndexHit& hit) const { return Unchanged(hit.entry, hit.seq); }
  bool Unchanged(uint64_t entry, uint64_t seq) const;
  // Starts loading the word Unchanged reads, for a batch that asks it of many entries.
  void PrefetchSeq(uint64_t entry) const { depot::Prefetch(map_.words() + entry + index::kSeq); }
  // Whether `guid`'s set has an empty entry now, so that the daemon could index it (a hint: the
  // set may change before it does).
  bool HasRoomFor(const Guid& guid) const;
  // Whether the daemon retired this index (its layout words cleared): a bigger one replaced it,
  // and this one holds nothing any more.
  bool Retired() const {
    return index::Load(map_.words() + layout::kMagic) != index::kIndexLayout.magic;
  }

 private:
  IndexReader(SharedMapping map, uint64_t sets, uint64_t arena_bytes)
      : map_(std::move(map)), sets_(sets), arena_bytes_(arena_bytes) {}
  // Reads the entry at word `entry` (an index::EntryWord) into `out` if its tag is `guid` (`found`
  // then true); false when it changed meanwhile.
  bool Read(uint64_t entry, const Guid& guid, IndexHit& out, bool& found) const;
  // Read, again while the entry changes under it (at most kTries times). Whether it holds `guid`.
  bool ReadSteady(uint64_t entry, const Guid& guid, IndexHit& out) const;
  uint64_t SetNumber(const Guid& guid, Set set) const {
    return set == Set::kFirst ? index::SetOf(guid, sets_) : index::SecondSetOf(guid, sets_);
  }
  // The first entry number of set `set`.
  static uint64_t First(uint64_t set) { return set * index::kWays; }

  SharedMapping map_;
  uint64_t sets_;
  uint64_t arena_bytes_;
};

}  // namespace depot::internal

#endif  // DEPOT_CLIENT_SRC_INDEX_READER_H_
