#include "client/src/index_reader.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "proto/index_layout.h"

namespace depot::internal {
namespace {

// Reads of an entry that keeps changing give up after this many tries: the daemon answers.
constexpr int kTries = 8;

}  // namespace

Result<IndexReader> IndexReader::Map(const UniqueFd& fd, uint64_t sets, uint64_t arena_bytes) {
  constexpr uint64_t kMaxSets = uint64_t{1} << 30;
  if (sets == 0 || sets > kMaxSets || (sets & (sets - 1)) != 0 || arena_bytes % 8 != 0 ||
      arena_bytes > (uint64_t{1} << 40)) {
    return Status::ProtocolError(fmt::format(
        "depotd described an index of {} sets and {} bytes of records", sets, arena_bytes));
  }
  uint64_t size = index::IndexBytes(sets, arena_bytes);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) < size) {
    return Status::ProtocolError(
        fmt::format("depotd's index fd does not hold the {} bytes it claimed", size));
  }
  auto map = SharedMapping::Map(fd.get(), size, false, "object index");
  if (!map.ok()) return map.status();
  // An index the daemon retired after it sent it (a move to a bigger one ended meanwhile) has its
  // magic word cleared: mapped all the same, it holds nothing, and the first miss asks for the
  // one that replaced it (Retired).
  if (index::Load(map->words() + layout::kMagic) != 0) {
    if (Status words = layout::Check(map->words(), index::kIndexLayout); !words.ok()) return words;
  }
  return IndexReader(std::move(*map), sets, arena_bytes);
}

std::optional<IndexHit> IndexReader::Find(const Guid& guid) const {
  IndexHit hit;
  if (!FindInto(guid, hit)) return std::nullopt;
  return hit;
}

bool IndexReader::FindInto(const Guid& guid, IndexHit& hit, uint64_t entry) const {
  if (entry != 0 && ReadSteady(entry, guid, hit)) return true;
  uint64_t second = index::SecondSetOf(guid, sets_);
  // A lone get reads the first set's tags while the second's load.
  depot::Prefetch(map_.words() + index::TagWord(First(second)));
  for (uint64_t set : {index::SetOf(guid, sets_), second}) {
    for (uint64_t n = First(set); n < First(set + 1); ++n) {
      const uint64_t* tag = map_.words() + index::TagWord(n);
      // Only an entry whose tag names `guid` can hold it: the others' lines are not read. (The
      // tag is checked again under the entry's seqlock.)
      if (index::Load(&tag[0]) != guid.hi || index::Load(&tag[1]) != guid.lo) continue;
      if (ReadSteady(index::EntryWord(n), guid, hit)) return true;
    }
  }
  return false;
}

bool IndexReader::ReadSteady(uint64_t entry, const Guid& guid, IndexHit& hit) const {
  bool found = false;
  for (int tries = 0; tries < kTries; ++tries) {
    if (Read(entry, guid, hit, found)) return found;
  }
  return false;
}

uint64_t IndexReader::Locate(const Guid& guid, Set set) const {
  const uint64_t number = SetNumber(guid, set);
  for (uint64_t n = First(number); n < First(number + 1); ++n) {
    const uint64_t* tag = map_.words() + index::TagWord(n);
    if (index::Load(&tag[0]) != guid.hi || index::Load(&tag[1]) != guid.lo) continue;
    depot::Prefetch(map_.words() + index::EntryWord(n));
    return index::EntryWord(n);
  }
  return 0;
}

bool IndexReader::Read(uint64_t entry, const Guid& guid, IndexHit& hit, bool& found) const {
  const uint64_t* e = map_.words() + entry;
  const uint64_t* tag = map_.words() + index::TagWord(index::EntryNumber(entry));
  found = false;
  uint64_t seq = index::Load(&e[index::kSeq], std::memory_order_acquire);
  if (seq & 1) return false;
  if (index::Load(&tag[0]) != guid.hi || index::Load(&tag[1]) != guid.lo) {
    std::atomic_thread_fence(std::memory_order_acquire);
    return index::Load(&e[index::kSeq]) == seq;  // another object's (or none): a miss, if stable
  }
  hit.entry = entry;
  hit.seq = seq;
  hit.id = index::Load(&e[index::kId]);
  uint64_t shape = index::Load(&e[index::kShape]);
  uint64_t creator = index::Load(&e[index::kCreator]);
  uint64_t checksum = index::Load(&e[index::kChecksum]);
  uint64_t frames = index::ShapeFrames(shape);
  uint64_t metadata = index::ShapeMetadata(shape);
  bool inlined = (index::ShapeFlags(shape) & index::kInline) != 0;
  // Bounded before anything is read or allocated: a torn or corrupt entry names no memory
  // outside the arena and no more than an object may have.
  const uint64_t* r = e + index::kRecord;
  bool sane = hit.id != 0 && frames >= 1 && frames <= proto::kMaxFrames &&
              metadata <= proto::kMaxMetadataSize;
  if (inlined) {
    sane = sane && index::Inlined(frames, metadata);
  } else {
    uint64_t record = index::Load(r);
    sane = sane && record % 8 == 0 && record <= arena_bytes_ &&
           index::RecordBytes(frames, metadata) <= arena_bytes_ - record;
    if (sane) r = map_.words() + index::ArenaWord(sets_) + record / 8;  // only then: in the arena
  }
  if (sane) {
    hit.frames.clear();
    for (uint64_t i = 0; i < frames; ++i, r += index::kFrameWords) {
      uint64_t place = index::Load(&r[2]);
      hit.frames.emplace_back(index::Load(&r[0]), index::Load(&r[1]), static_cast<uint32_t>(place),
                              static_cast<uint32_t>(place >> 32));
    }
    // Word by word: the arena is written concurrently, so each word is one atomic load.
    hit.metadata.resize(metadata);
    for (uint64_t at = 0; at < metadata; at += 8) {
      uint64_t w = index::Load(r++);
      std::memcpy(hit.metadata.data() + at, &w, std::min<uint64_t>(8, metadata - at));
    }
    hit.checksum.reset();
    if (index::ShapeFlags(shape) & index::kHasChecksum) hit.checksum = checksum;
    hit.creator_uid = static_cast<uint32_t>(creator);
    hit.creator_pid = static_cast<int32_t>(creator >> 32);
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  if (index::Load(&e[index::kSeq]) != seq) return false;
  found = sane;
  return true;
}

bool IndexReader::HasRoomFor(const Guid& guid) const {
  for (uint64_t set : {index::SetOf(guid, sets_), index::SecondSetOf(guid, sets_)}) {
    for (uint64_t n = First(set); n < First(set + 1); ++n) {
      if (index::Load(map_.words() + index::EntryWord(n) + index::kId) == 0) return true;
    }
  }
  return false;
}

bool IndexReader::Unchanged(uint64_t entry, uint64_t seq) const {
  return index::Load(map_.words() + entry + index::kSeq) == seq;
}

}  // namespace depot::internal
