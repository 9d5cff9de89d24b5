// Gets without a round trip at scale, unit by unit: reference slots past the first 1,024 (taken
// lowest first from a bitmap, granted by the daemon out of each user's part, read by the daemon
// exactly as far as granted), and a shared index that moves to one twice as big when crowded,
// retiring the old one so that its readers learn it and nothing they read from it stays held.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <deque>
#include <functional>
#include <random>
#include <set>
#include <unordered_set>
#include <vector>

#include "client/src/index_reader.h"
#include "client/src/slot_table.h"
#include "daemon/lock_free_gets.h"
#include "daemon/object_table.h"
#include "daemon/reference_slots.h"
#include "proto/index_layout.h"

namespace depot {
namespace {

using internal::IndexReader;
using internal::SlotTable;

Guid G(uint64_t n) { return Guid{0x7000 + n, n * 13 + 5}; }

UniqueFd Dup(int fd) { return UniqueFd(::fcntl(fd, F_DUPFD_CLOEXEC, 0)); }

IndexReader Reader(const ObjectIndex& index) {
  auto r = IndexReader::Map(Dup(index.read_only_fd()), index.sets(), index.arena_bytes());
  REQUIRE(r.ok());
  return std::move(*r);
}

std::set<uint64_t> HeldIds(const ReferenceSlots& slots) {
  std::set<uint64_t> ids;
  slots.ForEach([&](uint64_t id) { ids.insert(id); });
  return ids;
}

TEST_CASE("slots past the first 1,024 are taken lowest first and read by the daemon as granted",
          "[index][slots]") {
  auto slots = ReferenceSlots::Create("slots-growth-test");
  REQUIRE(slots.ok());
  auto table = SlotTable::Map(Dup((*slots)->fd()), index::kSlotCount);
  REQUIRE(table.ok());
  CHECK(table->capacity() == index::kMaxSlots);
  // The model: which slots hold which id.
  std::map<uint32_t, uint64_t> model;
  std::mt19937_64 rng(7);
  uint64_t next_id = 1;
  uint32_t granted = index::kSlotCount;
  const uint64_t* words = nullptr;
  void* p = ::mmap(nullptr, index::SlotFileBytes(index::kMaxSlots), PROT_READ, MAP_SHARED,
                   (*slots)->fd(), 0);
  REQUIRE(p != MAP_FAILED);
  words = static_cast<const uint64_t*>(p);
  for (int step = 0; step < 40000; ++step) {
    uint64_t r = rng() % 100;
    if (r < 1 && granted < 8 * index::kSlotCount) {
      granted *= 2;
      REQUIRE((*slots)->Grant(granted).ok());
      table->Grow(granted);
    } else if (r < 60 || model.empty()) {
      auto slot = table->Publish(next_id);
      if (model.size() == granted) {
        CHECK_FALSE(slot);
        continue;
      }
      REQUIRE(slot);
      // The lowest free one.
      uint32_t lowest = 0;
      while (model.contains(lowest)) ++lowest;
      REQUIRE(*slot == lowest);
      model[*slot] = next_id++;
    } else {
      auto it = model.begin();
      std::advance(it, static_cast<long>(rng() % model.size()));
      table->Clear(it->first);
      model.erase(it);
    }
    // The high-water word: one past the highest slot in use.
    uint64_t high = model.empty() ? 0 : model.rbegin()->first + 1;
    REQUIRE(words[index::kSlotHighWater] == high);
    if (step % 97 == 0) {
      std::set<uint64_t> want;
      for (auto& [slot, id] : model) want.insert(id);
      REQUIRE(HeldIds(**slots) == want);
    }
  }
  ::munmap(p, index::SlotFileBytes(index::kMaxSlots));
  CHECK(granted > index::kSlotCount);
}

TEST_CASE("the daemon reads no slot past what it granted, whatever the high-water word says",
          "[index][slots][hostile]") {
  auto slots = ReferenceSlots::Create("slots-growth-test");
  REQUIRE(slots.ok());
  REQUIRE((*slots)->Grant(2 * index::kSlotCount).ok());
  auto* words =
      static_cast<uint64_t*>(::mmap(nullptr, index::SlotFileBytes(index::kMaxSlots),
                                    PROT_READ | PROT_WRITE, MAP_SHARED, (*slots)->fd(), 0));
  REQUIRE(words != MAP_FAILED);
  words[index::SlotWord(0)] = 1;
  words[index::SlotWord(index::kSlotCount)] = 2;          // granted
  words[index::SlotWord(2 * index::kSlotCount - 1)] = 3;  // granted, the last
  words[index::kSlotHighWater] = ~uint64_t{0};
  CHECK(HeldIds(**slots) == std::set<uint64_t>{1, 2, 3});
  // Beyond the grant the file is a hole, never backed: the daemon neither reads nor faults it.
  struct stat st {};
  REQUIRE(::fstat((*slots)->fd(), &st) == 0);
  CHECK(static_cast<uint64_t>(st.st_blocks) * 512 <=
        index::SlotFileBytes(2 * index::kSlotCount) + 4096);
  ::munmap(words, index::SlotFileBytes(index::kMaxSlots));
}

TEST_CASE("slots past the first 1,024 of each connection come out of its user's part",
          "[index][slots][hostile]") {
  auto gets = LockFreeGets::Create(64, 64, 3000, "test-", [](const Location&) { return true; });
  REQUIRE(gets.ok());
  LockFreeGets& g = **gets;
  REQUIRE(g.Join(1, 1000).ok());
  REQUIRE(g.Join(2, 1000).ok());
  REQUIRE(g.Join(3, 2000).ok());
  CHECK(g.Grant(1, 4096) == index::kSlotCount + 3000);  // as far as the part allows
  CHECK(g.Grant(2, 2048) == index::kSlotCount);         // spent: refused, counted
  CHECK(g.grants_refused() == 1);
  CHECK(g.Grant(3, 2048) == 2048);  // another user's part is its own
  CHECK(g.Grant(3, 100) == 2048);   // never fewer than before
  CHECK(g.slots_granted() == 3000 + 1024);
  g.Leave(1);  // its grant goes back to its user's part
  CHECK(g.Grant(2, 2048) == 2048);
  CHECK(g.slots_granted() == 1024 + 1024);
  CHECK(g.Grant(9, 2048) == 0);  // no such session
}

// An object table publishing through a LockFreeGets of `entries` entries growing up to `max`;
// with `post`, a move's steps go through it, and with `make`, a bigger index is asked of it.
struct Published {
  Published(uint64_t entries, uint64_t max, LockFreeGets::PostFn post = {},
            LockFreeGets::MakeIndexFn make = {}) {
    auto made = LockFreeGets::Create(
        entries, max, 0, "test-", [](const Location&) { return true; }, std::move(post),
        std::move(make));
    REQUIRE(made.ok());
    gets = std::move(*made);
    table.set_slot_readers(gets.get());
  }
  ObjectId Put(uint64_t n) {
    NewObject o;
    o.guid = G(n);
    o.frames = {{.segment = 1, .offset = n * 64, .size = 64}};
    o.creator = 9;
    o.creator_uid = 1000;
    auto r = table.Create(std::move(o));
    REQUIRE(r.ok());
    REQUIRE(table.Seal(9, G(n)).ok());
    return (*r)->id;
  }
  ObjectTable table{[](const StoredObject&) {}, [] { return int64_t{0}; }};
  std::unique_ptr<LockFreeGets> gets;
};

TEST_CASE("a crowded index moves to one twice as big, and readers of the old one learn it",
          "[index]") {
  Published p(64, 4096);
  IndexReader first = Reader(p.gets->index());
  UniqueFd first_fd = Dup(p.gets->index().read_only_fd());
  const uint64_t first_sets = p.gets->index().sets(), first_arena = p.gets->index().arena_bytes();
  p.Put(0);
  auto early = first.Find(G(0));
  REQUIRE(early);
  const uint64_t count = 1500;
  for (uint64_t n = 1; n < count; ++n) p.Put(n);
  CHECK(p.gets->generation() > 1);
  CHECK(p.gets->index().entries() >= 2048);
  CHECK(p.gets->index().entries() <= 4096);
  // Retired: what a client read from it no longer holds (its slot is let go), nothing is found
  // there any more, and its layout words say why.
  CHECK(first.Retired());
  CHECK_FALSE(first.Unchanged(*early));
  CHECK_FALSE(first.Find(G(1)));
  // A client that maps it only now (its hello named it just before the move ended) maps it all
  // the same, finds nothing there, and knows to ask for the new one.
  auto late = IndexReader::Map(first_fd, first_sets, first_arena);
  REQUIRE(late.ok());
  CHECK(late->Retired());
  CHECK_FALSE(late->Find(G(1)));
  // The new one has what the old one had, and most of the rest (a full set leaves some out).
  IndexReader now = Reader(p.gets->index());
  CHECK_FALSE(now.Retired());
  uint64_t found = 0;
  for (uint64_t n = 0; n < count; ++n) {
    if (auto hit = now.Find(G(n))) {
      ++found;
      REQUIRE(hit->frames.size() == 1);
      CHECK(hit->frames[0].offset() == n * 64);
      CHECK(hit->creator_uid == 1000);
    }
  }
  CHECK(found == p.gets->index().indexed());
  CHECK(found >= count * 9 / 10);
}

TEST_CASE("a move to a bigger index runs in steps, and what comes and goes meanwhile is kept",
          "[index]") {
  std::deque<std::function<void()>> loop;  // the daemon's loop: what was posted, in order
  Published p(8192, 1 << 16, [&](std::function<void()> f) { loop.push_back(std::move(f)); });
  IndexReader old = Reader(p.gets->index());
  std::set<uint64_t> live;
  uint64_t n = 0;
  while (!p.gets->moving()) {
    REQUIRE(n < 8192);
    p.Put(n);
    live.insert(n++);
  }
  // The put that began the move moved one step of it: the rest waits on the loop, and sessions
  // still read the old index, which has what it had.
  CHECK(loop.size() == 1);
  CHECK(p.gets->generation() == 1);
  CHECK_FALSE(old.Retired());
  CHECK(old.Find(G(0)));
  // Between the steps, objects come (put) and go (deleted: some moved already, some not yet,
  // some put during the move), and gets of the old index see each at once.
  std::mt19937_64 rng(11);
  uint64_t steps = 0;
  while (!loop.empty()) {
    for (int k = 0; k < 200; ++k) {
      if (rng() % 3 == 0) {
        auto it = live.begin();
        std::advance(it, static_cast<long>(rng() % live.size()));
        REQUIRE(p.table.Delete(G(*it)).ok());
        CHECK_FALSE(old.Find(G(*it)));
        live.erase(it);
      } else {
        p.Put(n);
        live.insert(n++);
      }
    }
    auto step = std::move(loop.front());
    loop.pop_front();
    step();
    ++steps;
  }
  CHECK(steps >= 3);
  CHECK_FALSE(p.gets->moving());
  CHECK(p.gets->generation() == 2);
  CHECK(old.Retired());
  // The new index has no object that was deleted, and most of those that live (a full set
  // leaves some out), each as it was put.
  IndexReader now = Reader(p.gets->index());
  CHECK(p.gets->index().entries() == 16384);
  uint64_t found = 0;
  for (uint64_t k = 0; k < n; ++k) {
    auto hit = now.Find(G(k));
    if (!live.contains(k)) {
      CHECK_FALSE(hit);
      continue;
    }
    if (!hit) continue;
    ++found;
    REQUIRE(hit->frames.size() == 1);
    CHECK(hit->frames[0].offset() == k * 64);
  }
  CHECK(found == p.gets->index().indexed());
  CHECK(found >= live.size() * 9 / 10);
}

TEST_CASE("after a move the old index is retired in steps, what it still holds kept meanwhile",
          "[index]") {
  std::deque<std::function<void()>> loop;
  auto run_one = [&] {
    auto f = std::move(loop.front());
    loop.pop_front();
    f();
  };
  const uint64_t entries = 4 * LockFreeGets::kRetireStep;
  Published p(entries, 4 * entries, [&](std::function<void()> f) { loop.push_back(std::move(f)); });
  IndexReader old = Reader(p.gets->index());
  uint64_t n = 0;
  while (!p.gets->moving()) {
    REQUIRE(n < entries);
    p.Put(n++);
  }
  while (p.gets->generation() == 1) run_one();  // the move's steps, to its end
  // Sessions that miss in the old index now ask for the new one; the old one's first step of
  // withdrawals ran, the next is posted, and the move counts as under way until the last.
  CHECK(old.Retired());
  CHECK(p.gets->moving());
  CHECK(loop.size() == 1);
  std::vector<uint64_t> still;  // what sessions still find there
  for (uint64_t k = 0; k < n; ++k) {
    if (old.Find(G(k))) still.push_back(k);
  }
  CHECK(still.size() > n / 2);
  // One of them deleted meanwhile is withdrawn from the old index too: a session that read it
  // there sees its entry changed and lets go.
  auto hit = old.Find(G(still.front()));
  REQUIRE(hit);
  REQUIRE(p.table.Delete(G(still.front())).ok());
  CHECK_FALSE(old.Unchanged(*hit));
  CHECK_FALSE(old.Find(G(still.front())));
  CHECK(old.Find(G(still.back())));
  uint64_t steps = 1;
  while (!loop.empty()) {
    run_one();
    ++steps;
  }
  CHECK(steps == 4);
  CHECK_FALSE(p.gets->moving());
  uint64_t found = 0;
  for (uint64_t k = 0; k < n; ++k) found += old.Find(G(k)) ? 1 : 0;
  CHECK(found == 0);
}

TEST_CASE("a bigger index is made away from the loop, and what was left out meanwhile goes in",
          "[index]") {
  std::deque<std::function<void()>> loop;  // the daemon's loop: what was posted, in order
  std::function<void()> helper;            // the helper thread's job, run when this test says
  int asked = 0;
  Published p(
      64, 4096, [&](std::function<void()> f) { loop.push_back(std::move(f)); },
      [&](uint64_t entries, std::string name, std::function<void(LockFreeGets::MadeIndex)> done) {
        ++asked;
        helper = [entries, name, done] { done(ObjectIndex::Create(entries, name)); };
      });
  uint64_t n = 0;
  while (!p.gets->making()) {
    REQUIRE(n < 64);
    p.Put(n++);
  }
  // While it is made, puts go on: into the crowded index, or left out; nothing moves yet, and
  // it is asked for once.
  for (int k = 0; k < 32; ++k) p.Put(n++);
  CHECK(asked == 1);
  CHECK(loop.empty());
  CHECK_FALSE(p.gets->moving());
  CHECK(p.gets->index().entries() == 64);
  CHECK(p.gets->index().left_out() > 0);
  CHECK(p.gets->index().indexed() <= 64);
  helper();  // made, and handed over: the move begins (its first step, here the whole of it)
  CHECK_FALSE(p.gets->making());
  while (!loop.empty()) {
    auto step = std::move(loop.front());
    loop.pop_front();
    step();
  }
  // The next publish publishes again what was left out (ObjectTable::PublishLeftOut).
  p.Put(n++);
  CHECK(asked == 1);
  CHECK(p.gets->generation() == 2);
  CHECK(p.gets->index().entries() == 128);
  IndexReader now = Reader(p.gets->index());
  uint64_t found = 0;
  for (uint64_t k = 0; k < n; ++k) found += now.Find(G(k)) ? 1 : 0;
  CHECK(found == p.gets->index().indexed());
  CHECK(found > 64);  // more than the old index could hold: those left out went in
}

TEST_CASE("what was left out while a bigger index was made goes in in parts, each posted",
          "[index]") {
  std::deque<std::function<void()>> loop;
  std::function<void()> helper;
  auto post = [&](std::function<void()> f) { loop.push_back(std::move(f)); };
  auto run_loop = [&] {
    size_t ran = 0;
    while (!loop.empty()) {
      auto f = std::move(loop.front());
      loop.pop_front();
      f();
      ++ran;
    }
    return ran;
  };
  Published p(
      4096, 65536, post,
      [&](uint64_t entries, std::string name, std::function<void(LockFreeGets::MadeIndex)> done) {
        helper = [entries, name, done] { done(ObjectIndex::Create(entries, name)); };
      });
  p.table.set_post(post);
  uint64_t n = 0;
  while (!p.gets->making()) {
    REQUIRE(n < 4096);
    p.Put(n++);
  }
  // Far more than a part left out (refused, or dropped for others) while it is made, and room
  // for them in the bigger index.
  for (int k = 0; k < 2500; ++k) p.Put(n++);
  std::exchange(helper, {})();
  run_loop();  // the move, to 8,192 entries
  REQUIRE(p.gets->generation() == 2);
  REQUIRE(p.gets->index().indexed() + 3 * ObjectTable::kRepublishPart < n);
  // The next put publishes one part of them again, and posts the rest: no more at once.
  const uint64_t before = p.gets->index().indexed();
  p.Put(n++);
  CHECK(p.gets->index().indexed() <= before + ObjectTable::kRepublishPart + 1);
  CHECK(loop.size() == 1);
  CHECK(p.table.republishing());
  // The posted parts go through the rest, each posting the next, until every object is in
  // the index but those it has no room for (a set full in both its choices).
  CHECK(run_loop() >= 3);
  CHECK_FALSE(p.table.republishing());
  IndexReader now = Reader(p.gets->index());
  uint64_t found = 0;
  for (uint64_t k = 0; k < n; ++k) found += now.Find(G(k)) ? 1 : 0;
  CHECK(found == p.gets->index().indexed());
  CHECK(found + p.gets->index().left_out() >= n);
  CHECK(p.gets->index().left_out() < n / 100);
}

TEST_CASE("an index stays at its largest size, leaving out what does not fit", "[index]") {
  Published p(64, 128);
  for (uint64_t n = 0; n < 1000; ++n) p.Put(n);
  CHECK(p.gets->index().entries() == 128);
  CHECK(p.gets->index().indexed() <= 128);
  CHECK(p.gets->index().left_out() > 0);
}

}  // namespace
}  // namespace depot
