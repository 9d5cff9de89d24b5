// Tests for depot::ObjectTable (daemon/object_table.h): every lifecycle transition, and that each
// object's memory is handed to the FreeFn exactly once, at the right moment.
#include "daemon/object_table.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <vector>

namespace depot {
namespace {

Guid G(uint64_t n) { return Guid{0x1000 + n, n * 7}; }

// An ObjectTable whose FreeFn counts frees per object and whose clock ticks once per call.
class TableFixture {
 public:
  TableFixture()
      : table_(
            [this](const StoredObject& o) {
              ++freed_[o.id];
              freed_guids_.push_back(o.guid);
            },
            [this] { return ++now_; }) {}

  // Creates an object of one frame of `size` bytes (or frames of `sizes`) and returns its id.
  ObjectId Create(const Guid& guid, SessionId creator, bool evictable = false,
                  std::vector<uint64_t> sizes = {100}) {
    NewObject n;
    n.guid = guid;
    uint64_t offset = 0;
    for (uint64_t s : sizes) {
      n.frames.push_back(Location{.segment = 1, .offset = offset, .size = s});
      offset += 4096;
    }
    n.evictable = evictable;
    n.creator = creator;
    auto r = table_.Create(std::move(n));
    REQUIRE(r.ok());
    return (*r)->id;
  }

  ObjectId CreateSealed(const Guid& guid, SessionId creator, bool evictable = false,
                        std::vector<uint64_t> sizes = {100}) {
    ObjectId id = Create(guid, creator, evictable, std::move(sizes));
    REQUIRE(table_.Seal(creator, guid).ok());
    return id;
  }

  ObjectId Acquire(SessionId session, const Guid& guid) {
    auto r = table_.Acquire(session, guid);
    REQUIRE(r.ok());
    return (*r)->id;
  }

  int FreedCount(ObjectId id) const {
    auto it = freed_.find(id);
    return it == freed_.end() ? 0 : it->second;
  }

  // No object may ever be freed twice.
  void CheckFreedAtMostOnce() const {
    for (const auto& [id, count] : freed_) {
      CAPTURE(id);
      CHECK(count == 1);
    }
  }

  ObjectTable table_;
  std::map<ObjectId, int> freed_;
  std::vector<Guid> freed_guids_;  // in the order they were freed
  int64_t now_ = 0;
};

TEST_CASE_METHOD(TableFixture, "Create adds a Creating object and rejects a taken GUID",
                 "[object_table]") {
  ObjectId a = Create(G(1), 10);
  const StoredObject* o = table_.Find(G(1));
  REQUIRE(o != nullptr);
  CHECK(o->id == a);
  CHECK(o->state == ObjectState::kCreating);
  CHECK(o->creator == 10);
  CHECK(o->created_ns == 1);  // the injected clock, not the real one
  CHECK(table_.counts().creating == 1);

  NewObject dup;
  dup.guid = G(1);
  dup.creator = 11;
  auto r = table_.Create(dup);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().IsAlreadyExists());

  REQUIRE(table_.Seal(10, G(1)).ok());
  auto r2 = table_.Create(dup);  // still taken once sealed
  CHECK(r2.status().IsAlreadyExists());
  CHECK(table_.counts().creating == 0);
  CHECK(table_.counts().sealed == 1);

  ObjectId b = Create(G(2), 10);
  CHECK(b != a);
  CHECK(freed_.empty());
}

TEST_CASE_METHOD(TableFixture, "Seal: only the creator, only once", "[object_table]") {
  Create(G(1), 10);
  CHECK(table_.Seal(99, G(2)).IsNotFound());
  CHECK(table_.Seal(11, G(1)).IsPermissionDenied());
  CHECK(table_.Find(G(1))->state == ObjectState::kCreating);

  REQUIRE(table_.Seal(10, G(1)).ok());
  const StoredObject* o = table_.Find(G(1));
  CHECK(o->state == ObjectState::kSealed);
  CHECK(o->sealed_ns > o->created_ns);
  CHECK(table_.Seal(10, G(1)).IsInvalidArgument());
  CHECK(table_.counts().creating == 0);
  CHECK(table_.counts().sealed == 1);
  CHECK(freed_.empty());
}

TEST_CASE_METHOD(TableFixture, "Abort frees a never-sealed object once", "[object_table]") {
  ObjectId a = Create(G(1), 10);
  CHECK(table_.Abort(10, G(2)).IsNotFound());
  CHECK(table_.Abort(11, G(1)).IsPermissionDenied());
  CHECK(FreedCount(a) == 0);

  REQUIRE(table_.Abort(10, G(1)).ok());
  CHECK(FreedCount(a) == 1);
  CHECK(table_.Find(G(1)) == nullptr);
  CHECK(table_.counts().creating == 0);
  CHECK(table_.Abort(10, G(1)).IsNotFound());

  // A sealed object cannot be aborted; its GUID is free again after the abort above.
  CreateSealed(G(1), 10);
  CHECK(table_.Abort(10, G(1)).IsInvalidArgument());
  CheckFreedAtMostOnce();
}

TEST_CASE_METHOD(TableFixture, "Acquire needs a sealed object and counts per session",
                 "[object_table]") {
  CHECK(table_.Acquire(20, G(1)).status().IsNotFound());
  ObjectId a = Create(G(1), 10);
  CHECK(table_.Acquire(20, G(1)).status().IsTimeout());
  CHECK(table_.HeldBy(20, a) == 0);

  REQUIRE(table_.Seal(10, G(1)).ok());
  CHECK(Acquire(20, G(1)) == a);
  CHECK(Acquire(20, G(1)) == a);
  CHECK(table_.HeldBy(20, a) == 2);
  CHECK(table_.Find(G(1))->refcount == 1);  // one session, however many acquires
  Acquire(21, G(1));
  CHECK(table_.HeldBy(21, a) == 1);
  CHECK(table_.Find(G(1))->refcount == 2);
}

// Acquiring 2^32 times takes too long for a test: the count's type is what keeps it from wrapping
// (a wrapped count would let one release free an object the session still holds).
static_assert(std::numeric_limits<ObjectTable::HoldCount>::max() >= (uint64_t{1} << 63),
              "a session's hold count must not wrap at 2^32 acquires");

TEST_CASE_METHOD(TableFixture,
                 "Objects held by a user's joined sessions are counted against its cap",
                 "[object_table]") {
  UserCap cap(2, "objects held through depotd", "max_references_per_user");
  for (uint64_t n = 1; n <= 3; ++n) CreateSealed(G(n), 10);
  table_.Join(20, 1000, &cap);
  table_.Join(21, 1000, &cap);  // the same user's other connection
  Acquire(20, G(1));
  Acquire(20, G(1));  // again: no new object held
  Acquire(21, G(2));
  CHECK(cap.top_user() == 2);
  auto refused = table_.Acquire(21, G(3));
  CHECK(refused.status().IsQuotaExceeded());
  CHECK(table_.Find(G(3))->refcount == 0);  // nothing held by the refusal
  CHECK(table_.HeldBy(21, table_.Find(G(3))->id) == 0);
  // A session that did not join (another user's, here) is not counted.
  Acquire(30, G(3));
  CHECK(cap.top_user() == 2);
  // The last release of an object, and the end of a session, give back what they held.
  ObjectId one = table_.Find(G(1))->id;
  REQUIRE(table_.Release(20, one).ok());
  CHECK(cap.top_user() == 2);
  REQUIRE(table_.Release(20, one).ok());
  CHECK(cap.top_user() == 1);
  Acquire(20, G(3));
  table_.DropSession(21);
  CHECK(cap.top_user() == 1);
  table_.DropSession(20);
  CHECK(cap.top_user() == 0);
}

TEST_CASE_METHOD(TableFixture, "Release drops one acquire at a time", "[object_table]") {
  ObjectId a = CreateSealed(G(1), 10);
  CHECK(table_.Release(20, a).IsNotFound());  // never acquired
  Acquire(20, G(1));
  Acquire(20, G(1));
  CHECK(table_.Release(21, a).IsNotFound());        // another session
  CHECK(table_.Release(20, a + 100).IsNotFound());  // another object

  REQUIRE(table_.Release(20, a).ok());
  CHECK(table_.HeldBy(20, a) == 1);
  CHECK(table_.Find(G(1))->refcount == 1);
  REQUIRE(table_.Release(20, a).ok());
  CHECK(table_.HeldBy(20, a) == 0);
  CHECK(table_.Find(G(1))->refcount == 0);
  CHECK(table_.Release(20, a).IsNotFound());
  CHECK(freed_.empty());  // releasing never frees a live object
}

TEST_CASE_METHOD(TableFixture, "Delete of an unreferenced object frees it at once",
                 "[object_table]") {
  CHECK(table_.Delete(G(1)).IsNotFound());
  ObjectId a = Create(G(1), 10);
  CHECK(table_.Delete(G(1)).IsInvalidArgument());
  CHECK(FreedCount(a) == 0);

  REQUIRE(table_.Seal(10, G(1)).ok());
  REQUIRE(table_.Delete(G(1)).ok());
  CHECK(FreedCount(a) == 1);
  CHECK(table_.Find(G(1)) == nullptr);
  CHECK(table_.counts().sealed == 0);
  CHECK(table_.counts().deleted == 0);
  CHECK(table_.Delete(G(1)).IsNotFound());
}

TEST_CASE_METHOD(TableFixture, "Delete of a referenced object frees it at the last release",
                 "[object_table]") {
  ObjectId a = CreateSealed(G(1), 10);
  Acquire(20, G(1));
  Acquire(21, G(1));
  Acquire(21, G(1));

  REQUIRE(table_.Delete(G(1)).ok());
  CHECK(table_.Find(G(1)) == nullptr);
  CHECK(table_.Acquire(22, G(1)).status().IsNotFound());
  CHECK(table_.Delete(G(1)).IsNotFound());
  CHECK(table_.counts().deleted == 1);
  CHECK(table_.counts().sealed == 0);
  CHECK(table_.List(std::nullopt, 10).empty());

  REQUIRE(table_.Release(20, a).ok());
  REQUIRE(table_.Release(21, a).ok());
  CHECK(FreedCount(a) == 0);
  REQUIRE(table_.Release(21, a).ok());
  CHECK(FreedCount(a) == 1);
  CHECK(table_.counts().deleted == 0);
}

TEST_CASE_METHOD(TableFixture, "A deleted GUID can be created again while still referenced",
                 "[object_table]") {
  ObjectId old_id = CreateSealed(G(1), 10, false, {100, 200});
  Acquire(20, G(1));
  REQUIRE(table_.Delete(G(1)).ok());

  ObjectId new_id = CreateSealed(G(1), 11, false, {300});
  CHECK(new_id != old_id);
  CHECK(table_.counts().deleted == 1);
  CHECK(table_.counts().sealed == 1);
  CHECK(Acquire(20, G(1)) == new_id);
  CHECK(table_.HeldBy(20, old_id) == 1);
  CHECK(table_.HeldBy(20, new_id) == 1);

  REQUIRE(table_.Release(20, old_id).ok());
  CHECK(FreedCount(old_id) == 1);
  CHECK(FreedCount(new_id) == 0);
  const StoredObject* o = table_.Find(G(1));
  REQUIRE(o != nullptr);
  CHECK(o->id == new_id);
  CHECK(o->size() == 300);
  CHECK(table_.counts().deleted == 0);
  CHECK(table_.counts().sealed == 1);
}

TEST_CASE_METHOD(TableFixture, "DropSession aborts, releases and frees what it must",
                 "[object_table]") {
  ObjectId creating = Create(G(1), 1);
  ObjectId shared = CreateSealed(G(2), 2);
  ObjectId last_holder = CreateSealed(G(3), 2);
  ObjectId also_held = CreateSealed(G(4), 2);
  Acquire(1, G(2));
  Acquire(1, G(2));
  Acquire(1, G(3));
  Acquire(1, G(4));
  Acquire(3, G(4));
  REQUIRE(table_.Delete(G(3)).ok());

  table_.DropSession(1);
  CHECK(FreedCount(creating) == 1);
  CHECK(table_.Find(G(1)) == nullptr);
  CHECK(FreedCount(last_holder) == 1);
  CHECK(FreedCount(shared) == 0);
  CHECK(table_.Find(G(2))->refcount == 0);
  CHECK(table_.HeldBy(1, shared) == 0);
  CHECK(FreedCount(also_held) == 0);
  CHECK(table_.Find(G(4))->refcount == 1);
  CHECK(table_.counts().creating == 0);
  CHECK(table_.counts().deleted == 0);
  CHECK(table_.counts().sealed == 2);

  table_.DropSession(1);  // unknown by now: nothing happens
  table_.DropSession(42);
  CHECK(freed_.size() == 2);
  CheckFreedAtMostOnce();
}

// Slots as the table sees them: every object is published, `held` says which a slot holds, and
// each read of the slots is counted.
class FakeSlots : public SlotReaders {
 public:
  bool Publish(const StoredObject& o) override {
    withdrawn.erase(o.id);
    return true;
  }
  void Withdraw(ObjectId id) override { withdrawn.insert(id); }
  bool Pinned(ObjectId id) const override {
    ++reads;
    return held.contains(id);
  }
  std::vector<bool> HeldAmong(std::span<const ObjectId> ids) const override {
    ++reads;
    CHECK(std::is_sorted(ids.begin(), ids.end()));
    std::vector<bool> out;
    for (ObjectId id : ids) {
      CHECK(withdrawn.contains(id));  // read only after the withdrawal
      out.push_back(held.contains(id));
    }
    return out;
  }
  std::vector<ObjectId> Touched() override { return {}; }
  bool Indexed(ObjectId id) const override { return !withdrawn.contains(id); }

  std::set<ObjectId> held;
  std::set<ObjectId> withdrawn;
  mutable int reads = 0;
};

TEST_CASE_METHOD(TableFixture, "a FreeBatch reads the slots once for every free it holds back",
                 "[object_table]") {
  FakeSlots slots;
  table_.set_slot_readers(&slots);
  std::vector<ObjectId> ids;
  for (uint64_t n = 1; n <= 6; ++n) ids.push_back(CreateSealed(G(n), 1));
  slots.held = {ids[1], ids[4]};
  Acquire(2, G(6));
  REQUIRE(table_.Delete(G(6)).ok());  // referenced: waits for its release
  std::vector<TableEvent> events;
  table_.set_observer([&](TableEvent e, const StoredObject&, SessionId) { events.push_back(e); });
  {
    ObjectTable::FreeBatch outer(table_);
    {
      ObjectTable::FreeBatch inner(table_);  // nested: the outer one reads
      for (uint64_t n = 1; n <= 3; ++n) REQUIRE(table_.Delete(G(n), 1).ok());
    }
    for (uint64_t n = 4; n <= 5; ++n) REQUIRE(table_.Delete(G(n), 1).ok());
    REQUIRE(table_.Release(2, ids[5]).ok());  // the last reference of a deleted object
    CHECK(slots.reads == 0);
    CHECK(freed_.empty());  // nothing freed before the batch ends
    CHECK(table_.Find(G(1)) == nullptr);
    CHECK(table_.counts().deleted == 6);
  }
  CHECK(slots.reads == 1);
  for (size_t i : {0, 2, 3, 5}) CHECK(FreedCount(ids[i]) == 1);
  CHECK(FreedCount(ids[1]) == 0);  // a slot holds these two: they wait, as a lone delete's would
  CHECK(FreedCount(ids[4]) == 0);
  CHECK(table_.pinned() == 2);
  CHECK(table_.counts().deleted == 2);
  CHECK(table_.counts().sealed == 0);
  // Deleted objects freed at once say nothing more; the one a release freed says kFreed.
  CHECK(std::count(events.begin(), events.end(), TableEvent::kDeleted) == 5);
  CHECK(std::count(events.begin(), events.end(), TableEvent::kFreed) == 1);

  slots.held.clear();
  CHECK_FALSE(table_.FreeUnpinned());
  CHECK(FreedCount(ids[1]) == 1);
  CHECK(FreedCount(ids[4]) == 1);
  CheckFreedAtMostOnce();

  // Without a batch, each free reads on its own.
  ObjectId a = CreateSealed(G(7), 1);
  ObjectId b = CreateSealed(G(8), 1);
  slots.reads = 0;
  REQUIRE(table_.Delete(G(7)).ok());
  REQUIRE(table_.Delete(G(8)).ok());
  CHECK(slots.reads == 2);
  CHECK(FreedCount(a) == 1);
  CHECK(FreedCount(b) == 1);
}

TEST_CASE_METHOD(TableFixture, "an EvictionBatch reads the slots for more objects at each read",
                 "[object_table]") {
  FakeSlots slots;
  table_.set_slot_readers(&slots);
  std::vector<ObjectId> ids;
  for (uint64_t n = 1; n <= 10; ++n) ids.push_back(CreateSealed(G(n), 1, true));
  slots.held = {ids[2], ids[5]};
  {
    ObjectTable::EvictionBatch evictions(table_);
    CHECK(table_.EvictLru());  // reads [0]: evicts it
    CHECK(slots.reads == 1);
    CHECK(table_.EvictLru());  // reads [1, 2]: 2 is held, to the recent end; evicts 1
    CHECK(table_.EvictLru());  // reads [3, 4, 5, 6]: evicts 3, keeps 4 and 6 out of the index
    CHECK(slots.reads == 3);
    CHECK_FALSE(slots.Indexed(ids[4]));
    CHECK(table_.EvictLru());  // 4, read already
    CHECK(slots.reads == 3);
  }
  // What the batch read and did not evict is back in the index.
  CHECK(slots.Indexed(ids[6]));
  for (size_t i : {0, 1, 3, 4}) CHECK(FreedCount(ids[i]) == 1);
  for (size_t i : {2, 5, 6, 7, 8, 9}) CHECK(FreedCount(ids[i]) == 0);
  CHECK(table_.counts().evictions == 4);

  {
    ObjectTable::EvictionBatch evictions(table_);
    while (table_.EvictLru()) {
    }
  }
  // Every object no slot holds went, each once; the two held ones stayed, in the index.
  for (size_t i : {6, 7, 8, 9}) CHECK(FreedCount(ids[i]) == 1);
  CHECK(FreedCount(ids[2]) == 0);
  CHECK(FreedCount(ids[5]) == 0);
  CHECK(slots.Indexed(ids[2]));
  CHECK(slots.Indexed(ids[5]));
  CheckFreedAtMostOnce();
}

TEST_CASE_METHOD(TableFixture, "an EvictionBatch without an index evicts as a lone eviction does",
                 "[object_table]") {
  std::vector<ObjectId> ids;
  for (uint64_t n = 1; n <= 3; ++n) ids.push_back(CreateSealed(G(n), 1, true));
  {
    ObjectTable::EvictionBatch evictions(table_);
    CHECK(table_.EvictLru());
    CHECK(table_.EvictLru());
  }
  CHECK(FreedCount(ids[0]) == 1);
  CHECK(FreedCount(ids[1]) == 1);
  CHECK(FreedCount(ids[2]) == 0);
  CheckFreedAtMostOnce();
}

TEST_CASE_METHOD(TableFixture, "an EvictionBatch evicts no object a get took meanwhile",
                 "[object_table]") {
  FakeSlots slots;
  table_.set_slot_readers(&slots);
  std::vector<ObjectId> ids;
  for (uint64_t n = 1; n <= 4; ++n) ids.push_back(CreateSealed(G(n), 1, true));
  ObjectTable::EvictionBatch evictions(table_);
  CHECK(table_.EvictLru());  // reads [0]
  CHECK(table_.EvictLru());  // reads [1, 2]: evicts 1; 2 waits, out of the index
  Acquire(7, G(3));          // a get through the daemon takes it
  CHECK(table_.EvictLru());  // passes over 2 (referenced, off the LRU), reads [3]: evicts it
  CHECK(FreedCount(ids[2]) == 0);
  CHECK(FreedCount(ids[3]) == 1);
  CHECK(slots.Indexed(ids[2]));  // published again as it was passed over
  CHECK_FALSE(table_.EvictLru());
  CheckFreedAtMostOnce();
}

TEST_CASE_METHOD(TableFixture, "EvictLru evicts only evictable, sealed, unreferenced objects",
                 "[object_table]") {
  CHECK_FALSE(table_.EvictLru());
  ObjectId e1 = CreateSealed(G(1), 10, true, {100, 28});
  ObjectId e2 = CreateSealed(G(2), 10, true, {1000});
  ObjectId pinned = CreateSealed(G(3), 10, false);
  ObjectId creating = Create(G(4), 10, true);
  ObjectId held = CreateSealed(G(5), 10, true, {5});
  Acquire(20, G(5));

  // Using e1 after e2 was sealed makes e2 the least recently used.
  ObjectId h = Acquire(20, G(1));
  REQUIRE(table_.Release(20, h).ok());

  REQUIRE(table_.EvictLru());
  CHECK(FreedCount(e2) == 1);
  CHECK(table_.Find(G(2)) == nullptr);
  REQUIRE(table_.EvictLru());
  CHECK(FreedCount(e1) == 1);
  CHECK_FALSE(table_.EvictLru());
  CHECK(FreedCount(pinned) == 0);
  CHECK(FreedCount(creating) == 0);
  CHECK(FreedCount(held) == 0);
  CHECK(table_.counts().evictions == 2);
  CHECK(table_.counts().evicted_bytes == 1128);

  REQUIRE(table_.Release(20, held).ok());
  REQUIRE(table_.EvictLru());
  CHECK(FreedCount(held) == 1);
  CHECK(table_.counts().evictions == 3);
  CHECK(table_.counts().evicted_bytes == 1133);
  CHECK(table_.counts().sealed == 1);  // the pinned one
  CheckFreedAtMostOnce();
}

TEST_CASE_METHOD(TableFixture, "EvictLru orders by last release or seal", "[object_table]") {
  CreateSealed(G(1), 10, true);
  CreateSealed(G(2), 10, true);
  CreateSealed(G(3), 10, true);
  // Hold 1 across the seal of 4, then release it: 1 becomes the most recent.
  ObjectId h1 = Acquire(20, G(1));
  CreateSealed(G(4), 10, true);
  REQUIRE(table_.Release(20, h1).ok());
  // Acquire and release 2 by two sessions: only the last release counts.
  ObjectId h2 = Acquire(20, G(2));
  Acquire(21, G(2));
  REQUIRE(table_.Release(20, h2).ok());

  // A deleted evictable object is gone from the LRU too.
  CreateSealed(G(5), 10, true);
  REQUIRE(table_.Delete(G(5)).ok());

  while (table_.EvictLru()) {
  }
  std::vector<Guid> expected = {G(5), G(3), G(4), G(1)};
  CHECK(freed_guids_ == expected);
  REQUIRE(table_.Release(21, h2).ok());
  REQUIRE(table_.EvictLru());
  CHECK(freed_guids_.back() == G(2));
  CHECK(table_.counts().evictions == 4);
  CheckFreedAtMostOnce();
}

TEST_CASE_METHOD(TableFixture, "List pages through visible objects in GUID order",
                 "[object_table]") {
  std::vector<Guid> guids;
  for (uint64_t n : {7, 3, 9, 1, 5, 2, 8, 4, 6, 10}) guids.push_back(G(n));
  for (size_t i = 0; i < guids.size(); ++i) {
    if (i % 2 == 0) {
      CreateSealed(guids[i], 10);
    } else {
      Create(guids[i], 10);  // objects being created are listed too
    }
  }
  // A deleted object that is still referenced is not listed.
  CreateSealed(G(11), 10);
  Acquire(20, G(11));
  REQUIRE(table_.Delete(G(11)).ok());

  std::sort(guids.begin(), guids.end());
  std::vector<Guid> seen;
  std::optional<Guid> after;
  int pages = 0;
  while (true) {
    auto page = table_.List(after, 3);
    CHECK(page.size() <= 3);
    if (page.empty()) break;
    ++pages;
    for (const StoredObject* o : page) seen.push_back(o->guid);
    after = page.back()->guid;
  }
  CHECK(seen == guids);
  CHECK(pages == 4);

  CHECK(table_.List(std::nullopt, 0).empty());
  auto from_gap = table_.List(Guid{0, 0}, 2);  // `after` need not exist
  REQUIRE(from_gap.size() == 2);
  CHECK(from_gap[0]->guid == guids[0]);
  CHECK(table_.List(guids.back(), 5).empty());
}

TEST_CASE("ObjectTable tells its observer about every transition and who caused it",
          "[object_table]") {
  struct Seen {
    TableEvent event;
    ObjectId id;
    SessionId by;
    bool operator==(const Seen&) const = default;
  };
  std::vector<Seen> seen;
  ObjectTable t([](const StoredObject&) {}, [] { return int64_t{1}; });
  t.set_observer([&](TableEvent e, const StoredObject& o, SessionId by) {
    seen.push_back({e, o.id, by});
  });
  auto make = [&](const Guid& g, bool evictable) {
    NewObject n;
    n.guid = g;
    n.frames = {Location{.segment = 1, .offset = 0, .size = 64}};
    n.evictable = evictable;
    n.creator = 1;
    return (*t.Create(std::move(n)))->id;
  };
  ObjectId a = make(G(1), false);
  REQUIRE(t.Seal(1, G(1)).ok());
  ObjectId b = make(G(2), false);
  REQUIRE(t.Abort(1, G(2)).ok());
  ObjectId c = make(G(3), true);
  REQUIRE(t.Seal(1, G(3)).ok());
  REQUIRE(t.EvictLru(4));
  REQUIRE(t.Acquire(2, G(1)).ok());
  REQUIRE(t.Delete(G(1), 3).ok());
  REQUIRE(t.Release(2, a).ok());
  ObjectId d = make(G(4), false);
  t.DropSession(1);
  using E = TableEvent;
  std::vector<Seen> want = {{E::kCreated, a, 1}, {E::kSealed, a, 1},  {E::kCreated, b, 1},
                            {E::kAborted, b, 1}, {E::kCreated, c, 1}, {E::kSealed, c, 1},
                            {E::kEvicted, c, 4}, {E::kDeleted, a, 3}, {E::kFreed, a, 2},
                            {E::kCreated, d, 1}, {E::kAborted, d, 1}};
  CHECK(seen == want);
}

TEST_CASE("ObjectTable sums what a session holds", "[object_table]") {
  TableFixture f;
  f.CreateSealed(G(1), 1, false, {100, 50});
  f.CreateSealed(G(2), 1, false, {1000});
  f.Create(G(3), 2);
  f.Acquire(2, G(1));
  f.Acquire(2, G(1));
  f.Acquire(2, G(2));
  Holdings h = f.table_.HoldingsOf(2);
  CHECK(h.references == 2);
  CHECK(h.bytes == 1150);
  CHECK(h.creating == 1);
  CHECK(f.table_.HoldingsOf(9).references == 0);
}

TEST_CASE_METHOD(
    TableFixture,
    "spill candidates are sealed, unreferenced, non-evictable objects in memory, LRU first",
    "[object_table][spill]") {
  ObjectTable& t = table_;
  t.set_spilling(true);
  ObjectId a = CreateSealed(G(1), 1);
  CreateSealed(G(2), 1, /*evictable=*/true);
  ObjectId c = CreateSealed(G(3), 1);
  Create(G(4), 1);  // still being created
  auto none = [](const StoredObject&) { return false; };
  CHECK(t.SpillCandidates(1000, none) == std::vector<ObjectId>{a, c});
  CHECK(t.SpillCandidates(1, none) == std::vector<ObjectId>{a});
  // A reference takes an object off the list; its release puts it back, most recent last.
  Acquire(5, G(1));
  CHECK(t.SpillCandidates(1000, none) == std::vector<ObjectId>{c});
  REQUIRE(t.Release(5, a).ok());
  CHECK(t.SpillCandidates(1000, none) == std::vector<ObjectId>{c, a});
  CHECK(t.SpillCandidates(1000, [&](const StoredObject& o) { return o.id == c; }) ==
        std::vector<ObjectId>{a});
}

TEST_CASE_METHOD(
    TableFixture,
    "an object goes to disk and back: gets wait, counts follow, nothing is freed twice",
    "[object_table][spill]") {
  ObjectTable& t = table_;
  t.set_spilling(true);
  ObjectId a = CreateSealed(G(1), 1, false, {100, 200});
  t.StartSpill(a);
  CHECK(t.Get(a)->residence == Residence::kSpilling);
  // Still in memory while it is written: a get is served, and the spill is then not kept.
  Acquire(2, G(1));
  CHECK_FALSE(t.FinishSpill(a, true));
  CHECK(t.Get(a)->residence == Residence::kMemory);
  REQUIRE(t.Release(2, a).ok());
  // A write that failed leaves it in memory, a candidate again.
  t.StartSpill(a);
  CHECK_FALSE(t.FinishSpill(a, false));
  CHECK(t.SpillCandidates(1, [](const StoredObject&) { return false; }) ==
        std::vector<ObjectId>{a});
  // Written: on disk, its frames name no memory, a get waits (Unavailable).
  t.StartSpill(a);
  CHECK(t.FinishSpill(a, true));
  const StoredObject& o = *t.Get(a);
  CHECK(o.residence == Residence::kDisk);
  CHECK(o.size() == 300);
  CHECK(o.frames()[0].segment == 0);
  CHECK(t.counts().spilled == 1);
  CHECK(t.counts().spilled_bytes == 300);
  CHECK(t.Acquire(3, G(1)).status().IsUnavailable());
  CHECK(t.SpillCandidates(1000, [](const StoredObject&) { return false; }).empty());
  // Restored at new places.
  t.StartRestore(a);
  std::vector<Location> back = {{.segment = 9, .offset = 64, .size = 100},
                                {.segment = 9, .offset = 4096, .size = 200}};
  t.FinishRestore(a, back, Status::OK());
  CHECK(o.residence == Residence::kMemory);
  CHECK(o.frames()[1].segment == 9);
  CHECK(o.frames()[1].offset == 4096);
  CHECK(t.counts().spilled == 0);
  Acquire(3, G(1));
  REQUIRE(t.Release(3, a).ok());
  // A restore that finds no memory leaves it on disk; one whose file is bad loses it.
  t.StartSpill(a);
  REQUIRE(t.FinishSpill(a, true));
  t.StartRestore(a);
  t.FinishRestore(a, {}, Status::StoreFull("no room"));
  CHECK(o.residence == Residence::kDisk);
  t.StartRestore(a);
  t.FinishRestore(a, {}, Status::DataLoss("bad file"));
  CHECK(o.residence == Residence::kLost);
  CHECK(t.counts().lost == 1);
  CHECK(t.counts().spilled == 0);
  CHECK(t.Acquire(3, G(1)).status().IsDataLoss());
  // Deleting it frees it once, and the counts go back to nothing.
  REQUIRE(t.Delete(G(1)).ok());
  CHECK(FreedCount(a) == 1);
  CHECK(t.counts().lost == 0);
  CHECK(t.counts().sealed == 0);
}

TEST_CASE_METHOD(TableFixture, "objects a previous daemon spilled are adopted on disk",
                 "[object_table][spill]") {
  ObjectTable& t = table_;
  NewObject n;
  n.guid = G(1);
  n.frames = {Location{.size = 4096}};
  n.name = "kept";
  n.creator_uid = 1000;
  auto adopted =
      t.Adopt(n, {.checksum = 42, .has_checksum = true, .created_ns = 5, .sealed_ns = 6});
  REQUIRE(adopted.ok());
  CHECK((*adopted)->state == ObjectState::kSealed);
  CHECK((*adopted)->residence == Residence::kDisk);
  CHECK((*adopted)->checksum == 42);
  CHECK((*adopted)->sealed_ns == 6);
  CHECK(t.Find(G(1)) == *adopted);
  CHECK(t.counts().spilled == 1);
  CHECK(t.Adopt(n, {}).status().IsAlreadyExists());
}

}  // namespace
}  // namespace depot
