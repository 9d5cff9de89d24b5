// Tests for LeaseTable against its contract (daemon/lease_table.h): Carve cuts a put's frames
// off the front of a lease, each a block of its own, frees the gaps it skips, moves the charge,
// refuses whatever lies outside the unconsumed part and then changes nothing, and leaves the
// cursor at the lease's end after a frame that took the rest; TakeBack hands blocks of deleted
// objects back within its bounds; End frees what is left and returns the charge; Holders and
// IdleSince name the sessions. The memory is a real host pool of a namespace, whose `used`
// bytes show what was cut, freed or leaked.
#include "daemon/lease_table.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "proto/object_rules.h"
#include "tests/namespace_fixture.h"

namespace depot {
namespace {

using Catch::Matchers::Contains;
constexpr uint64_t kLease = 64 << 10;

// A namespace (tests/namespace_fixture.h) and a lease table over it.
struct Leases : test::TestNamespace {
  explicit Leases(uint64_t keep_warm = 1 << 20) : TestNamespace(keep_warm) {}
  // Grants `session` a lease of `size` bytes charged in full; returns its block.
  Location Grant(SessionId session, uint64_t size = kLease) {
    Location block = Allocate(size);
    table.Grant(session, ns(), block, size);
    return block;
  }
  LeaseTable table;
};

// The frames of a put, as a put message carries them.
class Frames {
 public:
  Frames(std::initializer_list<wire::FrameLocation> frames) {
    std::vector<wire::FrameLocation> v(frames);
    auto locations = fbb_.CreateVectorOfStructs(v);
    wire::PutRequestBuilder b(fbb_);
    b.add_frames(locations);
    fbb_.Finish(b.Finish());
  }
  operator const flatbuffers::Vector<const wire::FrameLocation*>&() const {
    return *flatbuffers::GetRoot<wire::PutRequest>(fbb_.GetBufferPointer())->frames();
  }

 private:
  flatbuffers::FlatBufferBuilder fbb_;
};

wire::FrameLocation At(const Location& lease, uint64_t from_start, uint64_t size) {
  return wire::FrameLocation(lease.offset + from_start, size, lease.segment, 0);
}

TEST_CASE("Carve cuts frames in order off the lease, each a block of its own", "[lease_table]") {
  Leases l;
  Location lease = l.Grant(1);
  CHECK(l.table.leased() == kLease);
  CHECK(l.used() == kLease);
  // Two frames back to back, an empty one between them taking nothing.
  auto cut = l.table.Carve(
      1, Frames{At(lease, 0, 100), wire::FrameLocation(12345, 0, 99, 7), At(lease, 128, 64)});
  REQUIRE(cut.ok());
  REQUIRE(cut->size() == 3);
  CHECK((*cut)[0].offset == lease.offset);
  CHECK((*cut)[0].size == 100);
  CHECK((*cut)[0].segment == lease.segment);
  CHECK((*cut)[1].size == 0);
  CHECK((*cut)[2].offset == lease.offset + 128);
  CHECK((*cut)[2].size == 64);
  CHECK(l.table.leased() == kLease - 128 - 64);
  CHECK(l.used() == kLease);  // nothing freed: no gap was skipped
  // Each frame is a block of its own: freeing one gives back exactly its rounded size.
  l.Free({(*cut)[0]});
  CHECK(l.used() == kLease - 128);
  // The charge for the frames' bytes moved to the caller: End returns the rest.
  CHECK(l.table.End(1) == kLease - 164);
  CHECK(l.used() == 64);
  CHECK(l.table.leased() == 0);
  l.Free({(*cut)[2]});
  CHECK(l.used() == 0);
}

TEST_CASE("Carve frees at once a gap a put skips, and the next put starts past it",
          "[lease_table]") {
  Leases l;
  Location lease = l.Grant(1);
  auto cut = l.table.Carve(1, Frames{At(lease, 4096, 64)});
  REQUIRE(cut.ok());
  CHECK(l.used() == kLease - 4096);
  CHECK(l.table.leased() == kLease - 4096 - 64);
  // The gap is gone from the lease: a put there is outside it now.
  auto back = l.table.Carve(1, Frames{At(lease, 0, 64)});
  CHECK(back.status().IsProtocolError());
  auto next = l.table.Carve(1, Frames{At(lease, 4096 + 64, 64)});
  REQUIRE(next.ok());
  l.Free(*cut);
  l.Free(*next);
  CHECK(l.table.End(1) == kLease - 128);
  CHECK(l.used() == 0);
}

TEST_CASE("a frame that takes the rest of the lease leaves its cursor at the lease's end",
          "[lease_table]") {
  Leases l;
  Location lease = l.Grant(1);
  uint64_t put = 0;  // the puts' bytes
  SECTION("the whole lease in one frame") {
    REQUIRE(l.table.Carve(1, Frames{At(lease, 0, kLease)}).ok());
    put = kLease;
  }
  SECTION("a frame, then one whose size rounds up to the rest") {
    REQUIRE(l.table.Carve(1, Frames{At(lease, 0, 64)}).ok());
    REQUIRE(l.table.Carve(1, Frames{At(lease, 64, kLease - 64 - 10)}).ok());
    put = kLease - 10;
  }
  CHECK(l.table.leased() == 0);
  CHECK(l.used() == kLease);
  // Nothing is left: a put anywhere in the lease, at the last frame's start included, is
  // refused, names the cursor at the lease's end, and cuts nothing.
  for (uint64_t from : {uint64_t{0}, uint64_t{64}, kLease - 64}) {
    INFO("a put at +" << from);
    auto again = l.table.Carve(1, Frames{At(lease, from, 64)});
    REQUIRE(again.status().IsProtocolError());
    CHECK_THAT(again.status().message(),
               Contains(fmt::format("the part before {} used", lease.offset + kLease)));
    CHECK(l.used() == kLease);
    CHECK(l.table.leased() == 0);
  }
  CHECK(l.table.End(1) == kLease - put);
  CHECK(l.used() == kLease);  // the objects' blocks, which the caller frees
}

TEST_CASE("Carve refuses a frame outside the unconsumed part and then changes nothing",
          "[lease_table]") {
  Leases l;
  Location lease = l.Grant(1);
  REQUIRE(l.table.Carve(1, Frames{At(lease, 0, 64)}).ok());  // the cursor is at +64
  const uint64_t used = l.used();
  const uint64_t leased = l.table.leased();
  struct Bad {
    const char* what;
    Frames frames;
  };
  Bad bad[] = {
      {"before the cursor", Frames{At(lease, 0, 64)}},
      {"unaligned", Frames{At(lease, 64 + 8, 64)}},
      {"another segment", Frames{wire::FrameLocation(lease.offset + 64, 64, lease.segment + 1, 0)}},
      {"a device pool", Frames{wire::FrameLocation(lease.offset + 64, 64, lease.segment, 1)}},
      {"at the lease's end", Frames{At(lease, kLease, 64)}},
      {"past the lease's end", Frames{At(lease, kLease - 64, 65)}},
      {"a size that rounds to 0", Frames{At(lease, 64, ~uint64_t{0} - 10)}},
      {"a second frame over the first", Frames{At(lease, 128, 128), At(lease, 192, 64)}},
      {"a good frame, then a bad one", Frames{At(lease, 64, 64), At(lease, 0, 64)}},
      {"frames out of order", Frames{At(lease, 1024, 64), At(lease, 512, 64)}},
  };
  for (const Bad& b : bad) {
    INFO(b.what);
    auto cut = l.table.Carve(1, b.frames);
    CHECK(cut.status().IsProtocolError());
    CHECK_THAT(cut.status().message(), Contains("outside its lease"));
    CHECK(l.used() == used);
    CHECK(l.table.leased() == leased);
  }
  // Without a lease, nothing is cut either.
  CHECK(l.table.Carve(2, Frames{At(lease, 64, 64)}).status().IsProtocolError());
  // The lease is as it was: a put at its cursor is cut.
  auto good = l.table.Carve(1, Frames{At(lease, 64, 64)});
  REQUIRE(good.ok());
  CHECK((*good)[0].offset == lease.offset + 64);
}

TEST_CASE("a cut the checks allowed that fails all the same is an error, not assumed away",
          "[lease_table]") {
  spdlog::set_level(spdlog::level::off);
  Leases l(/*keep_warm=*/0);
  Location lease = l.Grant(1);
  // The lease's block is freed behind the table's back (a broken invariant), and its segment,
  // empty, given back: the cut that the checks allow cannot be made, and Carve says so instead
  // of handing out memory that is gone.
  l.Free({lease});
  REQUIRE(l.segments() == 0);
  auto cut = l.table.Carve(1, Frames{At(lease, 0, 64)});
  CHECK(cut.status().IsProtocolError());
  CHECK_THAT(cut.status().message(), Contains("could not cut"));
  spdlog::set_level(spdlog::level::info);
}

TEST_CASE("blocks of deleted objects go back to the lease and serve a later put", "[lease_table]") {
  Leases l;
  Location lease = l.Grant(1);
  auto cut = l.table.Carve(1, Frames{At(lease, 0, 1000)});
  REQUIRE(cut.ok());
  const uint64_t leased = l.table.leased();
  // The object is freed: its block (its size rounded up) is the lease's again, charged to it.
  auto block = l.table.TakeBack(1, (*cut)[0]);
  REQUIRE(block);
  CHECK(block->offset == lease.offset);
  CHECK(block->size == proto::RoundUpToBlock(1000));
  CHECK(l.table.leased() == leased + block->size);
  CHECK(l.used() == kLease);  // still allocated, to the lease
  // A smaller put at the block's start reuses it; the rest of the block is freed.
  auto reused = l.table.Carve(1, Frames{At(lease, 0, 100)});
  REQUIRE(reused.ok());
  CHECK((*reused)[0].offset == lease.offset);
  CHECK(l.used() == kLease - (block->size - 128));
  CHECK(l.table.leased() == leased);
  // A returned block serves one put: the same offset again is before the cursor.
  CHECK(l.table.Carve(1, Frames{At(lease, 0, 64)}).status().IsProtocolError());
  l.Free(*reused);
  // The charge: the lease's 64 KiB, less the two puts' bytes, plus the block taken back.
  CHECK(l.table.End(1) == kLease - 1000 - 100 + block->size);
  CHECK(l.used() == 0);
}

TEST_CASE("TakeBack takes only blocks of the current lease, within its bounds", "[lease_table]") {
  Leases l;
  Location other = l.Allocate(64);          // not cut from any lease
  CHECK_FALSE(l.table.TakeBack(1, other));  // no lease
  Location lease = l.Grant(1);
  CHECK_FALSE(l.table.TakeBack(1, other));
  CHECK_FALSE(l.table.TakeBack(1, Location{.segment = lease.segment, .offset = lease.offset}));
  CHECK_FALSE(l.table.TakeBack(
      1, Location{.segment = lease.segment, .pool = 1, .offset = lease.offset, .size = 64}));
  auto cut = l.table.Carve(1, Frames{At(lease, 0, 64), At(lease, 64, 64), At(lease, 128, 64),
                                     At(lease, 192, 64), At(lease, 256, 64), At(lease, 320, 64),
                                     At(lease, 384, 64), At(lease, 448, 64), At(lease, 512, 64)});
  REQUIRE(cut.ok());
  // At most kMaxReturned blocks: the ninth goes to the pool.
  for (size_t i = 0; i < LeaseTable::kMaxReturned; ++i) CHECK(l.table.TakeBack(1, (*cut)[i]));
  CHECK_FALSE(l.table.TakeBack(1, (*cut)[LeaseTable::kMaxReturned]));
  l.Free({(*cut)[LeaseTable::kMaxReturned]});
  // End frees the blocks taken back with the rest of the lease.
  l.table.End(1);
  l.Free({other});
  CHECK(l.used() == 0);
  CHECK(l.table.leased() == 0);
  // After End, the session's old blocks are no lease's.
  CHECK_FALSE(l.table.TakeBack(1, (*cut)[0]));
}

TEST_CASE("TakeBack holds at most the lease's size in blocks taken back", "[lease_table]") {
  Leases l;
  Location lease = l.Grant(1);
  auto cut = l.table.Carve(1, Frames{At(lease, 0, kLease / 2), At(lease, kLease / 2, kLease / 2)});
  REQUIRE(cut.ok());
  CHECK(l.table.TakeBack(1, (*cut)[0]));
  CHECK(l.table.TakeBack(1, (*cut)[1]));
  // One more block (the same one again, as a client that lies would have it) would pass the
  // lease's size: refused, and the charge is the two blocks'.
  CHECK_FALSE(l.table.TakeBack(1, (*cut)[0]));
  CHECK(l.table.leased() == kLease);
  CHECK(l.table.End(1) == kLease);  // the puts' bytes went, the blocks' came back
  CHECK(l.used() == 0);
}

TEST_CASE("End frees what is left and returns the charge, 0 without a lease", "[lease_table]") {
  Leases l;
  CHECK(l.table.End(1) == 0);
  Location lease = l.Allocate(kLease);
  l.table.Grant(1, l.ns(), lease, 1000);  // charged less than its size
  CHECK(l.table.End(1) == 1000);
  CHECK(l.used() == 0);
  CHECK(l.table.empty());
  CHECK(l.table.End(1) == 0);
}

TEST_CASE("Holders and IdleSince name the sessions holding leases", "[lease_table]") {
  Leases l;
  CHECK(l.table.empty());
  Location a = l.Grant(1);
  l.Grant(2);
  auto holders = l.table.Holders();
  std::sort(holders.begin(), holders.end());
  CHECK(holders == std::vector<SessionId>{1, 2});
  auto granted = std::chrono::steady_clock::now();
  CHECK(l.table.IdleSince(granted - std::chrono::hours(1)).empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  auto between = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  // A put cut from session 1's lease makes it used again; a refused one does not.
  auto cut = l.table.Carve(1, Frames{At(a, 0, 64)});
  REQUIRE(cut.ok());
  CHECK(l.table.Carve(2, Frames{At(a, 0, 64)}).status().IsProtocolError());
  CHECK(l.table.IdleSince(between) == std::vector<SessionId>{2});
  CHECK(l.table.IdleSince(std::chrono::steady_clock::now() + std::chrono::seconds(1)).size() == 2);
  l.table.End(1);
  CHECK(l.table.Holders() == std::vector<SessionId>{2});
  l.table.End(2);
  l.Free(*cut);
  CHECK(l.table.empty());
  CHECK(l.used() == 0);
}

}  // namespace
}  // namespace depot
