#include "daemon/object_index.h"

#include <fcntl.h>
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstring>

#include "daemon/shm_source.h"

namespace depot {

constexpr uint64_t kArenaBytesPerEntry = 32;

Result<std::unique_ptr<ObjectIndex>> ObjectIndex::Create(uint64_t entries,
                                                         const std::string& name) {
  uint64_t sets = std::bit_ceil(std::max<uint64_t>(1, (entries + index::kWays - 1) / index::kWays));
  // The arena: 32 bytes an entry, a one-frame record each (more objects have one frame than not).
  uint64_t arena = sets * index::kWays * kArenaBytesPerEntry;
  // Reserved below, through the mapping, so that the pages can be huge ones.
  auto memory = SealedMemfd(name, index::IndexBytes(sets, arena), 0);
  if (!memory.ok()) return memory.status();
  auto map = SharedMapping::Map(memory->fd.get(), memory->size, true, "object index");
  if (!map.ok()) return map.status();
  // Every page now: memory short later would SIGBUS a reader, and a move writes entries all
  // over the new index (measured: a step of 8,192 entries 40-50 ms faulting, ~10 ms without). On
  // 2 MiB pages where the node allows them: a lookup then costs no TLB miss of its own.
  if (Status reserved =
          ReservePages(map->words(), map->size(), memory->fd.get(), "the object index");
      !reserved.ok()) {
    return reserved;
  }
  layout::Write(map->words(), index::kIndexLayout);
  auto made = std::unique_ptr<ObjectIndex>(new ObjectIndex(
      std::move(memory->fd), std::move(memory->read_only_fd), std::move(*map), sets));
  // Room in its entry map for ids up to its entry count: a bigger index is made off the loop
  // (LockFreeGets), and its map would otherwise grow on the loop at the move's first step.
  made->placed_.Reserve(entries);
  return made;
}

ObjectIndex::ObjectIndex(UniqueFd fd, UniqueFd read_only_fd, SharedMapping map, uint64_t sets)
    : fd_(std::move(fd)),
      read_only_fd_(std::move(read_only_fd)),
      map_(std::move(map)),
      sets_(sets),
      arena_(sets * index::kWays * kArenaBytesPerEntry, index::kRecordAlign),
      used_(sets * index::kWays, false) {}

bool ObjectIndex::Insert(const StoredObject& o) {
  Remove(o.id);
  auto frames = o.frames();
  auto metadata = o.metadata();
  if (frames.empty() || frames.size() > 0xffff) return false;
  // An object of one frame and no metadata takes no room in the arena (index::kInline).
  uint64_t bytes = index::Inlined(frames.size(), metadata.size())
                       ? 0
                       : index::RecordBytes(frames.size(), metadata.size());
  Use& use = uses_[o.creator_uid];  // (dropped again below when nothing of its is placed)
  uint64_t uids = uses_.size();
  if (use.entries + 1 > EntryShare(uids) || use.bytes + bytes > ByteShare(uids)) {
    ++refused_over_share_;
    if (use.entries == 0) uses_.erase(o.creator_uid);
    return false;
  }
  std::vector<uint64_t> record;
  record.reserve(bytes / 8);
  for (const Location& f : frames) {
    record.insert(record.end(), {f.offset, f.size, uint64_t{f.pool} << 32 | f.segment});
  }
  for (size_t i = 0; i < metadata.size(); i += 8) {
    uint64_t packed = 0;
    std::memcpy(&packed, metadata.data() + i, std::min<size_t>(8, metadata.size() - i));
    record.push_back(packed);
  }
  std::array<uint64_t, index::kEntryWords> words{};
  words[index::kId] = o.id;
  words[index::kChecksum] = o.checksum;
  words[index::kCreator] = uint64_t{o.creator_uid} | uint64_t{static_cast<uint32_t>(o.creator_pid)}
                                                         << 32;
  words[index::kShape] =
      index::Shape(frames.size(), o.has_checksum ? index::kHasChecksum : 0, metadata.size());
  return Place(o.guid, words, record, o.creator_uid, true);
}

bool ObjectIndex::Place(const Guid& guid, std::span<const uint64_t> words,
                        std::span<const uint64_t> record, uint32_t uid, bool take_back) {
  // Another object noted under the same key (EntryMap) goes first: withdrawing is always safe.
  if (auto other = placed_.Find(words[index::kId]);
      other && *other < used_.size() && used_[*other]) {
    Remove(PlacedAt(*other).id);
  }
  Use& use = uses_[uid];
  uint64_t uids = uses_.size();
  auto leave_out = [&] {
    if (use.entries == 0) uses_.erase(uid);
    ++left_out_;
    return false;
  };
  auto way = FreeWay(guid, take_back ? uids : 0);
  if (!way) return leave_out();
  uint64_t n = *way;
  uint64_t shape = words[index::kShape];
  bool inlined = index::Inlined(index::ShapeFrames(shape), index::ShapeMetadata(shape)) &&
                 record.size() == index::kFrameWords;
  std::array<uint64_t, index::kEntryWords> entry_words{};
  std::copy(words.begin(), words.begin() + index::kRecord, entry_words.begin());
  uint64_t flags = index::ShapeFlags(shape) & ~index::kInline;
  entry_words[index::kShape] =
      index::Shape(index::ShapeFrames(shape), inlined ? flags | index::kInline : flags,
                   index::ShapeMetadata(shape));
  uint64_t bytes = 0;
  if (inlined) {
    std::copy(record.begin(), record.end(), entry_words.begin() + index::kRecord);
  } else {
    bytes = record.size() * 8;
    auto at = arena_.Allocate(bytes);
    if (!at && take_back) {
      TakeBackBytes(uids);
      at = arena_.Allocate(bytes);
    }
    if (!at) return leave_out();
    // The record first: no entry names it yet, and the entry's release store below publishes it.
    uint64_t* r = arena() + *at / 8;
    for (uint64_t w : record) index::Store(r++, w);
    entry_words[index::kRecord] = *at;
  }
  uint64_t* e = word(index::EntryWord(n));
  uint64_t* tag = word(index::TagWord(n));
  uint64_t seq = index::Load(&e[index::kSeq]);
  index::Store(&e[index::kSeq], seq + 1);
  std::atomic_thread_fence(std::memory_order_release);
  index::Store(&tag[0], guid.hi);
  index::Store(&tag[1], guid.lo);
  for (uint64_t w = index::kSeq + 1; w < index::kEntryWords; ++w)
    index::Store(&e[w], entry_words[w]);
  index::Store(&e[index::kSeq], seq + 2, std::memory_order_release);
  used_[n] = true;
  placed_.Set(words[index::kId], n);
  ++use.entries;
  use.bytes += bytes;
  return true;
}

bool ObjectIndex::Crowded() const {
  // Two choices of four ways leave a few objects out from about half full: grow then only if
  // more than one in 256 was, and in any case at three quarters.
  uint64_t placed = placed_.size();
  bool half = placed * 2 >= used_.size() || arena_.used() * 2 >= arena_.size();
  bool most = placed * 4 >= used_.size() * 3 || arena_.used() * 4 >= arena_.size() * 3;
  return most || (half && left_out_ * 256 >= placed);
}

uint64_t ObjectIndex::MoveInto(ObjectIndex& bigger, uint64_t from, uint64_t count) const {
  uint64_t end = std::min<uint64_t>(used_.size(), from + count);
  std::array<uint64_t, index::kEntryWords> words{};
  std::vector<uint64_t> record;
  for (uint64_t n = from; n < end; ++n) {
    if (!used_[n]) continue;
    Placed p = PlacedAt(n);
    if (bigger.Contains(p.id)) continue;  // published into both since the move began
    const uint64_t* e = word(index::EntryWord(n));
    const uint64_t* tag = word(index::TagWord(n));
    for (uint64_t w = 0; w < index::kEntryWords; ++w) words[w] = index::Load(&e[w]);
    if (p.record_bytes == 0) {  // its frame is in the entry
      record.assign(e + index::kRecord, e + index::kEntryWords);
    } else {
      const uint64_t* r = map_.words() + index::ArenaWord(sets_) + p.record / 8;
      record.assign(r, r + p.record_bytes / 8);
    }
    // No uid is over its part here that was not in the smaller index: nothing is taken back.
    (void)bigger.Place(Guid{index::Load(&tag[0]), index::Load(&tag[1])}, words, record, p.uid,
                       false);
  }
  return end;
}

void ObjectIndex::BeginRetire() {
  index::Store(map_.words() + layout::kMagic,
               0);  // clients that miss ask for the index that replaced it
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

uint64_t ObjectIndex::RetireSome(uint64_t from, uint64_t count) {
  // In entry order, which reads and writes the index's memory in sequence.
  uint64_t end = std::min(entries(), from + count);
  for (uint64_t n = from; n < end; ++n) {
    if (!used_[n]) continue;
    uint64_t* e = word(index::EntryWord(n));
    uint64_t seq = index::Load(&e[index::kSeq]);
    index::Store(&e[index::kSeq], seq + 2);  // what a client read of it no longer holds
    index::Store(&e[index::kId], 0);
    used_[n] = false;  // a Remove of its object has nothing left to do
  }
  // As Remove's: a client's slot published before it re-read a seq above is seen by the slot
  // reads that follow.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return end;
}

void ObjectIndex::EndRetire() {
  // Its memory goes back now, though clients still map it: they read zeros (no entry) there.
  (void)::fallocate(fd_.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                    static_cast<off_t>(map_.size()));
}

std::optional<uint64_t> ObjectIndex::FreeWay(const Guid& guid, uint64_t uids) {
  const uint64_t sets[] = {index::SetOf(guid, sets_), index::SecondSetOf(guid, sets_)};
  // The first free way of the set with more of them.
  std::optional<uint64_t> best;
  uint64_t most = 0;
  for (uint64_t set : sets) {
    uint64_t free = 0;
    std::optional<uint64_t> first;
    for (uint64_t n = set * index::kWays; n < (set + 1) * index::kWays; ++n) {
      if (used_[n]) continue;
      ++free;
      if (!first) first = n;
    }
    if (free > most) {
      most = free;
      best = first;
    }
  }
  if (best || uids == 0) return best;
  for (uint64_t set : sets) {
    for (uint64_t n = set * index::kWays; n < (set + 1) * index::kWays; ++n) {
      Placed p = PlacedAt(n);
      if (uses_[p.uid].entries > EntryShare(uids)) {
        ++taken_back_;
        Remove(p.id);
        dropped_.push_back(p.id);
        return n;
      }
    }
  }
  return std::nullopt;
}

void ObjectIndex::TakeBackBytes(uint64_t uids) {
  uint64_t share = ByteShare(uids);
  std::vector<ObjectId> over;
  placed_.ForEach([&](uint64_t n) {
    Placed p = PlacedAt(n);
    if (uses_[p.uid].bytes > share) over.push_back(p.id);
  });
  for (ObjectId id : over) {
    auto p = Lookup(id);
    if (!p || uses_[p->uid].bytes <= share) continue;
    ++taken_back_;
    Remove(id);
    dropped_.push_back(id);
  }
}

ObjectIndex::Placed ObjectIndex::PlacedAt(uint64_t n) const {
  const uint64_t* e = word(index::EntryWord(n));
  uint64_t shape = index::Load(&e[index::kShape]);
  bool inlined = (index::ShapeFlags(shape) & index::kInline) != 0;
  return {index::Load(&e[index::kId]), n, inlined ? 0 : index::Load(&e[index::kRecord]),
          inlined ? 0 : index::RecordBytes(index::ShapeFrames(shape), index::ShapeMetadata(shape)),
          static_cast<uint32_t>(index::Load(&e[index::kCreator]))};
}

std::optional<ObjectIndex::Placed> ObjectIndex::Lookup(ObjectId id) const {
  auto n = placed_.Find(id);
  if (!n || *n >= used_.size() || !used_[*n]) return std::nullopt;
  Placed p = PlacedAt(*n);
  if (p.id != id) return std::nullopt;  // another id of the same key
  return p;
}

void ObjectIndex::Remove(ObjectId id) {
  auto found = Lookup(id);
  if (!found) return;
  const Placed& p = *found;
  uint64_t* e = word(index::EntryWord(p.entry));
  uint64_t* tag = word(index::TagWord(p.entry));
  uint64_t seq = index::Load(&e[index::kSeq]);
  index::Store(&e[index::kSeq], seq + 1);
  std::atomic_thread_fence(std::memory_order_release);
  index::Store(&e[index::kId], 0);
  index::Store(&tag[0], 0);
  index::Store(&tag[1], 0);
  index::Store(&e[index::kSeq], seq + 2, std::memory_order_release);
  // Pairs with the client's fence between publishing its slot and re-reading this seq: after
  // it, either the client sees the new seq and lets go, or the daemon's slot scan sees its id.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (p.record_bytes > 0) arena_.Free(p.record, p.record_bytes);
  used_[p.entry] = false;
  auto use = uses_.find(p.uid);
  if (use != uses_.end()) {
    use->second.bytes -= p.record_bytes;
    if (--use->second.entries == 0) uses_.erase(use);
  }
  placed_.Erase(id);
}

}  // namespace depot
