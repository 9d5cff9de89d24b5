// Tests of the client's table of holdings by GUID (client/src/holding_table.h) against a
// std::map doing the same: random puts, replacements and erasures (conditional and not) over
// GUIDs shaped like real ones, through growth, deletion by backward shift and shrinking.
#include "client/src/holding_table.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstddef>
#include <map>
#include <memory>
#include <random>
#include <vector>

namespace depot::internal {
namespace {

// A stand-in Holding: only its address and its lifetime matter to the table, and a real one's
// destructor needs a connection.
std::shared_ptr<Holding> FakeHolding() {
  return std::shared_ptr<Holding>(reinterpret_cast<Holding*>(new std::byte[8]),
                                  [](Holding* h) { delete[] reinterpret_cast<std::byte*>(h); });
}

// Every GUID of `model` is found holding its own holding, and the table has nothing else.
void CheckSame(const HoldingTable& table, const std::map<Guid, std::shared_ptr<Holding>>& model) {
  REQUIRE(table.size() == model.size());
  for (const auto& [guid, h] : model) {
    const HoldingTable::Entry* e = table.Find(guid);
    REQUIRE(e != nullptr);
    REQUIRE(e->raw == h.get());
    REQUIRE(e->holding.lock() == h);
  }
  size_t seen = 0;
  table.ForEach([&](const HoldingTable::Entry& e) {
    ++seen;
    auto it = model.find(e.guid);
    REQUIRE(it != model.end());
    REQUIRE(e.raw == it->second.get());
  });
  REQUIRE(seen == model.size());
}

TEST_CASE("random puts and erasures leave the table as a map would be") {
  std::mt19937_64 rng(GENERATE(1, 2, 3));
  // A pool small enough that GUIDs come back: replacements, and erasures of GUIDs held.
  std::vector<Guid> pool;
  for (int i = 0; i < 3000; ++i) pool.push_back(Guid::FromRandomBits(rng(), rng()));
  HoldingTable table;
  std::map<Guid, std::shared_ptr<Holding>> model;
  for (int op = 0; op < 60000; ++op) {
    const Guid& g = pool[rng() % pool.size()];
    switch (rng() % 5) {
      case 0:
      case 1: {  // put (a new GUID, or a newer holding of one the table has)
        auto h = FakeHolding();
        table.Put(g, h, h.get());
        model[g] = h;
        break;
      }
      case 2: {  // erase, whatever holds it
        bool had = model.erase(g) > 0;
        REQUIRE(table.Erase(g) == had);
        break;
      }
      case 3: {  // an older holding's last Object goes: erased only while it is the one held
        auto stale = FakeHolding();
        REQUIRE_FALSE(table.Erase(g, stale.get()));
        auto it = model.find(g);
        if (it != model.end() && rng() % 2 == 0) {
          REQUIRE(table.Erase(g, it->second.get()));
          model.erase(it);
        }
        break;
      }
      case 4: {  // a lookup
        const HoldingTable::Entry* e = table.Find(g);
        auto it = model.find(g);
        REQUIRE((e != nullptr) == (it != model.end()));
        if (e != nullptr) REQUIRE(e->raw == it->second.get());
        break;
      }
    }
    if (op % 5000 == 0) CheckSame(table, model);
  }
  CheckSame(table, model);
}

TEST_CASE("the table grows with what it holds and gives the room back when it is let go") {
  std::mt19937_64 rng(7);
  HoldingTable table;
  size_t empty_slots = table.slots();
  std::map<Guid, std::shared_ptr<Holding>> model;
  for (int i = 0; i < 100000; ++i) {
    Guid g = Guid::FromRandomBits(rng(), rng());
    model[g] = FakeHolding();
    table.Put(g, model[g], model[g].get());
  }
  CheckSame(table, model);
  REQUIRE(table.slots() >= 2 * model.size());  // at most half full: short runs
  // Let go in an order unrelated to the puts', as Objects are dropped.
  std::vector<Guid> order;
  for (const auto& [g, h] : model) order.push_back(g);
  std::shuffle(order.begin(), order.end(), rng);
  for (size_t i = 0; i < order.size(); ++i) {
    REQUIRE(table.Erase(order[i], model[order[i]].get()));
    model.erase(order[i]);
    if (i % 10000 == 0) CheckSame(table, model);
  }
  REQUIRE(table.size() == 0);
  REQUIRE(table.slots() > empty_slots);
  REQUIRE(table.slots() <= HoldingTable::kept_slots());
}

TEST_CASE("a table that held a batch keeps its room when the batch is let go") {
  // Gets of 1,000 objects let go and made again: the table neither shrinks nor grows.
  std::mt19937_64 rng(5);
  HoldingTable table;
  size_t slots = 0;
  for (int round = 0; round < 3; ++round) {
    table.Reserve(1000);
    std::vector<std::pair<Guid, std::shared_ptr<Holding>>> batch;
    for (int i = 0; i < 1000; ++i) {
      batch.emplace_back(Guid::FromRandomBits(rng(), rng()), FakeHolding());
      table.Put(batch.back().first, batch.back().second, batch.back().second.get());
    }
    if (round == 0) slots = table.slots();
    REQUIRE(table.slots() == slots);
    for (const auto& [g, h] : batch) REQUIRE(table.Erase(g));
    REQUIRE(table.size() == 0);
    REQUIRE(table.slots() == slots);
  }
}

TEST_CASE("Reserve makes room for a batch so that its puts do not move the table") {
  std::mt19937_64 rng(11);
  HoldingTable table;
  table.Reserve(5000);
  size_t slots = table.slots();
  std::vector<std::shared_ptr<Holding>> kept;
  for (int i = 0; i < 5000; ++i) {
    kept.push_back(FakeHolding());
    table.Put(Guid::FromRandomBits(rng(), rng()), kept.back(), kept.back().get());
  }
  REQUIRE(table.slots() == slots);
}

TEST_CASE("an expired holding is still found by GUID until it is erased") {
  HoldingTable table;
  Guid g = Guid::FromRandomBits(1, 2);
  auto h = FakeHolding();
  const Holding* raw = h.get();
  table.Put(g, h, h.get());
  h.reset();  // its last Object went; ObjectCache::Forget erases it next
  const HoldingTable::Entry* e = table.Find(g);
  REQUIRE(e != nullptr);
  REQUIRE(e->raw == raw);
  REQUIRE(e->holding.expired());
  REQUIRE(table.Erase(g, raw));
  REQUIRE(table.Find(g) == nullptr);
}

}  // namespace
}  // namespace depot::internal
