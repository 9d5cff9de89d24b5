// Tests for the shared index and reference slots behind gets without a round trip, both sides:
// the daemon's writer (ObjectIndex), slots (ReferenceSlots) and their use by the object table
// (LockFreeGets), against the client's reader (IndexReader) and slots (SlotTable) on the same
// memfds. The last test races readers against a writer that withdraws and reuses memory, and
// runs under ThreadSanitizer too.
#include "daemon/object_index.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <thread>
#include <unordered_set>
#include <vector>

#include "client/src/index_reader.h"
#include "client/src/slot_table.h"
#include "daemon/lock_free_gets.h"
#include "daemon/reference_slots.h"
#include "proto/index_layout.h"

namespace depot {
namespace {

using internal::IndexReader;
using internal::SlotTable;

Guid G(uint64_t n) { return Guid{0x5000 + n, n * 7 + 1}; }

UniqueFd Dup(int fd) { return UniqueFd(::fcntl(fd, F_DUPFD_CLOEXEC, 0)); }

StoredObject Object(ObjectId id, std::vector<Location> frames, std::string metadata = "") {
  StoredObject o(frames, "", {reinterpret_cast<const uint8_t*>(metadata.data()), metadata.size()});
  o.id = id;
  o.guid = G(id);
  o.creator_uid = 1000;
  o.creator_pid = 4242;
  return o;
}

IndexReader Reader(const ObjectIndex& index) {
  auto r = IndexReader::Map(Dup(index.read_only_fd()), index.sets(), index.arena_bytes());
  REQUIRE(r.ok());
  return std::move(*r);
}

TEST_CASE("the index gives a reader an object's frames, metadata and creator until removed",
          "[index]") {
  auto index = ObjectIndex::Create(64, "index-test");
  REQUIRE(index.ok());
  IndexReader reader = Reader(**index);
  StoredObject o = Object(7,
                          {{.segment = 3, .offset = 4096, .size = 100},
                           {.segment = 4, .pool = 1, .offset = 0, .size = 0}},
                          "some metadata");
  o.has_checksum = true;
  o.checksum = 0xabcdef;
  CHECK_FALSE(reader.Find(o.guid));
  REQUIRE((*index)->Insert(o));
  auto hit = reader.Find(o.guid);
  REQUIRE(hit);
  CHECK(hit->id == 7);
  REQUIRE(hit->frames.size() == 2);
  CHECK(hit->frames[0].segment() == 3);
  CHECK(hit->frames[0].offset() == 4096);
  CHECK(hit->frames[0].size() == 100);
  CHECK(hit->frames[1].pool() == 1);
  CHECK(std::string(reinterpret_cast<const char*>(hit->metadata.data()), hit->metadata.size()) ==
        "some metadata");
  CHECK(hit->checksum == 0xabcdef);
  CHECK(hit->creator_uid == 1000);
  CHECK(hit->creator_pid == 4242);
  CHECK(reader.Unchanged(*hit));
  CHECK_FALSE(reader.Find(G(8)));

  (*index)->Remove(7);
  CHECK_FALSE(reader.Unchanged(*hit));
  CHECK_FALSE(reader.Find(o.guid));
  CHECK((*index)->indexed() == 0);
}

TEST_CASE("an object that does not fit is left out of the index, and the rest stay right",
          "[index]") {
  auto index = ObjectIndex::Create(1, "index-test");  // one set of kWays entries
  REQUIRE(index.ok());
  REQUIRE((*index)->sets() == 1);
  IndexReader reader = Reader(**index);
  std::vector<StoredObject> objects;
  for (ObjectId id = 1; id <= index::kWays + 1; ++id) {
    objects.push_back(Object(id, {{.segment = 1, .offset = id * 64, .size = id}}));
  }
  for (uint32_t i = 0; i < index::kWays; ++i) CHECK((*index)->Insert(objects[i]));
  CHECK_FALSE((*index)->Insert(objects.back()));  // the set is full
  CHECK_FALSE(reader.Find(objects.back().guid));
  for (uint32_t i = 0; i < index::kWays; ++i) {
    auto hit = reader.Find(objects[i].guid);
    REQUIRE(hit);
    CHECK(hit->frames[0].size() == objects[i].id);
  }
  // Metadata larger than the arena does not fit either.
  (*index)->Remove(1);
  std::string big((*index)->arena_bytes() + 8, 'x');
  CHECK_FALSE((*index)->Insert(Object(1, {{.segment = 1, .size = 1}}, big)));
  CHECK((*index)->Insert(objects[0]));
}

TEST_CASE("a corrupt index makes the reader miss, never crash or read outside it", "[index]") {
  uint64_t sets = 4;
  uint64_t arena = 4096;
  uint64_t size = index::IndexBytes(sets, arena);
  UniqueFd fd(::memfd_create("corrupt-index", MFD_CLOEXEC));
  REQUIRE(::ftruncate(fd.get(), static_cast<off_t>(size)) == 0);
  auto* words = static_cast<uint64_t*>(
      ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0));
  REQUIRE(words != MAP_FAILED);
  layout::Write(words, index::kIndexLayout);
  auto reader = IndexReader::Map(fd, sets, arena);
  REQUIRE(reader.ok());
  std::mt19937_64 rng(13);
  for (int round = 0; round < 2000; ++round) {
    for (uint64_t i = index::kEntriesWord; i < size / 8; ++i) words[i] = rng();
    // Entries that name the GUID looked up, with garbage everywhere else in them.
    Guid g{rng(), rng()};
    uint64_t set = index::SetOf(g, sets);
    for (uint64_t n = set * index::kWays; n < (set + 1) * index::kWays; ++n) {
      uint64_t* e = words + index::EntryWord(n);
      e[index::kSeq] &= ~uint64_t{1};
      words[index::TagWord(n)] = g.hi;
      words[index::TagWord(n) + 1] = g.lo;
      // Shapes near the real ones, with or without the frame in the entry.
      if (round % 2 == 0) e[index::kShape] = index::Shape(rng() % 4, rng() % 4, rng() % 64);
      if (round % 4 == 0) e[index::kRecord] = (rng() % 8) * 64;
    }
    auto hit = reader->Find(g);
    if (hit) {
      CHECK(hit->frames.size() >= 1);
      CHECK(hit->frames.size() <= proto::kMaxFrames);
      CHECK(hit->metadata.size() <= proto::kMaxMetadataSize);
    }
  }
  ::munmap(words, size);
  // A file smaller than the geometry claimed, or a geometry that makes no sense, is refused.
  CHECK(IndexReader::Map(fd, sets * 2, arena).status().IsProtocolError());
  CHECK(IndexReader::Map(fd, 3, arena).status().IsProtocolError());
  CHECK(IndexReader::Map(fd, 0, arena).status().IsProtocolError());
}

TEST_CASE("the daemon sees the ids a client publishes in its slots, until cleared", "[index]") {
  auto slots = ReferenceSlots::Create("slots-test");
  REQUIRE(slots.ok());
  auto table = SlotTable::Map(Dup((*slots)->fd()), index::kSlotCount);
  REQUIRE(table.ok());
  auto a = table->Publish(11);
  auto b = table->Publish(12);
  REQUIRE(a);
  REQUIRE(b);
  CHECK((*slots)->Holds(11));
  CHECK((*slots)->Holds(12));
  CHECK_FALSE((*slots)->Holds(13));
  table->Clear(*a);
  CHECK_FALSE((*slots)->Holds(11));
  // Every slot taken: the next publish is refused (the client asks the daemon instead).
  std::vector<uint32_t> taken;
  while (auto s = table->Publish(99)) taken.push_back(*s);
  CHECK(taken.size() == index::kSlotCount - 1);
  CHECK_FALSE(table->Publish(100));
  for (uint32_t s : taken) table->Clear(s);
  CHECK(table->Publish(100));
  // Sealed: no holder of its descriptor can make the daemon's reads of it fault.
  CHECK(::ftruncate((*slots)->fd(), 0) != 0);
  CHECK(::ftruncate((*slots)->fd(), 1 << 20) != 0);
  // A slot table larger than its file is refused.
  CHECK(SlotTable::Map(Dup((*slots)->fd()), index::kMaxSlots + 1).status().IsProtocolError());
}

// An object table with the lock-free path on, one session's slots mapped as its client would.
struct TableWithSlots {
  TableWithSlots() {
    auto made = LockFreeGets::Create(64, 64, 0, "test-", [](const Location&) { return true; });
    REQUIRE(made.ok());
    gets = std::move(*made);
    table.set_slot_readers(gets.get());
    auto joined = gets->Join(1, 1000);
    REQUIRE(joined.ok());
    gets->Mapped(1);  // as when the daemon sends it a segment: its slots are read
    auto mapped = SlotTable::Map(Dup((*joined)->fd()), index::kSlotCount);
    REQUIRE(mapped.ok());
    slots.emplace(std::move(*mapped));
    auto r = IndexReader::Map(Dup(gets->index().read_only_fd()), gets->index().sets(),
                              gets->index().arena_bytes());
    REQUIRE(r.ok());
    reader.emplace(std::move(*r));
  }
  ObjectId Put(uint64_t n, bool evictable = false) {
    NewObject o;
    o.guid = G(n);
    o.frames = {{.segment = 1, .offset = n * 64, .size = 64}};
    o.evictable = evictable;
    o.creator = 9;
    auto r = table.Create(std::move(o));
    REQUIRE(r.ok());
    REQUIRE(table.Seal(9, G(n)).ok());
    return (*r)->id;
  }
  // A client's get from the index: the slot it holds the object by.
  uint32_t Hold(uint64_t n) {
    auto hit = reader->Find(G(n));
    REQUIRE(hit);
    auto slot = slots->Publish(hit->id);
    REQUIRE(slot);
    REQUIRE(reader->Unchanged(*hit));
    return *slot;
  }

  std::map<ObjectId, int> freed;
  ObjectTable table{[this](const StoredObject& o) { ++freed[o.id]; }, [] { return int64_t{0}; }};
  std::unique_ptr<LockFreeGets> gets;
  std::optional<SlotTable> slots;
  std::optional<IndexReader> reader;
};

TEST_CASE("a deleted object a slot holds is freed once the slot lets go, and only then",
          "[index]") {
  TableWithSlots t;
  ObjectId id = t.Put(1);
  uint32_t slot = t.Hold(1);
  REQUIRE(t.table.Delete(G(1)).ok());
  CHECK_FALSE(t.reader->Find(G(1)));  // gone from the index at once
  CHECK(t.freed[id] == 0);
  CHECK(t.table.pinned() == 1);
  CHECK(t.table.counts().deleted == 1);
  CHECK(t.table.FreeUnpinned());  // still held
  t.slots->Clear(slot);
  CHECK_FALSE(t.table.FreeUnpinned());
  CHECK(t.freed[id] == 1);
  CHECK(t.table.counts().deleted == 0);
  // A session that closes lets go of whatever its slots held.
  ObjectId other = t.Put(2);
  t.Hold(2);
  REQUIRE(t.table.Delete(G(2)).ok());
  CHECK(t.freed[other] == 0);
  t.gets->Leave(1);
  t.table.FreeUnpinned();
  CHECK(t.freed[other] == 1);
}

TEST_CASE("eviction passes over objects a slot holds and keeps them in the index", "[index]") {
  TableWithSlots t;
  ObjectId held = t.Put(1, true);
  ObjectId loose = t.Put(2, true);
  uint32_t slot = t.Hold(1);
  REQUIRE(t.table.EvictLru());
  CHECK(t.freed[loose] == 1);
  CHECK(t.freed[held] == 0);
  CHECK_FALSE(t.table.EvictLru());  // only the held one is left
  CHECK(t.reader->Find(G(1)));      // back in the index for the next get
  t.slots->Clear(slot);
  CHECK(t.table.EvictLru());
  CHECK(t.freed[held] == 1);
  CHECK_FALSE(t.reader->Find(G(1)));
}

TEST_CASE("the client keeps its slots low and the daemon reads only up to the high-water word",
          "[index]") {
  auto slots = ReferenceSlots::Create("slots-high");
  REQUIRE(slots.ok());
  auto table = SlotTable::Map(Dup((*slots)->fd()), index::kSlotCount);
  REQUIRE(table.ok());
  UniqueFd fd = Dup((*slots)->fd());
  auto* words = static_cast<uint64_t*>(
      ::mmap(nullptr, index::kSlotBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0));
  REQUIRE(words != MAP_FAILED);
  uint64_t& high = words[index::kSlotHighWater];
  CHECK(high == 0);  // an idle session costs the daemon this one word
  auto a = table->Publish(21), b = table->Publish(22), c = table->Publish(23);
  CHECK(*a == 0);
  CHECK(*b == 1);
  CHECK(*c == 2);
  CHECK(high == 3);
  table->Clear(*b);
  CHECK(high == 3);                 // slot 2 is still in use
  CHECK(*table->Publish(24) == 1);  // the lowest free slot is taken again
  table->Clear(1);
  table->Clear(*c);
  CHECK(high == 1);  // the free slots at the top are not read
  CHECK((*slots)->Holds(21));
  // A client that writes an id above its high-water word, or lowers the word under its own
  // holds, gives up those holds: the daemon does not read them.
  words[index::kSlotsWord + 7] = 77;
  CHECK_FALSE((*slots)->Holds(77));
  high = 0;
  CHECK_FALSE((*slots)->Holds(21));
  // One that raises it past the slots is read up to the last slot, never beyond.
  high = ~uint64_t{0};
  CHECK((*slots)->Holds(77));
  CHECK_FALSE((*slots)->Holds(~uint64_t{0}));
  std::unordered_set<ObjectId> ids;
  (*slots)->Collect(ids);
  CHECK(ids == std::unordered_set<ObjectId>{21, 77});
  ::munmap(words, index::kSlotBytes);
  // Slots without the layout (a daemon older than the layout words, whose file held the slots and
  // the word only) are refused.
  UniqueFd bare(::memfd_create("slots-bare", MFD_CLOEXEC));
  REQUIRE(::ftruncate(bare.get(), (index::kSlotCount + 1) * 8) == 0);
  CHECK(SlotTable::Map(bare, index::kSlotCount).status().IsProtocolError());
}

TEST_CASE("deleted objects slots held are freed together once let go and unindexed ones at once",
          "[index]") {
  TableWithSlots t;
  std::vector<ObjectId> ids;
  for (uint64_t n = 1; n <= 5; ++n) ids.push_back(t.Put(n));
  uint32_t a = t.Hold(2), b = t.Hold(4);
  for (uint64_t n = 1; n <= 5; ++n) REQUIRE(t.table.Delete(G(n)).ok());
  for (ObjectId id : ids) CHECK(t.freed[id] == (id == ids[1] || id == ids[3] ? 0 : 1));
  CHECK(t.table.pinned() == 2);
  CHECK(t.table.FreeUnpinned());  // both still held
  t.slots->Clear(a);
  CHECK(t.table.FreeUnpinned());
  CHECK(t.freed[ids[1]] == 1);
  CHECK(t.freed[ids[3]] == 0);
  t.slots->Clear(b);
  CHECK_FALSE(t.table.FreeUnpinned());
  CHECK(t.freed[ids[3]] == 1);

  // Objects the index never held cannot be in a slot: their memory goes without reading any.
  int plain_freed = 0;
  ObjectTable plain{[&](const StoredObject&) { ++plain_freed; }, [] { return int64_t{0}; }};
  auto unindexed =
      LockFreeGets::Create(64, 64, 0, "test-plain-", [](const Location&) { return false; });
  REQUIRE(unindexed.ok());
  plain.set_slot_readers(unindexed->get());
  NewObject o;
  o.guid = G(9);
  o.frames = {{.segment = 1, .offset = 0, .size = 64}};
  o.creator = 9;
  auto made = plain.Create(std::move(o));
  REQUIRE(made.ok());
  REQUIRE(plain.Seal(9, G(9)).ok());
  CHECK_FALSE((*made)->indexed);
  REQUIRE(plain.Delete(G(9)).ok());
  CHECK(plain.pinned() == 0);
  CHECK(plain_freed == 1);
}

// Readers race a writer that publishes objects, withdraws them and reuses their memory once no
// slot holds them. Each object's "bytes" are one cell, which holds its id while it lives: a
// reader that holds an object must always read that id there (never a freed or reused cell).
TEST_CASE("readers racing withdrawals and reuse never hold a freed object", "[index][stress]") {
  constexpr uint64_t kCells = 16;
  auto index = ObjectIndex::Create(4, "index-stress");  // one set: every entry contended
  REQUIRE(index.ok());
  auto slots = ReferenceSlots::Create("slots-stress");
  REQUIRE(slots.ok());
  auto table = SlotTable::Map(Dup((*slots)->fd()), index::kSlotCount);
  REQUIRE(table.ok());
  IndexReader reader = Reader(**index);
  std::vector<std::atomic<uint64_t>> cells(kCells);
  std::atomic<uint64_t> newest{0};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> held{0}, torn{0};

  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&, r] {
      std::mt19937_64 rng(r);
      while (!stop.load(std::memory_order_relaxed)) {
        uint64_t top = newest.load(std::memory_order_relaxed);
        if (top == 0) continue;
        uint64_t id = top - rng() % std::min<uint64_t>(top, 8);
        auto hit = reader.Find(G(id));
        if (!hit) continue;
        auto slot = table->Publish(hit->id);
        if (!slot) continue;
        if (reader.Unchanged(*hit)) {
          ++held;
          uint64_t cell = hit->frames[0].offset();
          for (int i = 0; i < 4; ++i) {
            if (cell >= kCells || cells[cell].load(std::memory_order_relaxed) != hit->id) ++torn;
          }
        }
        table->Clear(*slot);
      }
    });
  }

  // The writer: objects live in cells; a withdrawn one's cell is reused only when no slot
  // holds it.
  std::mt19937_64 rng(99);
  std::map<ObjectId, uint64_t> live, withdrawn;  // id -> cell
  std::vector<uint64_t> free_cells;
  for (uint64_t c = 0; c < kCells; ++c) free_cells.push_back(c);
  ObjectId next = 1;
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(400);
  while (std::chrono::steady_clock::now() < until) {
    if (!free_cells.empty() && rng() % 2 == 0) {
      uint64_t cell = free_cells.back();
      free_cells.pop_back();
      ObjectId id = next++;
      cells[cell].store(id, std::memory_order_relaxed);
      if ((*index)->Insert(Object(id, {{.segment = 1, .offset = cell, .size = 8}}))) {
        newest.store(id, std::memory_order_relaxed);
      }
      live[id] = cell;
    } else if (!live.empty()) {
      auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
      (*index)->Remove(it->first);
      withdrawn.insert(*it);
      live.erase(it);
    }
    for (auto it = withdrawn.begin(); it != withdrawn.end();) {
      if ((*slots)->Holds(it->first)) {
        ++it;
        continue;
      }
      cells[it->second].store(0, std::memory_order_relaxed);  // freed, then reused
      free_cells.push_back(it->second);
      it = withdrawn.erase(it);
    }
  }
  stop = true;
  for (auto& t : readers) t.join();
  CHECK(torn == 0);
  CHECK(held > 0);
  INFO("holds " << held << ", objects " << next);
}

}  // namespace
}  // namespace depot
