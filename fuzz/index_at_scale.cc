#include "fuzz/index_at_scale.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <utility>

#include "proto/index_layout.h"

namespace depot::fuzz {
namespace {

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz_index at scale: %s\n", what);
  std::abort();
}

uint64_t WordAt(const uint8_t* bytes) {
  uint64_t w;
  std::memcpy(&w, bytes, sizeof w);
  return w;
}

// What a lookup may return, whatever the index holds.
void CheckBounded(const std::optional<internal::IndexHit>& hit) {
  if (!hit) return;
  Check(hit->frames.size() >= 1 && hit->frames.size() <= proto::kMaxFrames, "frames out of bounds");
  Check(hit->metadata.size() <= proto::kMaxMetadataSize, "metadata out of bounds");
  Check(hit->id != 0, "a hit without an id");
}

bool Same(const internal::IndexHit& a, const internal::IndexHit& b) {
  return a.entry == b.entry && a.seq == b.seq && a.id == b.id && a.metadata == b.metadata &&
         a.frames.size() == b.frames.size() &&
         std::equal(a.frames.begin(), a.frames.end(), b.frames.begin(),
                    [](const wire::FrameLocation& x, const wire::FrameLocation& y) {
                      return std::memcmp(&x, &y, sizeof x) == 0;
                    });
}

}  // namespace

IndexAtScale::IndexAtScale(uint64_t objects) : objects_(objects) {
  table_ = std::make_unique<ObjectTable>(
      [this](const StoredObject& o) {
        Freed& f = freed_[o.id];
        ++f.times;
        f.indexed = f.indexed || o.indexed;
      },
      [] { return int64_t{0}; });
  // As a namespace starts: an index of 65,536 entries, which grows as the objects come.
  auto gets = LockFreeGets::Create(65536, uint64_t{1} << 24, kGranted, "fuzz-scale-",
                                   [](const Location&) { return true; });
  Check(gets.ok(), "no lock-free gets");
  gets_ = std::move(*gets);
  table_->set_slot_readers(gets_.get());
  auto joined = gets_->Join(1, 1000);
  Check(joined.ok() && gets_->Grant(1, kGranted) == kGranted, "no slots");
  gets_->Mapped(1);  // as when the daemon sends it a segment: its slots are read
  const uint64_t bytes = index::SlotFileBytes(kGranted);
  void* slots = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, (*joined)->fd(), 0);
  Check(slots != MAP_FAILED, "the slots cannot be mapped");
  slots_ = static_cast<uint64_t*>(slots);
  for (uint64_t n = 0; n < objects_; ++n) Add();
  Check(gets_->index().indexed() >= objects_ / 100 * 99, "the index did not grow to the objects");
  freed_.clear();
  std::fprintf(stderr, "fuzz_index at scale: %zu objects, %zu indexed in %llu sets\n",
               guids_.size(), gets_->index().indexed(),
               static_cast<unsigned long long>(gets_->index().sets()));
}

IndexAtScale::~IndexAtScale() {
  if (index_ != nullptr) ::munmap(index_, index_bytes_);
  ::munmap(slots_, index::SlotFileBytes(kGranted));
}

void IndexAtScale::Add() {
  uint64_t n = next_++;
  NewObject o;
  o.guid = Guid::Random();
  o.frames = {
      {.segment = 1 + static_cast<uint32_t>(n >> 20), .offset = (n & 0xfffff) * 64, .size = 64}};
  if (n % 4 == 0) o.metadata.assign(16, static_cast<uint8_t>(n));
  o.evictable = n % 2 == 1;
  o.creator = 2;
  Guid guid = o.guid;
  auto made = table_->Create(std::move(o));
  Check(made.ok(), "an object could not be made");
  ObjectId id = (*made)->id;
  Check(table_->Seal(2, guid).ok(), "an object could not be sealed");
  place_[id] = ids_.size();
  ids_.push_back(id);
  guids_.push_back(guid);
}

void IndexAtScale::MapIndex() {
  if (gets_->generation() == generation_) return;
  const ObjectIndex& index = gets_->index();
  if (index_ != nullptr) ::munmap(index_, index_bytes_);
  // The daemon's own view, read-write, reopened as its user may.
  std::string path = "/proc/self/fd/" + std::to_string(index.read_only_fd());
  UniqueFd rw(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  Check(rw.valid(), "the index cannot be reopened");
  index_bytes_ = index.size();
  void* map = ::mmap(nullptr, index_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, rw.get(), 0);
  Check(map != MAP_FAILED, "the index cannot be mapped");
  index_ = static_cast<uint8_t*>(map);
  UniqueFd ro(::fcntl(index.read_only_fd(), F_DUPFD_CLOEXEC, 0));
  auto reader = internal::IndexReader::Map(ro, index.sets(), index.arena_bytes());
  Check(reader.ok(), "the index cannot be read");
  reader_ = std::make_unique<internal::IndexReader>(std::move(*reader));
  generation_ = gets_->generation();
}

void IndexAtScale::Run(uint64_t small_sets, uint64_t arena, std::span<const uint8_t> index,
                       std::span<const uint8_t> slots, uint64_t hash) {
  PatchIndex(small_sets, arena, index, hash);
  UseSlots(slots, hash);
}

void IndexAtScale::PatchIndex(uint64_t small_sets, uint64_t arena, std::span<const uint8_t> bytes,
                              uint64_t hash) {
  MapIndex();
  const uint64_t sets = gets_->index().sets();
  const uint64_t arena_bytes = gets_->index().arena_bytes();
  constexpr uint64_t kSetBytes = index::kSetWords * 8;
  small_sets = std::min(small_sets, sets);
  const uint64_t first_set = hash % (sets - small_sets + 1);
  uint8_t* entries_at = index_ + index::kEntriesWord * 8 + first_set * kSetBytes;
  const uint64_t record_at =
      (hash >> 32) % ((arena_bytes - arena) / index::kRecordAlign + 1) * index::kRecordAlign;
  uint8_t* records_at = index_ + index::ArenaWord(sets) * 8 + record_at;

  // The input's sets (each entry's byte offset and its tag's, from the first set's), the record
  // offsets of entries whose frame is not inline moved to where its records go, and its records.
  std::vector<uint8_t> entries(small_sets * kSetBytes);
  std::memcpy(entries.data(), bytes.data(), std::min(bytes.size(), entries.size()));
  auto entry_at = [](uint64_t n) { return (index::EntryWord(n) - index::kEntriesWord) * 8; };
  auto tag_at = [](uint64_t n) { return (index::TagWord(n) - index::kEntriesWord) * 8; };
  const uint64_t patched = small_sets * index::kWays;
  for (uint64_t n = 0; n < patched; ++n) {
    uint8_t* e = &entries[entry_at(n)];
    if (index::ShapeFlags(WordAt(e + index::kShape * 8)) & index::kInline) continue;
    uint64_t record = WordAt(e + index::kRecord * 8) + record_at;
    std::memcpy(e + index::kRecord * 8, &record, sizeof record);
  }
  std::span<const uint8_t> records = bytes.subspan(std::min(bytes.size(), entries.size()));
  records = records.first(std::min<size_t>(records.size(), arena));

  // The GUIDs the patched entries name, before and after, and a sample of the table's.
  std::vector<Guid> named;
  for (const uint8_t* e : {const_cast<const uint8_t*>(entries_at), std::as_const(entries).data()}) {
    for (uint64_t n = 0; n < patched; ++n) {
      named.push_back(Guid{WordAt(e + tag_at(n)), WordAt(e + tag_at(n) + 8)});
    }
  }
  auto patched_set = [&](uint64_t set) { return set >= first_set && set < first_set + small_sets; };
  auto patched_record = [&](uint64_t record, uint64_t size) {
    return record < record_at + records.size() && record_at < record + size;
  };
  struct Sample {
    Guid guid;
    internal::IndexHit hit;
    bool untouched;
  };
  std::vector<Sample> samples;
  for (uint64_t k = 1; k <= 64; ++k) {
    const Guid& g = guids_[(hash ^ (k * 0x9e3779b97f4a7c15ULL)) % guids_.size()];
    auto hit = reader_->Find(g);
    if (!hit) continue;  // one of the few left out
    const uint64_t* e = reinterpret_cast<const uint64_t*>(index_) + hit->entry;
    bool in_arena = (index::ShapeFlags(e[index::kShape]) & index::kInline) == 0;
    bool untouched =
        !patched_set(index::SetOf(g, sets)) && !patched_set(index::SecondSetOf(g, sets)) &&
        !(in_arena && patched_record(e[index::kRecord],
                                     index::RecordBytes(hit->frames.size(), hit->metadata.size())));
    samples.push_back({g, std::move(*hit), untouched});
  }

  std::vector<uint8_t> old_entries(entries_at, entries_at + entries.size());
  std::vector<uint8_t> old_records(records_at, records_at + records.size());
  std::copy(entries.begin(), entries.end(), entries_at);
  std::copy(records.begin(), records.end(), records_at);
  for (const Guid& g : named) CheckBounded(reader_->Find(g));
  for (const Sample& s : samples) {
    auto hit = reader_->Find(s.guid);
    CheckBounded(hit);
    if (s.untouched) {
      Check(hit && Same(*hit, s.hit), "an entry the patch left alone reads differently");
    }
  }
  std::copy(old_entries.begin(), old_entries.end(), entries_at);
  std::copy(old_records.begin(), old_records.end(), records_at);
}

void IndexAtScale::UseSlots(std::span<const uint8_t> words, uint64_t hash) {
  freed_.clear();
  const uint64_t count = std::min<uint64_t>(words.size() / 8, kGranted);
  const uint64_t base = (hash >> 16) % (kGranted - count + 1);
  std::set<ObjectId> named;  // the table's objects the slots name
  for (uint64_t n = 0; n < count; ++n) {
    uint64_t w = WordAt(words.data() + n * 8);
    if (w >> 63) w = ids_[w % ids_.size()];
    if (place_.contains(w)) named.insert(w);
    slots_[index::SlotWord(base + n)] = w;
  }
  // The high-water word as an honest client writes it, too high, or too low.
  const uint64_t high[] = {base + count, ~uint64_t{0}, (base + count) / 2};
  slots_[index::kSlotHighWater] = high[words.size() % 3];
  const uint64_t read_to = std::min<uint64_t>(high[words.size() % 3], base + count);
  auto slot_holds = [&](ObjectId id) {
    for (uint64_t n = base; n < read_to; ++n) {
      if (slots_[index::SlotWord(n)] == id) return true;
    }
    return false;
  };

  // Up to four objects the slots name and four others, deleted two alone and the rest as a
  // request deletes them; then up to four evicted, as an allocation makes room.
  std::set<ObjectId> chosen;
  for (ObjectId id : named) {
    if (chosen.size() == 4) break;
    chosen.insert(id);
  }
  for (uint64_t k = 1; k <= 4; ++k) chosen.insert(ids_[(hash * k + k) % ids_.size()]);
  std::vector<Guid> victims;
  for (ObjectId id : chosen) victims.push_back(guids_[place_.at(id)]);
  for (size_t i = 0; i < victims.size() && i < 2; ++i) {
    Check(table_->Delete(victims[i]).ok(), "a delete failed");
  }
  {
    ObjectTable::FreeBatch batch(*table_);
    for (size_t i = 2; i < victims.size(); ++i) {
      Check(table_->Delete(victims[i]).ok(), "a delete failed");
    }
  }
  {
    ObjectTable::EvictionBatch evictions(*table_);
    for (int k = 0; k < 4 && table_->EvictLru(); ++k) {
    }
  }
  table_->FreeUnpinned();
  for (const auto& [id, f] : freed_) {
    Check(f.times == 1, "an object was freed twice");
    // One never in the index (left out for room) no get without a round trip could take: a
    // slot naming it holds nothing.
    Check(!f.indexed || !slot_holds(id), "an object was freed while a slot named it");
  }

  // The slots emptied: everything deleted or evicted goes.
  for (uint64_t n = 0; n < count; ++n) slots_[index::SlotWord(base + n)] = 0;
  slots_[index::kSlotHighWater] = 0;
  Check(!table_->FreeUnpinned(), "objects stay pinned by empty slots");
  Check(table_->counts().deleted == 0, "deleted objects were never freed");
  for (ObjectId id : chosen) Check(freed_.count(id) == 1, "a deleted object was never freed");
  for (const auto& [id, f] : freed_) Check(f.times == 1, "an object was freed twice");

  // Freed objects make room for as many new ones.
  for (const auto& entry : freed_) {
    size_t at = place_.at(entry.first);
    place_[ids_.back()] = at;
    ids_[at] = ids_.back();
    guids_[at] = guids_.back();
    ids_.pop_back();
    guids_.pop_back();
    place_.erase(entry.first);
  }
  Check(table_->counts().sealed == ids_.size(), "the table and the harness disagree");
  while (ids_.size() < objects_) Add();
}

}  // namespace depot::fuzz
