// Device memory kept across a crash of depotd, on the stand-in GPUs of memfd_depotd (their chunks
// are memfd segments; not GPU coverage: cuda_test checks on a GPU what this rests on). A real
// daemon hands each device chunk's descriptor to a descriptor store (the test plays systemd's part,
// tests/fd_store_stand_in.h), is killed with SIGKILL, and the next one serves the same device
// objects from the same chunks, on the GPUs of the same UUIDs whatever their numbers now.
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/daemon_fixture.h"
#include "tests/fd_store_stand_in.h"
#include "tests/kept_service.h"

using namespace depot;
using namespace depot::test;
using namespace std::chrono_literals;

namespace {

const std::string kUuid1 = "GPU-00000000-0000-4000-8000-000000000001";
const std::string kUuid2 = "GPU-00000000-0000-4000-8000-000000000002";

CreateOptions On(std::vector<Place> places) {
  CreateOptions o;
  o.places = std::move(places);
  return o;
}

// A stand-in daemon under `store` with `args` after the chunk size.
Service StandIn(const std::string& dir, FdStoreStandIn& store, std::vector<std::string> args = {}) {
  args.insert(args.begin(), {"--device-chunk-size", "16MiB"});
  return Service(dir, store, args, MEMFD_DEPOTD_PATH);
}

}  // namespace

TEST_CASE("After a kill -9, the next depotd serves every device object from the kept chunks",
          "[kept][device]") {
  std::string dir = TempDir();
  FdStoreStandIn store(dir + "/notify");
  const Place gpu1 = Place::Gpu(kUuid1), gpu2 = Place::Gpu(kUuid2);
  std::vector<Put> puts;
  std::vector<std::vector<Place>> places;
  {
    Service first = StandIn(dir, store);
    Client c = first.Connect();
    places = {{gpu1}, {gpu2, Place::Host(), gpu1}, {gpu2}, {Place::Host()}};
    puts.push_back(PutFrames(c, {100000}, 1, On(places[0])));
    puts.push_back(PutFrames(c, {5000, 300, 10 << 20}, 2, On(places[1])));
    puts.push_back(PutFrames(c, {12 << 20}, 3, On(places[2])));  // a chunk of its own
    puts.push_back(PutFrames(c, {4096}, 4));
    Put deleted = PutFrames(c, {777}, 5, On({gpu1}));
    REQUIRE(c.Delete(deleted.guid).ok());
    store.Drain(1s);
    // A chunk of each GPU at least (device pools 1 and 2 of the shared namespace).
    CHECK(store.Count("depot.dev.4294967295.1.") >= 1);
    CHECK(store.Count("depot.dev.4294967295.2.") >= 1);
    CHECK(store.Names("depot.gpu.") ==
          std::vector<std::string>{"depot.gpu.1." + kUuid1, "depot.gpu.2." + kUuid2});
    first.Kill();
  }
  store.Drain();
  Service second = StandIn(dir, store);
  Client c = second.Connect();
  CheckAllAdopted(c, second, puts);
  for (size_t i = 0; i < puts.size(); ++i) {
    auto got = c.Get(puts[i].guid);
    REQUIRE(got.ok());
    for (size_t f = 0; f < places[i].size(); ++f) CHECK(got->place(f) == places[i][f]);
  }
  // Room on the GPUs is counted as the last daemon left it: its chunks are this daemon's now.
  auto st = StatusOf(c);
  REQUIRE(st.device_pools.size() == 2);
  CHECK(st.device_pools[0].used >= 100000 + (10 << 20));
  CHECK(st.device_pools[1].used >= 5000 + (12 << 20));
  // A device object made now goes to a chunk of this daemon's, and the next restart keeps both.
  Put later = PutFrames(c, {2048}, 6, On({gpu2}));
  puts.push_back(later);
  store.Drain(1s);
  second.Kill();
  store.Drain();
  Service third = StandIn(dir, store);
  Client again = third.Connect();
  for (const Put& p : puts) CheckSame(again, p);
  std::filesystem::remove_all(dir);
}

TEST_CASE("Kept chunks follow their GPU's UUID, and those of a GPU gone are given back",
          "[kept][device]") {
  std::string dir = TempDir();
  FdStoreStandIn store(dir + "/notify");
  const Place gpu1 = Place::Gpu(kUuid1), gpu2 = Place::Gpu(kUuid2);
  Put on2, mixed, on1;
  {
    Service first = StandIn(dir, store);
    Client c = first.Connect();
    on2 = PutFrames(c, {3000}, 1, On({gpu2}));  // device pool 2 here
    mixed = PutFrames(c, {64, 9000}, 2, On({Place::Host(), gpu2}));
    on1 = PutFrames(c, {5000, 10}, 3, On({gpu1, Place::Host()}));
    store.Drain(1s);
    first.Kill();
  }
  store.Drain();
  // The first GPU configured out: the second is device pool 1 now.
  Service second = StandIn(dir, store, {"--devices", kUuid2});
  Client c = second.Connect();
  auto st = StatusOf(c);
  INFO(second.Log());
  CHECK(st.adopted_objects == 2);
  CHECK(st.adoption_dropped == 1);  // on1: its GPU has no pool here
  REQUIRE(st.device_pools.size() == 1);
  CHECK(st.device_pools[0].uuid == kUuid2);
  CheckSame(c, on2);
  CheckSame(c, mixed);
  CHECK(c.Get(on2.guid)->place(0) == gpu2);
  CHECK(c.Get(mixed.guid)->place(1) == gpu2);
  CHECK(c.Get(on1.guid).status().IsNotFound());
  // The store names the chunks and the GPU by this daemon's numbers, and holds nothing of the
  // GPU it has no pool for.
  store.Drain(1s);
  CHECK(store.Names("depot.gpu.") == std::vector<std::string>{"depot.gpu.1." + kUuid2});
  for (const std::string& name : store.Names("depot.dev.")) {
    INFO(name);
    CHECK(name.starts_with("depot.dev.4294967295.1."));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("With a spill directory too, each GPU is named once in the store, restart after restart",
          "[kept][device]") {
  // The spill directory makes the namespace, and so its device pools, before adoption reads what
  // the last daemon kept.
  std::string dir = TempDir();
  FdStoreStandIn store(dir + "/notify");
  const std::vector<std::string> spill = {"--spill-dir", dir + "/spill"};
  std::vector<Put> puts;
  for (int start = 1; start <= 3; ++start) {
    INFO("daemon " << start);
    Service daemon = StandIn(dir, store, spill);
    Client c = daemon.Connect();
    if (start > 1) CheckAllAdopted(c, daemon, puts);
    puts.push_back(PutFrames(c, {50000}, start, On({Place::Gpu(kUuid1)})));
    Crash(daemon, c, store);
    CHECK(store.Names("depot.gpu.") ==
          std::vector<std::string>{"depot.gpu.1." + kUuid1, "depot.gpu.2." + kUuid2});
  }
  std::filesystem::remove_all(dir);
}
