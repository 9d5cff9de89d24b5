// Tests for depot::HostPool (daemon/host_pool.h) against real POSIX shared memory in /dev/shm.
#include "daemon/host_pool.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "depot/units.h"

namespace depot {
namespace {

using Catch::Matchers::Contains;

constexpr uint64_t kMiB = 1 << 20;

// A name prefix no other test (or concurrent run of this binary) uses.
std::string UniquePrefix() {
  static int n = 0;
  return "depot-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + "-";
}

std::string ShmPath(const std::string& name) { return "/dev/shm/" + name; }

bool ShmExists(const std::string& name) {
  struct stat st {};
  return ::stat(ShmPath(name).c_str(), &st) == 0;
}

// A pool with its prefix and a record of the segments it retired.
struct PoolFixture {
  explicit PoolFixture(uint64_t capacity, uint64_t segment_size = kMiB, bool prefault = false) {
    HostPoolOptions o;
    o.capacity = capacity;
    o.segment_size = segment_size;
    o.prefault = prefault;
    o.name_prefix = prefix;
    auto r = HostPool::Create(o, [this](uint32_t id) { retired.push_back(id); });
    REQUIRE(r.ok());
    pool = std::move(*r);
  }

  Location Allocate(uint64_t size) {
    auto r = pool->Allocate(size);
    REQUIRE(r.ok());
    return *r;
  }

  std::string Name(uint32_t id) const { return prefix + std::to_string(id); }

  std::string prefix = UniquePrefix();
  std::vector<uint32_t> retired;
  std::unique_ptr<HostPool> pool;
};

TEST_CASE("HostPool creates segments on demand, 0600, and aligns offsets", "[host_pool]") {
  PoolFixture f(4 * kMiB);
  CHECK(f.pool->stats().segments == 0);
  CHECK(f.pool->stats().reserved == 0);

  Location first = f.Allocate(100);
  CHECK(first.offset % 64 == 0);
  CHECK(first.size == 100);
  CHECK(f.pool->stats().segments == 1);
  CHECK(f.pool->stats().reserved == kMiB);
  const HostPool::Segment* seg = f.pool->segment(first.segment);
  REQUIRE(seg != nullptr);
  CHECK_FALSE(seg->dedicated);
  CHECK(seg->size == kMiB);

  struct stat st {};
  REQUIRE(::stat(ShmPath(f.Name(first.segment)).c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  CHECK(static_cast<uint64_t>(st.st_size) == kMiB);

  // Fill past the first segment: a second one appears, every block aligned and in bounds.
  std::vector<Location> blocks = {first};
  uint64_t total = 100;
  for (uint64_t size = 1; total < kMiB + kMiB / 2; size = size * 3 % 20011 + 1) {
    Location l = f.Allocate(size);
    CHECK(l.offset % 64 == 0);
    CHECK(l.offset + size <= f.pool->segment(l.segment)->size);
    blocks.push_back(l);
    total += size;
  }
  CHECK(f.pool->stats().segments == 2);
  CHECK(f.pool->stats().reserved == 2 * kMiB);
  for (const Location& l : blocks) CHECK(ShmExists(f.Name(l.segment)));
}

TEST_CASE("HostPool gives a large object a dedicated segment and retires it", "[host_pool]") {
  PoolFixture f(8 * kMiB);
  Location small = f.Allocate(64);
  Location big = f.Allocate(kMiB + kMiB / 2);
  CHECK(big.segment != small.segment);
  const HostPool::Segment* seg = f.pool->segment(big.segment);
  REQUIRE(seg != nullptr);
  CHECK(seg->dedicated);
  CHECK(seg->size >= kMiB + kMiB / 2);
  CHECK(seg->size % 4096 == 0);
  CHECK(f.pool->stats().reserved == kMiB + seg->size);
  REQUIRE(ShmExists(f.Name(big.segment)));

  // Nothing small is ever placed in a dedicated segment, even when it has room.
  Location other = f.Allocate(64);
  CHECK(other.segment == small.segment);

  f.pool->Free(big);
  CHECK(f.pool->segment(big.segment) == nullptr);
  CHECK_FALSE(ShmExists(f.Name(big.segment)));
  CHECK(f.retired == std::vector<uint32_t>{big.segment});
  CHECK(f.pool->stats().reserved == kMiB);
}

TEST_CASE("HostPool keeps at most one empty shared segment", "[host_pool]") {
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

TEST_CASE("HostPool reports StoreFull with sizes and refuses 0 bytes", "[host_pool]") {
  PoolFixture f(2 * kMiB);
  CHECK(f.pool->Allocate(0).status().IsInvalidArgument());

  auto too_big = f.pool->Allocate(2 * kMiB + 1);
  REQUIRE_FALSE(too_big.ok());
  CHECK(too_big.status().IsStoreFull());
  CHECK_THAT(too_big.status().message(), Contains(FormatBytes(2 * kMiB + 1)));

  f.Allocate(kMiB);
  f.Allocate(kMiB);
  auto full = f.pool->Allocate(64);
  REQUIRE_FALSE(full.ok());
  CHECK(full.status().IsStoreFull());
  CHECK_THAT(full.status().message(), Contains("64 B"));
  CHECK_THAT(full.status().message(), Contains("2.0 MiB"));
  CHECK(f.pool->stats().segments == 2);  // a failed allocation creates nothing
}

TEST_CASE("HostPool with prefault reserves everything once and keeps it", "[host_pool]") {
  PoolFixture f(3 * kMiB, kMiB, /*prefault=*/true);
  REQUIRE(f.pool->stats().segments == 1);
  CHECK(f.pool->stats().reserved == 3 * kMiB);
  const HostPool::Segment* seg = f.pool->segment(1);
  REQUIRE(seg != nullptr);
  CHECK(seg->size == 3 * kMiB);
  CHECK(ShmExists(f.Name(1)));

  // Larger than the segment size, yet it goes into the one segment.
  Location big = f.Allocate(2 * kMiB);
  CHECK(big.segment == 1);
  Location small = f.Allocate(100);
  CHECK(small.segment == 1);
  CHECK_FALSE(f.pool->Allocate(kMiB).ok());
  f.pool->Free(big);
  f.pool->Free(small);
  CHECK(f.pool->stats().segments == 1);
  CHECK(f.retired.empty());
  CHECK(ShmExists(f.Name(1)));
  CHECK(f.pool->stats().largest_free == 3 * kMiB);
}

TEST_CASE("HostPool's destructor removes every segment", "[host_pool]") {
  PoolFixture f(8 * kMiB);
  std::vector<uint32_t> ids = {f.Allocate(10).segment, f.Allocate(3 * kMiB).segment};
  REQUIRE(ids[0] != ids[1]);
  for (uint32_t id : ids) REQUIRE(ShmExists(f.Name(id)));
  f.pool.reset();
  for (uint32_t id : ids) CHECK_FALSE(ShmExists(f.Name(id)));
}

TEST_CASE("RemoveStale removes only names with the prefix", "[host_pool]") {
  const std::string prefix = UniquePrefix();
  const std::string other = "depot-other-" + prefix;
  for (const std::string& name : {prefix + "1", prefix + "7", other + "1"}) {
    int fd = ::shm_open(("/" + name).c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    REQUIRE(fd >= 0);
    ::close(fd);
  }
  CHECK(HostPool::RemoveStale(prefix) == 2);
  CHECK_FALSE(ShmExists(prefix + "1"));
  CHECK_FALSE(ShmExists(prefix + "7"));
  CHECK(ShmExists(other + "1"));
  CHECK(HostPool::RemoveStale(prefix) == 0);
  ::shm_unlink(("/" + other + "1").c_str());
}

TEST_CASE("HostPool stats count used bytes and the largest free block", "[host_pool]") {
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

TEST_CASE("A segment's fd maps the named shared memory", "[host_pool]") {
  PoolFixture f(2 * kMiB);
  Location l = f.Allocate(4096);
  const HostPool::Segment* seg = f.pool->segment(l.segment);
  REQUIRE(seg != nullptr);

  void* w = ::mmap(nullptr, seg->size, PROT_READ | PROT_WRITE, MAP_SHARED, seg->fd(), 0);
  REQUIRE(w != MAP_FAILED);
  std::memcpy(static_cast<char*>(w) + l.offset, "written through the fd", 23);

  // Another mapping, opened by name as a client would, sees the bytes.
  std::string shm_name = "/";
  shm_name += f.Name(l.segment);  // (GCC 12 warns falsely on "/" + string in Release)
  int fd = ::shm_open(shm_name.c_str(), O_RDONLY, 0);
  REQUIRE(fd >= 0);
  void* r = ::mmap(nullptr, seg->size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  REQUIRE(r != MAP_FAILED);
  CHECK(std::string(static_cast<const char*>(r) + l.offset) == "written through the fd");
  ::munmap(r, seg->size);
  ::munmap(w, seg->size);
}

// With a capacity that is not a multiple of the 64-byte alignment, the last segment is smaller
// than its allocator can use; Allocate must then fail or return a block that really exists.
TEST_CASE("HostPool never returns a block its allocator did not reserve", "[host_pool]") {
  PoolFixture f(100000, kMiB);  // 100000 is not a multiple of 64
  auto r = f.pool->Allocate(100000);
  if (r.ok()) {
    const HostPool::Segment* seg = f.pool->segment(r->segment);
    REQUIRE(seg != nullptr);
    CHECK(seg->allocator.used() >= 100000);
    CHECK(seg->allocator.size() >= r->offset + 100000);
  } else {
    CHECK(r.status().IsStoreFull());
  }
  // Nor may a 64-byte request after the capacity's remainder was reached.
  PoolFixture g(kMiB + 100, kMiB);
  g.Allocate(kMiB);
  auto tail = g.pool->Allocate(100);
  if (tail.ok()) {
    const HostPool::Segment* seg = g.pool->segment(tail->segment);
    REQUIRE(seg != nullptr);
    CHECK(seg->allocator.used() >= 100);
    CHECK(seg->allocator.size() >= tail->offset + 100);
  } else {
    CHECK(tail.status().IsStoreFull());
  }
}

}  // namespace
}  // namespace depot
