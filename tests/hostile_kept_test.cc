// Hostile neighbours against the memory kept across a crash of depotd (docs/design.md, "Memory
// kept across restarts"): what a client leaves in its kept put ring after the daemon died is
// held to the same checks as a put to a live daemon. Real daemons under the descriptor store's
// stand-in, a real kill -9, and the attacker a process of another uid.
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/daemon_fixture.h"
#include "tests/fd_store_stand_in.h"
#include "tests/kept_service.h"
#include "tests/other_users.h"
#include "tests/raw_connection.h"
#include "tests/raw_ring.h"

using namespace depot;
using namespace depot::test;

namespace {

// A put-ring record of `frames` named `guid`, with `metadata` and `name` as given.
std::vector<uint8_t> Record(const Guid& guid, const std::vector<wire::FrameLocation>& frames,
                            size_t metadata = 0, size_t name = 0) {
  flatbuffers::FlatBufferBuilder fbb(1024);
  wire::Guid g = proto::ToWire(guid);
  auto locations = fbb.CreateVectorOfStructs(frames);
  std::vector<uint8_t> meta(metadata, 0x5a);
  auto meta_offset = fbb.CreateVector(meta);
  auto name_offset = fbb.CreateString(std::string(name, 'n'));
  wire::PutRequestBuilder b(fbb);
  b.add_guid(&g);
  b.add_frames(locations);
  if (metadata > 0) b.add_metadata(meta_offset);
  if (name > 0) b.add_name(name_offset);
  fbb.Finish(b.Finish());
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

// A daemon under the stand-in that Alice and Mallory may use.
Service OpenService(const std::string& dir, FdStoreStandIn& store) {
  REQUIRE(::chmod(dir.c_str(), 0755) == 0);
  return Service(
      dir, store,
      {"--allow-users", fmt::format("{},{}", kAlice, kMallory), "--socket-mode", "0666"});
}

}  // namespace

TEST_CASE("put-ring records written after a crash are held to a live put's checks",
          "[kept][hostile]") {
  NeedRoot();
  std::string dir = TempDir();
  FdStoreStandIn store(dir + "/notify");
  Put victim;
  {
    Service first = OpenService(dir, store);
    Client c = first.Connect();
    victim = PutFrames(c, {100000}, 3);
    // Mallory takes a lease, then waits for the daemon to die with her ring kept.
    Channel leased, go;
    pid_t mallory = Spawn([&] {
      return RunAs(kMallory, kMallory, {}, [&] {
        Raw r(first.socket);
        RawRing ring(r);
        wire::FrameLocation lease = r.Lease(4 << 20);
        leased.Send("leased");
        if (go.Receive() != "go") return 101;
        auto at = [&](uint64_t offset, uint64_t size) {
          return wire::FrameLocation(lease.offset() + offset, size, lease.segment(), 0);
        };
        // Each breaks one rule of a live put, in the blocks of her own lease.
        ring.Append(Record(Guid::Random(), {at(0, UINT64_MAX)}));  // wraps to 0 when rounded
        ring.Append(Record(Guid(), {at(4096, 64)}));               // the nil GUID
        ring.Append(Record(Guid::Random(), {}));                   // no frame
        ring.Append(Record(Guid::Random(), std::vector<wire::FrameLocation>(300, at(8192, 64))));
        ring.Append(Record(Guid::Random(), {at(12288, 64)}, 40 << 10));  // metadata over the limit
        ring.Append(Record(Guid::Random(), {at(16384, 64)}, 0, 2048));   // a name over the limit
        // And one put a live daemon takes: adopted, after all the refused ones.
        ring.Append(Record(Guid::Random(), {at(65536, 4096)}));
        return 0;
      });
    });
    REQUIRE(leased.Receive() == "leased");
    Crash(first, c, store);
    go.Send("go");
    int status = Wait(mallory);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
  }
  store.Drain();
  Service second = OpenService(dir, store);
  Client c = second.Connect();
  StoreStatus st = StatusOf(c);
  INFO(second.Log());
  CHECK(st.adopted_objects == 2);
  CHECK(st.adoption_dropped == 6);
  CHECK(second.Log().find("a put refused") != std::string::npos);
  CheckSame(c, victim);
  // What was adopted is what a live daemon would hold, and the sums are true.
  auto page = c.List();
  REQUIRE(page.ok());
  REQUIRE(page->objects.size() == 2);
  uint64_t sizes = 0;
  for (const ObjectInfo& o : page->objects) {
    if (o.guid == victim.guid) continue;
    CHECK(o.creator_uid == kMallory);
    CHECK(o.size == 4096);
    sizes += o.size;
  }
  CHECK(sizes == 4096);
  CHECK(st.used <= st.capacity);
  CHECK(st.used >= 100000 + 4096);
  // The victim's puts go on as before.
  Put after = PutFrames(c, {1 << 20}, 9);
  CheckSame(c, after);
  std::filesystem::remove_all(dir);
}
