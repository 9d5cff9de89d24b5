// Multi-GUID gets against a real daemon: the batch takes what it can from this process's holdings
// and the shared index in one pass, and asks the daemon for all the rest in one round trip; each
// result lands in its GUID's place, duplicates included; a timeout waits for objects not sealed
// yet and ends as Timeout for those never created; and a batch racing deletes gets either the old
// bytes or NotFound.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "tests/daemon_fixture.h"

using namespace depot;
using namespace depot::test;
using namespace std::chrono_literals;

namespace {

std::vector<std::byte> MetadataOf(uint32_t i) {
  return {std::byte(i), std::byte(i >> 8), std::byte{7}};
}

// Puts `n` objects of Pattern(64 + i % 50, i) with MetadataOf(i) and a checksum; their GUIDs.
std::vector<Guid> PutMany(Client& c, uint32_t n) {
  std::vector<Guid> ids;
  for (uint32_t i = 0; i < n; ++i) {
    CreateOptions with;
    auto metadata = MetadataOf(i);
    with.metadata = metadata;
    with.checksum = true;
    auto id = c.Put(Pattern(64 + i % 50, i), with);
    REQUIRE(id.ok());
    ids.push_back(*id);
  }
  // A request of the writer's: the daemon takes its put ring first, so every put is indexed.
  REQUIRE(c.GetStatus().ok());
  return ids;
}

// Checks that `o` is object i of PutMany.
void CheckObject(const Result<Object>& o, uint32_t i) {
  REQUIRE(o.ok());
  CHECK(Holds(*o, Pattern(64 + i % 50, i)));
  auto metadata = MetadataOf(i);
  CHECK(std::equal(o->metadata().begin(), o->metadata().end(), metadata.begin(), metadata.end()));
  CHECK(o->checksum().has_value());
  CHECK(o->Verify().ok());
  CHECK(o->creator_pid() == ::getpid());
}

}  // namespace

TEST_CASE("a multi-GUID get answers each GUID in its place with one round trip at most",
          "[multi_get]") {
  Daemon d;
  Client writer = d.Connect();
  std::vector<Guid> ids = PutMany(writer, 300);
  // Objects 290..299 are deleted: the index withdraws them.
  for (uint32_t i = 290; i < 300; ++i) REQUIRE(writer.Delete(ids[i]).ok());
  std::vector<Guid> missing = {Guid::Random(), Guid::Random(), Guid::Random()};

  auto reader = Client::Connect({d.socket(), "reader"});
  REQUIRE(reader.ok());

  // The reader has mapped no segment yet: the index names objects 0..49, but only the daemon's
  // reply brings the descriptor. One round trip for them and the deleted and missing GUIDs.
  std::vector<Guid> first(ids.begin(), ids.begin() + 50);
  first.push_back(ids[295]);
  first.push_back(missing[0]);
  uint64_t before = Requests(*reader, "reader");
  auto held = reader->Get(first);  // kept: these are held when the third batch asks again
  CHECK(Requests(*reader, "reader") == before + 2);  // the get, and the count's own request
  REQUIRE(held.size() == first.size());
  for (uint32_t i = 0; i < 50; ++i) CheckObject(held[i], i);
  CHECK(held[50].status().IsNotFound());
  CHECK(held[51].status().IsNotFound());

  // Objects 50..249 from the index, in a shuffled order with duplicates: no round trip.
  std::vector<uint32_t> order;
  for (uint32_t i = 50; i < 250; ++i) order.push_back(i);
  for (uint32_t i = 60; i < 80; ++i) order.push_back(i);
  std::shuffle(order.begin(), order.end(), std::mt19937(27));
  std::vector<Guid> indexed;
  for (uint32_t i : order) indexed.push_back(ids[i]);
  before = Requests(*reader, "reader");
  uint64_t index_gets = reader->index_gets();
  auto got = reader->Get(indexed);
  CHECK(Requests(*reader, "reader") == before + 1);  // only the count's own request
  CHECK(reader->index_gets() >= index_gets + 200);
  REQUIRE(got.size() == indexed.size());
  for (size_t k = 0; k < order.size(); ++k) CheckObject(got[k], order[k]);

  // A mix: held already (0..9), from the index (250..289), deleted (290..299), missing, each
  // more than once, shuffled: exactly one round trip, for the deleted and missing ones.
  std::vector<std::pair<Guid, int64_t>> mix;  // GUID, object number or -1: NotFound
  for (uint32_t i = 0; i < 10; ++i) mix.emplace_back(ids[i], i);
  for (uint32_t i = 250; i < 300; ++i) mix.emplace_back(ids[i], i < 290 ? int64_t{i} : -1);
  for (const Guid& g : missing) mix.emplace_back(g, -1);
  size_t n = mix.size();
  for (size_t k = 0; k < n; k += 3) mix.push_back(mix[k]);
  std::shuffle(mix.begin(), mix.end(), std::mt19937(9));
  std::vector<Guid> asked;
  for (const auto& [g, i] : mix) asked.push_back(g);
  before = Requests(*reader, "reader");
  got = reader->Get(asked);
  CHECK(Requests(*reader, "reader") == before + 2);  // the get, and the count's own request
  REQUIRE(got.size() == asked.size());
  for (size_t k = 0; k < mix.size(); ++k) {
    if (mix[k].second < 0) {
      CHECK(got[k].status().IsNotFound());
    } else {
      CheckObject(got[k], static_cast<uint32_t>(mix[k].second));
    }
  }
}

TEST_CASE("a multi-GUID get of more objects than the slots granted takes them all", "[multi_get]") {
  Daemon d;
  Client writer = d.Connect();
  std::vector<Guid> ids = PutMany(writer, 2000);
  Client reader = d.Connect();
  REQUIRE(reader.Get(ids[0]).ok());  // maps the segment
  // 1,999 objects held at once: more than the slots a connection starts with.
  auto got = reader.Get(std::span<const Guid>(ids).subspan(1));
  REQUIRE(got.size() == ids.size() - 1);
  for (uint32_t i = 1; i < ids.size(); ++i) CheckObject(got[i - 1], i);
  // Let go and got again: every slot freed is taken anew.
  got.clear();
  got = reader.Get(std::span<const Guid>(ids).subspan(1));
  for (uint32_t i = 1; i < ids.size(); ++i) CheckObject(got[i - 1], i);
}

TEST_CASE("a multi-GUID get waits its timeout for objects not sealed yet", "[multi_get]") {
  Daemon d;
  Client writer = d.Connect();
  std::vector<Guid> ids = PutMany(writer, 20);
  Client reader = d.Connect();
  REQUIRE(reader.Get(ids[0]).ok());  // maps the segment: the others come from the index
  auto draft = writer.Create({64});
  REQUIRE(draft.ok());
  std::memset(draft->frame(0).data(), 0x3c, 64);
  Guid never = Guid::Random();
  std::vector<Guid> asked = {ids[1], draft->guid(), never, ids[2]};

  // Without a timeout: the draft is not sealed yet (Timeout at once), the unknown GUID is not
  // found, the rest is answered.
  auto now = reader.Get(asked);
  REQUIRE(now.size() == 4);
  CheckObject(now[0], 1);
  CHECK(now[1].status().IsTimeout());
  CHECK(now[2].status().IsNotFound());
  CheckObject(now[3], 2);

  // With one: the draft sealed meanwhile is got, the unknown GUID times out, after the timeout.
  std::thread sealer([&] {
    std::this_thread::sleep_for(50ms);
    REQUIRE(draft->Seal().ok());
  });
  auto t0 = std::chrono::steady_clock::now();
  auto waited = reader.Get(asked, 500ms);
  auto took = std::chrono::steady_clock::now() - t0;
  sealer.join();
  REQUIRE(waited.size() == 4);
  CheckObject(waited[0], 1);
  REQUIRE(waited[1].ok());
  CHECK(waited[1]->size() == 64);
  CHECK(std::to_integer<int>(waited[1]->frame(0)[63]) == 0x3c);
  CHECK(waited[2].status().IsTimeout());
  CheckObject(waited[3], 2);
  CHECK(took >= 500ms);
}

TEST_CASE("a multi-GUID get racing deletes gets the old bytes or NotFound", "[multi_get]") {
  Daemon d;
  Client writer = d.Connect();
  Client deleter = d.Connect();
  Client reader = d.Connect();
  constexpr uint32_t kRounds = 20, kCount = 200;
  for (uint32_t round = 0; round < kRounds; ++round) {
    std::vector<Guid> ids;
    for (uint32_t i = 0; i < kCount; ++i) {
      auto id = writer.Put(Pattern(256, round * kCount + i));
      REQUIRE(id.ok());
      ids.push_back(*id);
    }
    REQUIRE(writer.GetStatus().ok());
    if (round == 0) REQUIRE(reader.Get(ids[0]).ok());  // maps the segment
    std::atomic<bool> go{false};
    std::thread deleting([&] {
      while (!go.load()) std::this_thread::yield();
      for (uint32_t i = 0; i < kCount; i += 2) (void)deleter.Delete(ids[i]);
    });
    go.store(true);
    auto got = reader.Get(ids);
    deleting.join();
    // The freed memory is written again by new puts: a result that still points at it would
    // change under the reader.
    for (uint32_t i = 0; i < kCount; ++i) REQUIRE(writer.Put(Pattern(256, 0xffff - i)).ok());
    REQUIRE(writer.GetStatus().ok());
    REQUIRE(got.size() == kCount);
    for (uint32_t i = 0; i < kCount; ++i) {
      if (i % 2 == 0 && !got[i].ok()) {
        CHECK(got[i].status().IsNotFound());
        continue;
      }
      REQUIRE(got[i].ok());
      CHECK(Holds(*got[i], Pattern(256, round * kCount + i)));
    }
  }
}

namespace {

// Objects kept by a thread_local, let go by its destructor when the thread ends.
struct KeptUntilThreadEnds {
  std::vector<Result<Object>> objects;
};

// How many objects this process holds, as the daemon sees it.
size_t HeldByThisProcess(Client& c) {
  size_t held = 0;
  std::optional<Guid> after;
  while (true) {
    auto page = c.ListHeldBy(::getpid(), after);
    REQUIRE(page.ok());
    held += page->objects.size();
    if (!page->more || page->objects.empty()) return held;
    after = page->objects.back().guid;
  }
}

}  // namespace

TEST_CASE("objects got on a thread are let go cleanly after it ended, and as it ends",
          "[multi_get]") {
  // A thread keeps the blocks of the holdings let go on it for its next gets (NewHolding); these
  // are let go on another thread after the getting one ended, and by a thread_local's destructor
  // after that thread's kept blocks went back to the heap.
  Daemon d;
  Client writer = d.Connect();
  std::vector<Guid> ids = PutMany(writer, 3000);
  REQUIRE(HeldByThisProcess(writer) == 0);
  Client reader = d.Connect();
  REQUIRE(reader.Get(ids[0]).ok());  // maps the segment
  std::vector<Result<Object>> got;
  std::thread([&] {
    got = reader.Get(ids);
    got.clear();  // its blocks kept by this thread, more than it keeps
    got = reader.Get(ids);
  }).join();
  for (uint32_t i = 0; i < ids.size(); ++i) CheckObject(got[i], i);
  REQUIRE(HeldByThisProcess(writer) == ids.size());
  got.clear();
  REQUIRE(HeldByThisProcess(writer) == 0);
  std::thread([&] {
    static thread_local KeptUntilThreadEnds kept;  // made before the thread's kept blocks
    kept.objects = reader.Get(ids);
    for (uint32_t i = 0; i < ids.size(); ++i) CheckObject(kept.objects[i], i);
    std::vector<Result<Object>> more = reader.Get(std::span<const Guid>(ids).first(100));
  }).join();
  REQUIRE(HeldByThisProcess(writer) == 0);
  got = reader.Get(ids);
  for (uint32_t i = 0; i < ids.size(); ++i) CheckObject(got[i], i);
}
