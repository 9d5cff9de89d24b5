// Tests for the two indexes of ObjectTable's records: GuidHash (daemon/object_table_hash.h) and
// GuidOrder (daemon/object_table_order.h). Many random inserts and erases against a std::map as
// the model, with GUIDs that collide in one word and in the hash's buckets, and every invariant
// checked as they go.
#include "daemon/object_table_order.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <optional>
#include <random>
#include <vector>

#include "daemon/object_table_hash.h"

namespace depot {
namespace {

// Records by slot, as ObjectTable keeps them: the indexes read GUIDs from here.
struct Records {
  std::vector<Guid> guids;
  const Guid& operator()(uint32_t slot) const { return guids.at(slot); }
};

struct KeyOf {
  const Records* records;
  const Guid& operator()(uint32_t slot) const { return (*records)(slot); }
};

// GUIDs from a small space, so that inserts hit GUIDs present, erases empty the structure at
// times, and many share their high word (the order must then compare the low one).
Guid RandomGuid(std::mt19937_64& rng, uint64_t space) {
  uint64_t n = rng() % space;
  return Guid{n / 8, n % 8 * 0x1111};
}

// One run of random operations; `space` sets how crowded the GUIDs are. Slots are reused as
// ObjectTable reuses records: an erased slot's record gets a new GUID.
void RunAgainstModel(uint64_t seed, uint64_t space, int ops) {
  std::mt19937_64 rng(seed);
  Records records;
  // A fixed seed for the hash makes a failure repeatable.
  GuidHash<KeyOf> hash(KeyOf{&records}, seed);
  GuidOrder<KeyOf> order(KeyOf{&records});
  std::map<Guid, uint32_t> model;
  std::vector<uint32_t> free_slots;
  for (int op = 0; op < ops; ++op) {
    Guid g = RandomGuid(rng, space);
    auto in_model = model.find(g);
    std::optional<uint32_t> found = hash.Find(g);
    REQUIRE(found.has_value() == (in_model != model.end()));
    if (found) REQUIRE(*found == in_model->second);
    // Insert what is absent; erase what is present (more often while large).
    if (!found && rng() % 3 != 0) {
      uint32_t slot;
      if (!free_slots.empty() && rng() % 2 == 0) {
        slot = free_slots.back();
        free_slots.pop_back();
        records.guids[slot] = g;
      } else {
        slot = static_cast<uint32_t>(records.guids.size());
        records.guids.push_back(g);
      }
      hash.Insert(slot);
      order.Insert(slot);
      model[g] = slot;
    } else if (found) {
      REQUIRE(hash.Erase(*found));
      REQUIRE(order.Erase(*found));
      REQUIRE_FALSE(hash.Erase(*found));  // erasing twice changes nothing
      REQUIRE_FALSE(order.Erase(*found));
      model.erase(in_model);
      free_slots.push_back(*found);
    }
    REQUIRE(hash.size() == model.size());
    REQUIRE(order.size() == model.size());
    if (op % 97 == 0) {
      REQUIRE(order.Check());
      for (const auto& [guid, slot] : model) REQUIRE(hash.Find(guid) == slot);
      // Paging from a random GUID (present or not) yields exactly the model's tail, in order.
      Guid after = RandomGuid(rng, space);
      std::vector<uint32_t> listed;
      order.ForEachAfter(after, [&](uint32_t slot) {
        listed.push_back(slot);
        return true;
      });
      std::vector<uint32_t> expected;
      for (auto it = model.upper_bound(after); it != model.end(); ++it) {
        expected.push_back(it->second);
      }
      REQUIRE(listed == expected);
    }
  }
  REQUIRE(order.Check());
}

TEST_CASE("GuidHash and GuidOrder agree with a map under random inserts and erases") {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    // From crowded (many inserts of present GUIDs) to sparse (leaves split and merge).
    RunAgainstModel(seed, seed % 2 == 0 ? 600 : 20000, 30000);
  }
}

TEST_CASE("GuidOrder lists everything in order and stops where told") {
  Records records;
  GuidOrder<KeyOf> order(KeyOf{&records});
  std::mt19937_64 rng(7);
  std::map<Guid, uint32_t> model;
  for (uint32_t slot = 0; slot < 5000; ++slot) {
    Guid g{rng(), rng()};
    records.guids.push_back(g);
    order.Insert(slot);
    model[g] = slot;
  }
  REQUIRE(order.Check());
  REQUIRE(order.leaves() > 5000 / GuidOrder<KeyOf>::kLeafMax);
  std::vector<uint32_t> all;
  order.ForEachAfter(std::nullopt, [&](uint32_t slot) {
    all.push_back(slot);
    return true;
  });
  std::vector<uint32_t> expected;
  for (const auto& [g, slot] : model) expected.push_back(slot);
  REQUIRE(all == expected);
  // Pages of 1000, each after the last GUID of the one before, give the same.
  std::vector<uint32_t> paged;
  std::optional<Guid> after;
  for (bool more = true; more;) {
    size_t n = 0;
    order.ForEachAfter(after, [&](uint32_t slot) {
      paged.push_back(slot);
      return ++n < 1000;
    });
    more = n == 1000;
    if (!paged.empty()) after = records.guids[paged.back()];
  }
  REQUIRE(paged == expected);
  // Erasing all but a few leaves few leaves: neighbours merge.
  for (uint32_t slot = 0; slot < 4990; ++slot) REQUIRE(order.Erase(slot));
  REQUIRE(order.Check());
  REQUIRE(order.leaves() <= 2);
}

TEST_CASE("GuidHash keeps at most three quarters of its buckets full and shrinks when emptied") {
  Records records;
  GuidHash<KeyOf> hash(KeyOf{&records}, 1);
  for (uint32_t slot = 0; slot < 10000; ++slot) {
    records.guids.push_back(Guid{slot, 0});  // one word only: the seeded hash spreads them
    hash.Insert(slot);
    REQUIRE(hash.size() * 4 <= hash.buckets() * 3);
  }
  for (uint32_t slot = 0; slot < 10000; ++slot) REQUIRE(hash.Find(Guid{slot, 0}) == slot);
  for (uint32_t slot = 0; slot < 9990; ++slot) REQUIRE(hash.Erase(slot));
  REQUIRE(hash.buckets() <= 256);
  for (uint32_t slot = 9990; slot < 10000; ++slot) REQUIRE(hash.Find(Guid{slot, 0}) == slot);
}

// Counts the records a structure reads.
struct CountingKeyOf {
  const Records* records;
  uint64_t* reads;
  const Guid& operator()(uint32_t slot) const {
    ++*reads;
    return (*records)(slot);
  }
};

TEST_CASE("GuidHash grows and shrinks a little at each change, never all at once") {
  Records records;
  uint64_t reads = 0;
  GuidHash<CountingKeyOf> hash(CountingKeyOf{&records, &reads}, 3);
  std::mt19937_64 rng(5);
  // Each change reads the records of its own probe (and, erasing, of the run it shifts) and
  // moves about kMovesPerChange slots of a resize under way, whole runs: under 200 reads here.
  // A resize made at once reads every record, 98,304 at the last growth.
  const uint64_t bound = 1000;
  uint64_t most = 0;
  bool saw_resize = false;
  constexpr uint32_t kCount = 200000;
  for (uint32_t slot = 0; slot < kCount; ++slot) {
    records.guids.push_back(Guid{rng(), rng()});
    reads = 0;
    hash.Insert(slot);
    most = std::max(most, reads);
    saw_resize = saw_resize || hash.resizing();
    // Found meanwhile, from either table.
    if (slot % 1024 == 0) {
      for (uint32_t k = 0; k <= slot; k += 97) REQUIRE(hash.Find(records.guids[k]) == k);
    }
  }
  CHECK(saw_resize);
  CHECK(most <= bound);
  for (uint32_t slot = 0; slot < kCount; ++slot) REQUIRE(hash.Find(records.guids[slot]) == slot);
  most = 0;
  for (uint32_t slot = 0; slot < kCount - 100; ++slot) {
    reads = 0;
    REQUIRE(hash.Erase(slot));
    most = std::max(most, reads);
  }
  CHECK(most <= bound);
  CHECK(hash.size() == 100);
  for (uint32_t slot = kCount - 100; slot < kCount; ++slot) {
    REQUIRE(hash.Find(records.guids[slot]) == slot);
  }
}

}  // namespace
}  // namespace depot
