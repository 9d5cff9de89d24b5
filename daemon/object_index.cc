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
  auto memory = SealedMemfd(name, table * 2);  // the arena: as many bytes as the entries
  if (!memory.ok()) return memory.status();
  auto map = SharedMapping::Map(memory->fd.get(), memory->size, true, "object index");
  if (!map.ok()) return map.status();
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
  uint64_t set = index::SetOf(o.guid, sets_);
  uint64_t n = set * index::kWays;
  while (n < (set + 1) * index::kWays && used_[n]) ++n;
  if (n == (set + 1) * index::kWays) return false;
  uint64_t bytes = index::RecordBytes(frames.size(), metadata.size());
  auto record = arena_.Allocate(bytes);
  if (!record) return false;

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
  placed_[o.id] = {n * index::kEntryWords, *record, bytes};
  return true;
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
  placed_.erase(it);
}

}  // namespace depot
