// Tests for depot::SegmentedPool (daemon/segmented_pool.h): over real sealed memfds (ShmSource),
// the host pool's policy; over memfd chunks of a stand-in GPU (DeviceSource on MemfdBackend), a
// device pool's.
#include "daemon/segmented_pool.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "daemon/device_source.h"
#include "daemon/segment_maker.h"
#include "daemon/shm_source.h"
#include "depot/units.h"
#include "tests/memfd_backend.h"

namespace depot {
namespace {

using Catch::Matchers::Contains;

constexpr uint64_t kMiB = 1 << 20;

// A name prefix no other test (or concurrent run of this binary) uses.
std::string UniquePrefix() {
  static int n = 0;
  return "depot-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + "-";
}

// Whether this process holds a descriptor of the memfd named `name`: a segment exists while its
// pool keeps it (no file names it anywhere).
bool ShmExists(const std::string& name) {
  const std::string link = "/memfd:" + name + " (deleted)";
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (std::filesystem::read_symlink(e.path(), ec).string() == link) return true;
  }
  return false;
}

constexpr uint32_t kOwner = 1000;  // the uid whose objects a test allocates

// A pool with a budget of its own (keeping up to `warm` bytes of empty segments) and a record of
// the segments it retired.
struct Fixture {
  Fixture(std::unique_ptr<SegmentSource> source, uint64_t capacity, SegmentedPoolOptions o,
          uint64_t warm)
      : budget{capacity, 0, warm} {
    o.budget = &budget;
    auto r = SegmentedPool::Create(std::move(source), o, [this](uint32_t id) {
      retired.push_back(id);
      return held;
    });
    REQUIRE(r.ok());
    pool = std::move(*r);
  }

  Location Allocate(uint64_t size, uint32_t owner = kOwner) {
    auto r = pool->Allocate(size, owner);
    REQUIRE(r.ok());
    return *r;
  }

  PoolBudget budget;
  std::vector<uint32_t> retired;
  bool held = false;  // what the retire callback answers: some client still maps the segment
  std::unique_ptr<SegmentedPool> pool;
};

// The host pool, as the store makes it: shared-memory segments under a prefix of its own, large
// objects in segments that are kept warm; one segment's worth kept warm unless told.
struct PoolFixture : Fixture {
  explicit PoolFixture(uint64_t capacity, uint64_t segment_size = kMiB, bool prefault = false,
                       uint64_t warm = kMiB, const std::string& prefix = UniquePrefix())
      : Fixture(std::make_unique<ShmSource>(prefix), ShmSource::UsableCapacity(capacity),
                {.segment_size = segment_size, .prefault = prefault, .reuse_large = true}, warm),
        prefix(prefix) {}

  std::string Name(uint32_t id) const { return prefix + std::to_string(id); }

  std::string prefix;
};

TEST_CASE("The host pool creates segments on demand, 0600, and aligns offsets",
          "[segmented_pool]") {
  PoolFixture f(4 * kMiB);
  CHECK(f.pool->stats().segments == 0);
  CHECK(f.pool->stats().reserved == 0);

  Location first = f.Allocate(100);
  CHECK(first.offset % 64 == 0);
  CHECK(first.size == 100);
  CHECK(f.pool->stats().segments == 1);
  CHECK(f.pool->stats().reserved == kMiB);
  const SegmentedPool::Segment* seg = f.pool->segment(first.segment);
  REQUIRE(seg != nullptr);
  CHECK_FALSE(seg->dedicated);
  CHECK(seg->size() == kMiB);

  struct stat st {};
  REQUIRE(::fstat(seg->fd(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  CHECK(static_cast<uint64_t>(st.st_size) == kMiB);
  CHECK(::fcntl(seg->fd(), F_GET_SEALS) == (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));
  CHECK(ShmExists(f.Name(first.segment)));

  // Fill past the first segment: a second one appears, every block aligned and in bounds.
  std::vector<Location> blocks = {first};
  uint64_t total = 100;
  for (uint64_t size = 1; total < kMiB + kMiB / 2; size = size * 3 % 20011 + 1) {
    Location l = f.Allocate(size);
    CHECK(l.offset % 64 == 0);
    CHECK(l.offset + size <= f.pool->segment(l.segment)->size());
    blocks.push_back(l);
    total += size;
  }
  CHECK(f.pool->stats().segments == 2);
  CHECK(f.pool->stats().reserved == 2 * kMiB);
  for (const Location& l : blocks) CHECK(ShmExists(f.Name(l.segment)));
}

TEST_CASE("The host pool gives a large object a segment of its size and retires it past the limit",
          "[segmented_pool]") {
  PoolFixture f(8 * kMiB);  // keeps 1 MiB warm: less than the large segment
  Location small = f.Allocate(64);
  Location big = f.Allocate(kMiB + kMiB / 2);
  CHECK(big.segment != small.segment);
  const SegmentedPool::Segment* seg = f.pool->segment(big.segment);
  REQUIRE(seg != nullptr);
  CHECK(seg->large);
  CHECK_FALSE(seg->dedicated);  // its descriptor travels once per session, like any other
  CHECK(seg->size() >= kMiB + kMiB / 2);
  CHECK(seg->size() % 4096 == 0);
  CHECK(f.pool->stats().reserved == kMiB + seg->size());
  REQUIRE(ShmExists(f.Name(big.segment)));

  // Nothing small is ever placed in a large segment, even when it has room.
  Location other = f.Allocate(64);
  CHECK(other.segment == small.segment);

  f.pool->Free(big);
  CHECK(f.pool->segment(big.segment) == nullptr);
  CHECK_FALSE(ShmExists(f.Name(big.segment)));
  CHECK(f.retired == std::vector<uint32_t>{big.segment});
  CHECK(f.pool->stats().reserved == kMiB);
  CHECK(f.budget.warm == 0);
}

TEST_CASE("The host pool keeps an empty large segment warm and reuses it for large objects",
          "[segmented_pool]") {
  PoolFixture f(16 * kMiB, kMiB, false, /*warm=*/5 * kMiB);
  Location big = f.Allocate(3 * kMiB);
  const uint32_t id = big.segment;
  f.pool->Free(big);
  // Kept: the same memory, counted as warm, given back to nobody.
  REQUIRE(f.pool->segment(id) != nullptr);
  CHECK(ShmExists(f.Name(id)));
  CHECK(f.retired.empty());
  CHECK(f.budget.warm == 3 * kMiB);
  CHECK(f.pool->stats().reserved == 3 * kMiB);

  // A small object does not take it; large ones do, two of them side by side.
  Location small = f.Allocate(64);
  CHECK(small.segment != id);
  Location a = f.Allocate(kMiB + kMiB / 4);
  Location b = f.Allocate(kMiB + kMiB / 4);
  CHECK(a.segment == id);
  CHECK(b.segment == id);
  CHECK(a.offset != b.offset);
  CHECK(f.budget.warm == 0);
  // A third does not fit there: a segment of its own size.
  Location c = f.Allocate(kMiB + kMiB / 4);
  CHECK(c.segment != id);
  CHECK(f.pool->segment(c.segment)->size() == kMiB + kMiB / 4);

  for (const Location& l : {a, b, c, small}) f.pool->Free(l);
  // Empty: 3 + 1.25 + 1 MiB, of which 5 MiB may be kept: the last to fall empty goes back.
  CHECK(f.budget.warm == 3 * kMiB + kMiB + kMiB / 4);
  CHECK(f.retired == std::vector<uint32_t>{small.segment});
  // An object picks the smallest empty segment that holds it.
  Location d = f.Allocate(kMiB + kMiB / 8);
  CHECK(f.pool->segment(d.segment)->size() < 3 * kMiB);
  f.pool->Free(d);
  uint64_t warm = f.budget.warm;
  CHECK(f.pool->ReleaseSpares() == warm);
  CHECK(f.budget.warm == 0);
  CHECK(f.pool->stats().segments == 0);
  CHECK(f.budget.reserved == 0);
}

TEST_CASE("A retired segment that clients still map stays counted until they drop it",
          "[segmented_pool]") {
  PoolFixture f(2 * kMiB);  // room for two 1 MiB segments
  f.held = true;
  Location big = f.Allocate(kMiB + kMiB / 2);  // a dedicated segment of 1.5 MiB rounded up
  uint64_t big_size = f.pool->segment(big.segment)->size();
  f.pool->Free(big);
  CHECK(f.retired == std::vector<uint32_t>{big.segment});
  CHECK(f.pool->segment(big.segment) == nullptr);
  CHECK(ShmExists(f.Name(big.segment)));  // its memory is kept while it is held
  CHECK(f.pool->stats().retired_held == big_size);
  CHECK(f.pool->stats().reserved == big_size);
  CHECK(f.budget.reserved == big_size);
  auto refused = f.pool->Allocate(kMiB, kOwner);
  REQUIRE(refused.status().IsStoreFull());
  CHECK(refused.status().message().find("in retired segments that clients have not unmapped") !=
        std::string::npos);
  f.pool->Dropped(big.segment + 1);  // not held: nothing changes
  CHECK(f.pool->stats().retired_held == big_size);
  f.pool->Dropped(big.segment);
  CHECK_FALSE(ShmExists(f.Name(big.segment)));
  CHECK(f.pool->stats().retired_held == 0);
  CHECK(f.budget.reserved == 0);
  CHECK(f.pool->Allocate(kMiB, kOwner).ok());
}

TEST_CASE("The host pool keeps at most one empty shared segment", "[segmented_pool]") {
  PoolFixture f(4 * kMiB);
  // 768 KiB blocks: one per 1 MiB segment.
  std::vector<Location> blocks;
  for (int i = 0; i < 3; ++i) blocks.push_back(f.Allocate(768 * 1024));
  CHECK(f.pool->stats().segments == 3);

  for (const Location& l : blocks) f.pool->Free(l);
  CHECK(f.pool->stats().segments == 1);
  CHECK(f.pool->stats().reserved == kMiB);
  CHECK(f.pool->stats().used == 0);
  CHECK(f.retired.size() == 2);
  int on_disk = 0;
  for (const Location& l : blocks) on_disk += ShmExists(f.Name(l.segment));
  CHECK(on_disk == 1);

  // The spare is reused rather than a new segment made.
  Location again = f.Allocate(768 * 1024);
  CHECK(f.pool->segment(again.segment) != nullptr);
  CHECK(f.pool->stats().segments == 1);
}

TEST_CASE("Objects of different owners never share a segment, and each owner keeps a spare",
          "[segmented_pool]") {
  PoolFixture f(8 * kMiB, kMiB, false, /*warm=*/2 * kMiB);
  Location alice = f.Allocate(100, 41001);
  Location bob = f.Allocate(100, 41002);
  Location alice2 = f.Allocate(100, 41001);
  CHECK(alice.segment != bob.segment);
  CHECK(alice2.segment == alice.segment);
  CHECK(f.pool->segment(alice.segment)->owner == 41001);
  CHECK(f.pool->segment(bob.segment)->owner == 41002);
  CHECK(f.pool->stats().segments == 2);

  f.pool->Free(alice);
  f.pool->Free(alice2);
  f.pool->Free(bob);
  CHECK(f.pool->stats().segments == 2);  // one spare each
  CHECK(f.retired.empty());
  // A spare of one owner is not another's: bob's next object goes to bob's own spare.
  Location bob2 = f.Allocate(64, 41002);
  CHECK(bob2.segment == bob.segment);
  // Taking spares back reaches every owner's.
  f.pool->Free(bob2);
  CHECK(f.pool->ReleaseSpares() == 2 * kMiB);
  CHECK(f.pool->stats().segments == 0);
}

TEST_CASE("Empty segments are kept up to the warm limit over all owners", "[segmented_pool]") {
  PoolFixture f(16 * kMiB, kMiB, false, /*warm=*/4 * kMiB);
  std::vector<Location> blocks;
  for (uint32_t owner = 1; owner <= 6; ++owner) blocks.push_back(f.Allocate(100, owner));
  for (const Location& l : blocks) f.pool->Free(l);
  CHECK(f.pool->stats().segments == 4);
  CHECK(f.retired.size() == 2);
  CHECK(f.budget.warm == 4 * kMiB);

  // No limit: every empty segment goes back at once.
  PoolFixture none(16 * kMiB, kMiB, false, /*warm=*/0);
  none.pool->Free(none.Allocate(100));
  CHECK(none.pool->stats().segments == 0);
  CHECK(none.retired.size() == 1);
}

TEST_CASE("The host pool reports StoreFull with sizes and refuses 0 bytes", "[segmented_pool]") {
  PoolFixture f(2 * kMiB);
  CHECK(f.pool->Allocate(0, kOwner).status().IsInvalidArgument());

  auto too_big = f.pool->Allocate(2 * kMiB + 1, kOwner);
  REQUIRE_FALSE(too_big.ok());
  CHECK(too_big.status().IsStoreFull());
  CHECK_THAT(too_big.status().message(), Contains(FormatBytes(2 * kMiB + 1)));

  f.Allocate(kMiB);
  f.Allocate(kMiB);
  auto full = f.pool->Allocate(64, kOwner);
  REQUIRE_FALSE(full.ok());
  CHECK(full.status().IsStoreFull());
  CHECK_THAT(full.status().message(), Contains("64 B"));
  CHECK_THAT(full.status().message(), Contains("2.0 MiB"));
  CHECK(f.pool->stats().segments == 2);  // a failed allocation creates nothing
}

TEST_CASE("The host pool with prefault reserves everything once and keeps it", "[segmented_pool]") {
  PoolFixture f(3 * kMiB, kMiB, /*prefault=*/true);
  REQUIRE(f.pool->stats().segments == 1);
  CHECK(f.pool->stats().reserved == 3 * kMiB);
  const SegmentedPool::Segment* seg = f.pool->segment(1);
  REQUIRE(seg != nullptr);
  CHECK(seg->size() == 3 * kMiB);
  CHECK(ShmExists(f.Name(1)));

  // Larger than the segment size, yet it goes into the one segment.
  Location big = f.Allocate(2 * kMiB);
  CHECK(big.segment == 1);
  Location small = f.Allocate(100);
  CHECK(small.segment == 1);
  CHECK_FALSE(f.pool->Allocate(kMiB, kOwner).ok());
  f.pool->Free(big);
  f.pool->Free(small);
  CHECK(f.pool->stats().segments == 1);
  CHECK(f.retired.empty());
  CHECK(ShmExists(f.Name(1)));
  CHECK(f.pool->stats().largest_free == 3 * kMiB);
}

TEST_CASE("The host pool's destructor removes every segment", "[segmented_pool]") {
  PoolFixture f(8 * kMiB);
  std::vector<uint32_t> ids = {f.Allocate(10).segment, f.Allocate(3 * kMiB).segment};
  REQUIRE(ids[0] != ids[1]);
  for (uint32_t id : ids) REQUIRE(ShmExists(f.Name(id)));
  f.pool.reset();
  for (uint32_t id : ids) CHECK_FALSE(ShmExists(f.Name(id)));
}

TEST_CASE("The host pool stats count used bytes and the largest free block", "[segmented_pool]") {
  PoolFixture f(2 * kMiB);
  CHECK(f.pool->stats().capacity == 2 * kMiB);
  CHECK(f.pool->stats().largest_free == 2 * kMiB);  // counting segments not yet created

  Location a = f.Allocate(100);
  CHECK(f.pool->stats().used == 128);           // rounded up to the alignment
  CHECK(f.pool->stats().largest_free == kMiB);  // the capacity not yet in a segment
  Location b = f.Allocate(kMiB);
  CHECK(f.pool->stats().reserved == 2 * kMiB);
  CHECK(f.pool->stats().used == kMiB + 128);
  CHECK(f.pool->stats().largest_free == kMiB - 128);

  f.pool->Free(a);
  CHECK(f.pool->stats().used == kMiB);
  CHECK(f.pool->stats().largest_free == kMiB);
  f.pool->Free(b);
  CHECK(f.pool->stats().used == 0);
  f.pool->Free(b);  // a second free is ignored
  CHECK(f.pool->stats().used == 0);
}

TEST_CASE("A segment's read-only fd sees what its fd writes and cannot write", "[segmented_pool]") {
  PoolFixture f(2 * kMiB);
  Location l = f.Allocate(4096);
  const SegmentedPool::Segment* seg = f.pool->segment(l.segment);
  REQUIRE(seg != nullptr);

  void* w = ::mmap(nullptr, seg->size(), PROT_READ | PROT_WRITE, MAP_SHARED, seg->fd(), 0);
  REQUIRE(w != MAP_FAILED);
  std::memcpy(static_cast<char*>(w) + l.offset, "written through the fd", 23);

  // The descriptor a reader gets sees the bytes, and cannot be mapped for writing.
  REQUIRE(seg->read_only_fd() != seg->fd());
  CHECK((::fcntl(seg->read_only_fd(), F_GETFL) & O_ACCMODE) == O_RDONLY);
  errno = 0;
  CHECK(::mmap(nullptr, seg->size(), PROT_READ | PROT_WRITE, MAP_SHARED, seg->read_only_fd(), 0) ==
        MAP_FAILED);
  CHECK(errno == EACCES);
  void* r = ::mmap(nullptr, seg->size(), PROT_READ, MAP_SHARED, seg->read_only_fd(), 0);
  REQUIRE(r != MAP_FAILED);
  CHECK(::mprotect(r, seg->size(), PROT_READ | PROT_WRITE) != 0);
  // Neither descriptor can resize it.
  CHECK(::ftruncate(seg->fd(), 0) != 0);
  CHECK(::ftruncate(seg->fd(), static_cast<off_t>(2 * seg->size())) != 0);
  CHECK(std::string(static_cast<const char*>(r) + l.offset) == "written through the fd");
  ::munmap(r, seg->size());
  ::munmap(w, seg->size());
}

// With a capacity that is not a multiple of the 64-byte alignment, the last segment is smaller
// than its allocator can use; Allocate must then fail or return a block that really exists.
TEST_CASE("The host pool never returns a block its allocator did not reserve", "[segmented_pool]") {
  PoolFixture f(100000, kMiB);  // 100000 is not a multiple of 64
  auto r = f.pool->Allocate(100000, kOwner);
  if (r.ok()) {
    const SegmentedPool::Segment* seg = f.pool->segment(r->segment);
    REQUIRE(seg != nullptr);
    CHECK(seg->allocator.used() >= 100000);
    CHECK(seg->allocator.size() >= r->offset + 100000);
  } else {
    CHECK(r.status().IsStoreFull());
  }
  // Nor may a 64-byte request after the capacity's remainder was reached.
  PoolFixture g(kMiB + 100, kMiB);
  g.Allocate(kMiB);
  auto tail = g.pool->Allocate(100, kOwner);
  if (tail.ok()) {
    const SegmentedPool::Segment* seg = g.pool->segment(tail->segment);
    REQUIRE(seg != nullptr);
    CHECK(seg->allocator.used() >= 100);
    CHECK(seg->allocator.size() >= tail->offset + 100);
  } else {
    CHECK(tail.status().IsStoreFull());
  }
}

// A device pool, as the store makes it, on the first stand-in GPU of `backend`: 16 MiB chunks
// (2 MiB granules), 256-byte alignment, a chunk of its own for an object over half a chunk that
// finds no room.
struct GpuFixture : Fixture {
  GpuFixture(test::MemfdBackend& backend, uint64_t capacity)
      : Fixture(std::make_unique<DeviceSource>(backend, 0, backend.Devices()->at(0)), capacity,
                {.segment_size = 16 * kMiB,
                 .alignment = DeviceSource::kAlignment,
                 .dedicated_divisor = 2},
                /*warm=*/16 * kMiB) {}
};

TEST_CASE("A device pool aligns to 256 bytes and gives a large object a chunk of its own",
          "[segmented_pool]") {
  test::MemfdBackend backend;
  GpuFixture f(backend, 64 * kMiB);
  Location small = f.Allocate(100);
  CHECK(small.offset % 256 == 0);
  CHECK(f.pool->stats().used == 256);
  const SegmentedPool::Segment* chunk = f.pool->segment(small.segment);
  REQUIRE(chunk != nullptr);
  CHECK(chunk->size() == 16 * kMiB);
  CHECK_FALSE(chunk->dedicated);
  CHECK(chunk->name().find("GPU-") == 0);
  CHECK(backend.live_chunks() == 1);

  // Over half a chunk, but the shared chunk has room: first fit puts it there.
  Location fits = f.Allocate(9 * kMiB);
  CHECK(fits.segment == small.segment);
  // No room left: a chunk of its own, in whole granules.
  Location big = f.Allocate(9 * kMiB);
  CHECK(big.segment != small.segment);
  const SegmentedPool::Segment* own = f.pool->segment(big.segment);
  REQUIRE(own != nullptr);
  CHECK(own->dedicated);
  CHECK(own->size() == 10 * kMiB);
  CHECK(f.budget.reserved == 26 * kMiB);

  f.pool->Free(big);
  CHECK(f.pool->segment(big.segment) == nullptr);
  CHECK(f.retired == std::vector<uint32_t>{big.segment});
  CHECK(backend.live_chunks() == 1);
  CHECK(f.budget.reserved == 16 * kMiB);
}

TEST_CASE("A device pool makes its last chunk of what the budget has left, then answers StoreFull",
          "[segmented_pool]") {
  test::MemfdBackend backend;
  GpuFixture f(backend, 20 * kMiB);
  Location a = f.Allocate(15 * kMiB);
  // That one has a chunk of its own; the 4 MiB of the budget left make a smaller shared chunk.
  Location b = f.Allocate(3 * kMiB);
  CHECK(b.segment != a.segment);
  CHECK(f.pool->segment(b.segment)->size() == 4 * kMiB);
  CHECK(f.budget.reserved == 20 * kMiB);

  auto full = f.pool->Allocate(12 * kMiB, kOwner);
  REQUIRE(full.status().IsStoreFull());
  CHECK_THAT(full.status().message(), Contains("on the GPU"));
  CHECK_THAT(full.status().message(), Contains("12.0 MiB"));
  CHECK(f.pool->stats().segments == 2);  // a failed allocation creates nothing
  CHECK(f.pool->Allocate(0, kOwner).status().IsInvalidArgument());
}

TEST_CASE("A device pool keeps one spare chunk and gives it back on request", "[segmented_pool]") {
  test::MemfdBackend backend;
  GpuFixture f(backend, 64 * kMiB);
  // 7 MiB objects: two per 16 MiB chunk.
  std::vector<Location> blocks;
  for (int i = 0; i < 6; ++i) blocks.push_back(f.Allocate(7 * kMiB));
  CHECK(f.pool->stats().segments == 3);
  CHECK(backend.live_chunks() == 3);

  for (const Location& l : blocks) f.pool->Free(l);
  CHECK(f.pool->stats().segments == 1);
  CHECK(f.pool->stats().used == 0);
  CHECK(f.retired.size() == 2);
  CHECK(backend.live_chunks() == 1);

  CHECK(f.pool->ReleaseSpares() == 16 * kMiB);
  CHECK(f.pool->stats().segments == 0);
  CHECK(f.budget.reserved == 0);
  CHECK(backend.live_chunks() == 0);
}

TEST_CASE("A device pool's destructor gives every chunk back", "[segmented_pool]") {
  test::MemfdBackend backend;
  auto f = std::make_unique<GpuFixture>(backend, 64 * kMiB);
  f->Allocate(kMiB, kOwner);
  f->Allocate(12 * kMiB, kOwner);
  f->Allocate(12 * kMiB, kOwner);
  REQUIRE(backend.live_chunks() == 2);
  f->pool.reset();
  CHECK(backend.live_chunks() == 0);
  CHECK(f->budget.reserved == 0);
}

TEST_CASE("Pools on one budget share it: a spare given back makes room in the other",
          "[segmented_pool]") {
  PoolBudget budget{2 * kMiB, 0, kMiB};
  auto make = [&] {
    auto r = SegmentedPool::Create(std::make_unique<ShmSource>(UniquePrefix()),
                                   {.budget = &budget, .segment_size = kMiB}, nullptr);
    REQUIRE(r.ok());
    return std::move(*r);
  };
  std::unique_ptr<SegmentedPool> one = make();
  std::unique_ptr<SegmentedPool> two = make();
  auto a = one->Allocate(kMiB, kOwner);
  REQUIRE(a.ok());
  one->Free(*a);  // its only segment stays, as the spare
  REQUIRE(two->Allocate(kMiB, kOwner).ok());
  CHECK(two->Allocate(kMiB, kOwner).status().IsStoreFull());
  CHECK(one->ReleaseSpares() == kMiB);
  CHECK(two->Allocate(kMiB, kOwner).ok());
  CHECK(budget.reserved == 2 * kMiB);
  two.reset();
  one.reset();
  CHECK(budget.reserved == 0);
}

constexpr int kExpectNothingMs = 300;

// A stand-in for the daemon's loop: what a SegmentMaker posts waits here until the test runs it.
class Loop {
 public:
  SegmentMaker::PostFn Post() {
    return [this](std::function<void()> f) {
      std::lock_guard lk(mu_);
      posted_.push_back(std::move(f));
    };
  }
  // Runs what was posted, waiting up to `wait` (in 10 ms steps) for at least one function; false
  // if none came. A 1 MiB segment is made in well under the short wait that tests that expect
  // nothing give it.
  bool RunPosted(int wait_ms = 10000) {
    std::vector<std::function<void()>> run;
    for (int waited = 0; waited <= wait_ms && run.empty(); waited += 10) {
      {
        std::lock_guard lk(mu_);
        run.swap(posted_);
      }
      if (run.empty()) ::usleep(10000);
    }
    for (auto& f : run) f();
    return !run.empty();
  }

 private:
  std::mutex mu_;
  std::vector<std::function<void()>> posted_;
};

TEST_CASE("The host pool makes an owner's next segment ahead, off the loop, and adopts it warm",
          "[segmented_pool]") {
  Loop loop;
  SegmentMaker maker(loop.Post());
  PoolBudget budget{8 * kMiB, 0, 2 * kMiB};
  std::vector<uint32_t> retired;
  auto made = SegmentedPool::Create(std::make_unique<ShmSource>(UniquePrefix(), &maker),
                                    {.budget = &budget, .segment_size = kMiB, .reuse_large = true},
                                    [&](uint32_t id) {
                                      retired.push_back(id);
                                      return false;
                                    });
  REQUIRE(made.ok());
  SegmentedPool& pool = **made;

  // Less than half full: nothing is asked for.
  Location a = pool.Allocate(256 * 1024, kOwner).value();
  CHECK_FALSE(loop.RunPosted(kExpectNothingMs));
  CHECK(pool.stats().segments == 1);
  // More than half: the next segment is made ahead and kept, empty and warm.
  Location b = pool.Allocate(512 * 1024, kOwner).value();
  REQUIRE(loop.RunPosted());
  CHECK(pool.made_ahead() == 1);
  CHECK(pool.stats().segments == 2);
  CHECK(budget.reserved == 2 * kMiB);
  CHECK(budget.warm == kMiB);
  // The object that does not fit in the first goes there: no segment is made on the loop.
  Location c = pool.Allocate(512 * 1024, kOwner).value();
  CHECK(c.segment != a.segment);
  CHECK(pool.stats().segments == 2);
  CHECK(budget.warm == 0);
  // Another owner's segment is not made ahead for this one, nor this one's used by another.
  Location other = pool.Allocate(100, 41002).value();
  CHECK(other.segment != c.segment);
  for (const Location& l : {a, b, c, other}) pool.Free(l);
  CHECK(budget.warm == 2 * kMiB);  // the limit: the last segment to fall empty went back
  CHECK(retired == std::vector<uint32_t>{other.segment});
  CHECK(pool.ReleaseSpares() > 0);
  CHECK(budget.warm == 0);
}

TEST_CASE("The host pool makes nothing ahead past its budget, and drops what comes too late",
          "[segmented_pool]") {
  Loop loop;
  SegmentMaker maker(loop.Post());
  SECTION("no room in the budget for two more segments") {
    PoolBudget budget{2 * kMiB, 0, 2 * kMiB};
    auto pool = SegmentedPool::Create(std::make_unique<ShmSource>(UniquePrefix(), &maker),
                                      {.budget = &budget, .segment_size = kMiB}, nullptr);
    REQUIRE(pool.ok());
    REQUIRE((*pool)->Allocate(900 * 1024, kOwner).ok());
    CHECK_FALSE(loop.RunPosted(kExpectNothingMs));
    CHECK(budget.reserved == kMiB);
  }
  SECTION("no warm limit") {
    PoolBudget budget{8 * kMiB, 0, 0};
    auto pool = SegmentedPool::Create(std::make_unique<ShmSource>(UniquePrefix(), &maker),
                                      {.budget = &budget, .segment_size = kMiB}, nullptr);
    REQUIRE(pool.ok());
    REQUIRE((*pool)->Allocate(900 * 1024, kOwner).ok());
    CHECK_FALSE(loop.RunPosted(kExpectNothingMs));
  }
  SECTION("the pool is gone when the segment arrives") {
    PoolBudget budget{8 * kMiB, 0, 2 * kMiB};
    auto pool = SegmentedPool::Create(std::make_unique<ShmSource>(UniquePrefix(), &maker),
                                      {.budget = &budget, .segment_size = kMiB}, nullptr);
    REQUIRE(pool.ok());
    REQUIRE((*pool)->Allocate(900 * 1024, kOwner).ok());
    pool->reset();
    REQUIRE(loop.RunPosted());  // dropped, its memory closed
    CHECK(budget.reserved == 0);
    CHECK(budget.warm == 0);
  }
  SECTION("the budget filled up while it was made") {
    PoolBudget budget{4 * kMiB, 0, 2 * kMiB};
    auto pool = SegmentedPool::Create(std::make_unique<ShmSource>(UniquePrefix(), &maker),
                                      {.budget = &budget, .segment_size = kMiB}, nullptr);
    REQUIRE(pool.ok());
    REQUIRE((*pool)->Allocate(900 * 1024, kOwner).ok());
    budget.reserved += 3 * kMiB;  // another pool on the budget took the rest
    REQUIRE(loop.RunPosted());
    CHECK((*pool)->made_ahead() == 0);
    CHECK((*pool)->stats().segments == 1);
    budget.reserved -= 3 * kMiB;
  }
}

// A source that reserves nothing: enough for the pool's bookkeeping, so that a workload of many
// owners can be measured at a realistic size without touching memory.
class BookkeepingSource : public SegmentSource {
 public:
  Result<SegmentMemory> Create(uint32_t id, uint64_t size) override {
    return SegmentMemory{UniqueFd(), size, "bookkeeping-" + std::to_string(id), 0, UniqueFd()};
  }
  Result<SegmentMemory> Adopt(UniqueFd, uint64_t, std::string) override {
    return Status::InvalidArgument("nothing is kept here");
  }
  void Release(SegmentMemory&) override {}
  uint64_t granularity() const override { return 4096; }
  std::string_view describe() const override { return ""; }
};

// What segments of one's own cost: the same mixed workload of puts and deletes, spread over 1 and
// over 8 owners, in 64 MiB segments (the default). Prints reserved against used; the excess per
// owner is bounded by about two segments (one partly filled, one spare).
TEST_CASE("Per-owner segments: reserved against used with many owners", "[segmented_pool]") {
  constexpr uint64_t kCapacity = uint64_t{16} << 30;
  constexpr uint64_t kSegment = 64 * kMiB;
  for (uint32_t owners : {1u, 8u}) {
    Fixture f(std::make_unique<BookkeepingSource>(), kCapacity,
              {.segment_size = kSegment, .reuse_large = true}, /*warm=*/4 * kSegment);
    std::mt19937_64 rng(42);
    std::vector<Location> live;
    uint64_t peak_reserved = 0;
    for (int i = 0; i < 4000; ++i) {
      // Sizes from 1 KiB to 8 MiB, log-uniform; a third of the objects are deleted again.
      uint64_t size = uint64_t{1024} << (rng() % 14);
      size += rng() % size;
      live.push_back(f.Allocate(size, 41000 + static_cast<uint32_t>(rng() % owners)));
      if (rng() % 3 == 0) {
        size_t victim = rng() % live.size();
        f.pool->Free(live[victim]);
        live[victim] = live.back();
        live.pop_back();
      }
      peak_reserved = std::max(peak_reserved, f.pool->stats().reserved);
    }
    PoolStats st = f.pool->stats();
    std::printf(
        "%u owner(s): %zu objects, used %s, reserved %s (%.1f%% over), %u segments; "
        "peak reserved %s\n",
        owners, live.size(), FormatBytes(st.used).c_str(), FormatBytes(st.reserved).c_str(),
        100.0 * (st.reserved - st.used) / st.used, st.segments, FormatBytes(peak_reserved).c_str());
    CHECK(st.reserved <= st.used + owners * 2 * kSegment + kSegment);
  }
}

}  // namespace
}  // namespace depot
