// Fuzz target for gets without a round trip, both sides of the shared memory:
//   - the client's IndexReader over an index whose bytes come from the input (what a corrupt
//     index, or a daemon of another user, could show it), looking up the GUIDs its entries name;
//   - the daemon's use of reference slots whose contents come from the input (what a hostile
//     client writes there): an object table with eight objects, half evictable, deletes four,
//     evicts, frees what no slot holds; then the slots are emptied.
//
// Input: one byte (bits 0-1: the index has 1 << n sets), then the index's bytes (its entries, then
// a 512-byte arena; zeros past the input's end; the layout words before them are the target's),
// then up to 1024 8-byte slot words.
//
// Checks, besides the sanitizers: the reader never returns more frames or metadata than an
// object may have; every object is freed exactly once, none while a slot still named it when
// the daemon looked, and all of them once the slots are empty.
//
// At scale: with DEPOT_FUZZ_INDEX_OBJECTS=N in the environment, every input runs against one
// table of N objects, an index grown to hold them and 131,072 slots, made once: its index bytes
// go over real entries and records, its slot words into the slots at a place its hash picks
// (fuzz/index_at_scale.h says what is checked there).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <span>
#include <vector>

#include "client/src/index_reader.h"
#include "client/src/slot_table.h"
#include "daemon/lock_free_gets.h"
#include "fuzz/index_at_scale.h"
#include "proto/index_layout.h"

namespace {

using namespace depot;

constexpr uint64_t kArena = 512;

void Check(bool ok) {
  if (!ok) std::abort();
}

void ReadIndex(const uint8_t*& data, size_t& size, uint64_t sets) {
  // The input is the entries and the arena; the layout words are the daemon's.
  uint64_t bytes = index::IndexBytes(sets, kArena);
  UniqueFd fd(::memfd_create("fuzz-index", MFD_CLOEXEC));
  Check(fd.valid() && ::ftruncate(fd.get(), static_cast<off_t>(bytes)) == 0);
  const uint64_t layout_words[] = {index::kIndexLayout.magic, index::kIndexLayout.version};
  Check(::pwrite(fd.get(), layout_words, sizeof layout_words, 0) ==
        static_cast<ssize_t>(sizeof layout_words));
  constexpr uint64_t kFirst = index::kEntriesWord * 8;
  size_t take = std::min<size_t>(size, bytes - kFirst);
  Check(::pwrite(fd.get(), data, take, kFirst) == static_cast<ssize_t>(take));
  data += take;
  size -= take;
  auto reader = internal::IndexReader::Map(fd, sets, kArena);
  Check(reader.ok());
  std::vector<uint64_t> words(bytes / 8);
  Check(::pread(fd.get(), words.data(), bytes, 0) == static_cast<ssize_t>(bytes));
  for (uint64_t n = 0; n < sets * index::kWays; ++n) {
    const uint64_t* tag = words.data() + index::TagWord(n);
    auto hit = reader->Find(Guid{tag[0], tag[1]});
    if (!hit) continue;
    Check(hit->frames.size() >= 1 && hit->frames.size() <= proto::kMaxFrames);
    Check(hit->metadata.size() <= proto::kMaxMetadataSize);
    Check(hit->id != 0);
  }
}

void UseSlots(const uint8_t* data, size_t size) {
  std::map<ObjectId, int> freed;
  ObjectTable table([&](const StoredObject& o) { ++freed[o.id]; }, [] { return int64_t{0}; });
  // Slots past the first kSlotCount too: the session is granted twice as many.
  constexpr uint32_t kGranted = 2 * index::kSlotCount;
  auto gets = LockFreeGets::Create(16, 16, kGranted, "fuzz-", [](const Location&) { return true; });
  Check(gets.ok());
  table.set_slot_readers(gets->get());
  auto joined = (*gets)->Join(1, 1000);
  Check(joined.ok());
  (*gets)->Mapped(1);  // as when the daemon sends it a segment: its slots are read
  Check((*gets)->Grant(1, kGranted) == kGranted);
  UniqueFd fd(::fcntl((*joined)->fd(), F_DUPFD_CLOEXEC, 0));
  const uint64_t bytes = index::SlotFileBytes(kGranted);
  auto* slots = static_cast<uint64_t*>(
      ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0));
  Check(slots != MAP_FAILED);
  for (uint64_t n = 1; n <= 8; ++n) {
    NewObject o;
    o.guid = Guid{n, n};
    o.frames = {{.segment = 1, .offset = n * 64, .size = 64}};
    o.evictable = n > 4;
    o.creator = 2;
    Check(table.Create(std::move(o)).ok());
    Check(table.Seal(2, Guid{n, n}).ok());
  }
  size_t count = std::min<size_t>(size / 8, kGranted);
  for (size_t n = 0; n < count; ++n) std::memcpy(slots + index::SlotWord(n), data + n * 8, 8);
  // The high-water word as an honest client writes it, too high, or too low (clamped, read as is).
  const uint64_t high[] = {count, ~uint64_t{0}, count / 2};
  slots[index::kSlotHighWater] = high[size % 3];
  uint64_t used = std::min<uint64_t>(high[size % 3], kGranted);
  auto slot_holds = [&](ObjectId id) {
    for (uint64_t n = 0; n < used; ++n) {
      if (slots[index::SlotWord(n)] == id) return true;
    }
    return false;
  };
  // Two deletes on their own, two as a request deletes them (one read of the slots for both).
  for (uint64_t n = 1; n <= 2; ++n) Check(table.Delete(Guid{n, n}).ok());
  {
    ObjectTable::FreeBatch batch(table);
    for (uint64_t n = 3; n <= 4; ++n) Check(table.Delete(Guid{n, n}).ok());
  }
  {
    ObjectTable::EvictionBatch evictions(table);  // as an allocation makes room
    while (table.EvictLru()) {
    }
  }
  table.FreeUnpinned();
  for (auto [id, times] : freed) Check(times == 1 && !slot_holds(id));
  for (uint64_t n = 0; n < kGranted; ++n) slots[index::SlotWord(n)] = 0;  // the layout words stay
  Check(!table.FreeUnpinned());
  while (table.EvictLru()) {
  }
  Check(freed.size() == 4 + 4 && table.counts().deleted == 0);
  for (auto [id, times] : freed) Check(times == 1);
  ::munmap(slots, bytes);
}

// The table at scale, when DEPOT_FUZZ_INDEX_OBJECTS asks for one (null otherwise): made before
// the first input, so that making it counts against no input's time.
fuzz::IndexAtScale* AtScale() {
  static fuzz::IndexAtScale* at_scale = [] {
    const char* objects = std::getenv("DEPOT_FUZZ_INDEX_OBJECTS");
    return objects == nullptr ? nullptr
                              : new fuzz::IndexAtScale(std::strtoull(objects, nullptr, 10));
  }();
  return at_scale;
}

// FNV-1a: where an input's bytes go at scale, the same for the same input.
uint64_t Hash(const uint8_t* data, size_t size) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 0x100000001b3ULL;
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  AtScale();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  uint64_t sets = uint64_t{1} << (data[0] & 3);
  if (fuzz::IndexAtScale* at_scale = AtScale()) {
    uint64_t hash = Hash(data, size);
    std::span<const uint8_t> rest(data + 1, size - 1);
    size_t index_bytes =
        std::min<size_t>(rest.size(), index::IndexBytes(sets, kArena) - index::kEntriesWord * 8);
    at_scale->Run(sets, kArena, rest.first(index_bytes), rest.subspan(index_bytes), hash);
    return 0;
  }
  ++data;
  --size;
  ReadIndex(data, size, sets);
  UseSlots(data, size);
  return 0;
}
