#include "daemon/object_index.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>

#include "daemon/shm_source.h"

namespace depot {

using index::Load;
using index::Store;

Result<std::unique_ptr<ObjectIndex>> ObjectIndex::Create(uint64_t entries,
                                                         const std::string& name) {
  uint64_t sets = std::bit_ceil(std::max<uint64_t>(1, (entries + index::kWays - 1) / index::kWays));
  uint64_t table = sets * index::kWays * index::kEntryBytes;
  // The arena: as many bytes as the entries.
  auto memory = SealedMemfd(name, index::IndexBytes(sets, table));
  if (!memory.ok()) return memory.status();
  auto map = SharedMapping::Map(memory->fd.get(), memory->size, true, "object index");
  if (!map.ok()) return map.status();
  layout::Write(map->words(), index::kIndexLayout);
  return std::unique_ptr<ObjectIndex>(new ObjectIndex(
      std::move(memory->fd), std::move(memory->read_only_fd), std::move(*map), sets));
}

ObjectIndex::ObjectIndex(UniqueFd fd, UniqueFd read_only_fd, SharedMapping map, uint64_t sets)
    : fd_(std::move(fd)),
      read_only_fd_(std::move(read_only_fd)),
      map_(std::move(map)),
      sets_(sets),
      arena_(sets * index::kWays * index::kEntryBytes, index::kRecordAlign),
      used_(sets * index::kWays, false) {}

bool ObjectIndex::Insert(const StoredObject& o) {
  Remove(o.id);
  auto frames = o.frames();
  auto metadata = o.metadata();
  if (frames.empty() || frames.size() > 0xffff) return false;
  uint64_t bytes = index::RecordBytes(frames.size(), metadata.size());
  Use& use = uses_[o.creator_uid];  // (dropped again below when nothing of its is placed)
  uint64_t uids = uses_.size();
  auto leave_out = [&] {
    if (use.entries == 0) uses_.erase(o.creator_uid);
    return false;
  };
  if (use.entries + 1 > EntryShare(uids) || use.bytes + bytes > ByteShare(uids)) {
    ++refused_over_share_;
    return leave_out();
  }
  auto way = FreeWay(index::SetOf(o.guid, sets_), uids);
  if (!way) return leave_out();
  uint64_t n = *way;
  auto record = arena_.Allocate(bytes);
  if (!record) {
    TakeBackBytes(uids);
    record = arena_.Allocate(bytes);
  }
  if (!record) return leave_out();

  // The record first: no entry names it yet, and the entry's release store below publishes it.
  uint64_t* r = arena() + *record / 8;
  for (const Location& f : frames) {
    Store(r++, f.offset);
    Store(r++, f.size);
    Store(r++, uint64_t{f.pool} << 32 | f.segment);
  }
  for (size_t i = 0; i < metadata.size(); i += 8) {
    uint64_t word = 0;
    std::memcpy(&word, metadata.data() + i, std::min<size_t>(8, metadata.size() - i));
    Store(r++, word);
  }
  uint64_t* e = entry(n * index::kEntryWords);
  uint64_t seq = Load(&e[index::kSeq]);
  Store(&e[index::kSeq], seq + 1);
  std::atomic_thread_fence(std::memory_order_release);
  Store(&e[index::kGuidHi], o.guid.hi);
  Store(&e[index::kGuidLo], o.guid.lo);
  Store(&e[index::kId], o.id);
  Store(&e[index::kRecord], *record);
  Store(&e[index::kChecksum], o.checksum);
  Store(&e[index::kCreator],
        uint64_t{o.creator_uid} | uint64_t{static_cast<uint32_t>(o.creator_pid)} << 32);
  Store(&e[index::kShape],
        index::Shape(frames.size(), o.has_checksum ? index::kHasChecksum : 0, metadata.size()));
  Store(&e[index::kSeq], seq + 2, std::memory_order_release);
  used_[n] = true;
  placed_[o.id] = {n * index::kEntryWords, *record, bytes, o.creator_uid};
  ++use.entries;
  use.bytes += bytes;
  return true;
}

std::optional<uint64_t> ObjectIndex::FreeWay(uint64_t set, uint64_t uids) {
  for (uint64_t n = set * index::kWays; n < (set + 1) * index::kWays; ++n) {
    if (!used_[n]) return n;
  }
  for (uint64_t n = set * index::kWays; n < (set + 1) * index::kWays; ++n) {
    auto it = placed_.find(Load(entry(n * index::kEntryWords) + index::kId));
    if (it != placed_.end() && uses_[it->second.uid].entries > EntryShare(uids)) {
      ++taken_back_;
      Remove(it->first);
      return n;
    }
  }
  return std::nullopt;
}

void ObjectIndex::TakeBackBytes(uint64_t uids) {
  uint64_t share = ByteShare(uids);
  std::vector<ObjectId> over;
  for (const auto& [id, p] : placed_) {
    if (uses_[p.uid].bytes > share) over.push_back(id);
  }
  for (ObjectId id : over) {
    auto it = placed_.find(id);
    if (it == placed_.end() || uses_[it->second.uid].bytes <= share) continue;
    ++taken_back_;
    Remove(id);
  }
}

void ObjectIndex::Remove(ObjectId id) {
  auto it = placed_.find(id);
  if (it == placed_.end()) return;
  uint64_t* e = entry(it->second.entry);
  uint64_t seq = Load(&e[index::kSeq]);
  Store(&e[index::kSeq], seq + 1);
  std::atomic_thread_fence(std::memory_order_release);
  Store(&e[index::kId], 0);
  Store(&e[index::kGuidHi], 0);
  Store(&e[index::kGuidLo], 0);
  Store(&e[index::kSeq], seq + 2, std::memory_order_release);
  // Pairs with the client's fence between publishing its slot and re-reading this seq: after
  // it, either the client sees the new seq and lets go, or the daemon's slot scan sees its id.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  arena_.Free(it->second.record, it->second.record_bytes);
  used_[it->second.entry / index::kEntryWords] = false;
  auto use = uses_.find(it->second.uid);
  if (use != uses_.end()) {
    use->second.bytes -= it->second.record_bytes;
    if (--use->second.entries == 0) uses_.erase(use);
  }
  placed_.erase(it);
}

}  // namespace depot
