// Tests for depot::Allocator (daemon/allocator.h).
#include "daemon/allocator.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <iterator>
#include <map>
#include <random>
#include <vector>

namespace depot {
namespace {

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

// Allocates `count` blocks of exactly one alignment unit each, filling the whole region.
std::vector<uint64_t> FillWithUnits(Allocator& a, uint64_t unit) {
  std::vector<uint64_t> offsets;
  while (auto off = a.Allocate(unit)) offsets.push_back(*off);
  return offsets;
}

TEST_CASE("Allocator rounds its size down to the alignment", "[allocator]") {
  CHECK(Allocator(1000, 64).size() == 960);
  CHECK(Allocator(4096, 64).size() == 4096);
  CHECK(Allocator(10000, 4096).size() == 8192);
  Allocator tiny(63, 64);
  CHECK(tiny.size() == 0);
  CHECK_FALSE(tiny.Allocate(1).has_value());
  CHECK(tiny.largest_free() == 0);
}

TEST_CASE("Allocator aligns every offset and rounds sizes up", "[allocator]") {
  for (uint64_t alignment : {uint64_t{64}, uint64_t{4096}}) {
    CAPTURE(alignment);
    Allocator a(1 << 20, alignment);
    uint64_t expected_used = 0;
    for (uint64_t bytes : {1, 63, 64, 65, 100, 4095, 4096, 4097, 3 * 64 + 1}) {
      auto off = a.Allocate(bytes);
      REQUIRE(off.has_value());
      CHECK(*off % alignment == 0);
      CHECK(a.BlockSize(bytes) == RoundUp(bytes, alignment));
      expected_used += RoundUp(bytes, alignment);
      CHECK(a.used() == expected_used);
    }
    CHECK(a.free() == a.size() - expected_used);
  }
}

TEST_CASE("Allocate(0) and oversized requests return nullopt", "[allocator]") {
  Allocator a(4096);
  CHECK_FALSE(a.Allocate(0).has_value());
  CHECK_FALSE(a.Allocate(4097).has_value());
  CHECK_FALSE(a.Allocate(UINT64_MAX).has_value());
  CHECK(a.used() == 0);
  CHECK(a.free_blocks() == 1);
}

TEST_CASE("Allocator is exhausted exactly when the region is full", "[allocator]") {
  Allocator a(4096);
  std::vector<uint64_t> offsets = FillWithUnits(a, 64);
  CHECK(offsets.size() == 4096 / 64);
  CHECK(a.used() == a.size());
  CHECK(a.largest_free() == 0);
  CHECK(a.free_blocks() == 0);
  CHECK_FALSE(a.Allocate(1).has_value());

  REQUIRE(a.Free(offsets[10], 64));
  auto again = a.Allocate(64);
  REQUIRE(again.has_value());
  CHECK(*again == offsets[10]);
}

TEST_CASE("Free of a block that is not allocated returns false and changes nothing",
          "[allocator]") {
  Allocator a(4096);
  auto x = a.Allocate(128);
  auto y = a.Allocate(64);
  REQUIRE(x.has_value());
  REQUIRE(y.has_value());
  const uint64_t used = a.used();
  const size_t free_blocks = a.free_blocks();
  const uint64_t largest = a.largest_free();

  CHECK_FALSE(a.Free(*x + 1, 64));   // misaligned
  CHECK_FALSE(a.Free(3968, 64));     // free space
  CHECK_FALSE(a.Free(*y, 128));      // runs into the free space after it
  CHECK_FALSE(a.Free(1 << 20, 64));  // outside the region
  CHECK_FALSE(a.Free(4032, 128));    // past its end
  CHECK_FALSE(a.Free(*y, 0));
  CHECK(a.used() == used);
  CHECK(a.free_blocks() == free_blocks);
  CHECK(a.largest_free() == largest);
  CHECK(a.allocated_blocks() == 2);

  REQUIRE(a.Free(*x, 128));
  CHECK_FALSE(a.Free(*x, 128));  // double free
  CHECK_FALSE(a.Free(*x, 64));   // part of the same freed block
  CHECK(a.allocated_blocks() == 1);
}

TEST_CASE("Free coalesces with its neighbours", "[allocator]") {
  Allocator a(8 * 64);
  std::vector<uint64_t> b = FillWithUnits(a, 64);
  REQUIRE(b.size() == 8);
  REQUIRE(a.free_blocks() == 0);

  SECTION("with the previous block") {
    REQUIRE(a.Free(b[2], 64));
    REQUIRE(a.Free(b[3], 64));
    CHECK(a.free_blocks() == 1);
    CHECK(a.largest_free() == 128);
  }
  SECTION("with the next block") {
    REQUIRE(a.Free(b[3], 64));
    REQUIRE(a.Free(b[2], 64));
    CHECK(a.free_blocks() == 1);
    CHECK(a.largest_free() == 128);
  }
  SECTION("with both neighbours") {
    REQUIRE(a.Free(b[2], 64));
    REQUIRE(a.Free(b[4], 64));
    CHECK(a.free_blocks() == 2);
    CHECK(a.largest_free() == 64);
    REQUIRE(a.Free(b[3], 64));
    CHECK(a.free_blocks() == 1);
    CHECK(a.largest_free() == 192);
    auto merged = a.Allocate(192);
    REQUIRE(merged.has_value());
    CHECK(*merged == b[2]);
  }
  SECTION("not across an allocated block") {
    REQUIRE(a.Free(b[2], 64));
    REQUIRE(a.Free(b[4], 64));
    CHECK(a.free_blocks() == 2);
    CHECK(a.largest_free() == 64);
  }
  SECTION("everything back into one block") {
    for (uint64_t off : b) REQUIRE(a.Free(off, 64));
    CHECK(a.free_blocks() == 1);
    CHECK(a.largest_free() == a.size());
    CHECK(a.empty());
  }
}

TEST_CASE("Allocate picks the smallest hole that fits", "[allocator]") {
  Allocator a(4096);
  // Holes of 256, 128 and 192 bytes, separated by allocated blocks, then a large free tail.
  auto h256 = a.Allocate(256);
  auto s1 = a.Allocate(64);
  auto h128 = a.Allocate(128);
  auto s2 = a.Allocate(64);
  auto h192 = a.Allocate(192);
  auto s3 = a.Allocate(64);
  REQUIRE((h256 && s1 && h128 && s2 && h192 && s3));
  REQUIRE(a.Free(*h256, 256));
  REQUIRE(a.Free(*h128, 128));
  REQUIRE(a.Free(*h192, 192));
  REQUIRE(a.free_blocks() == 4);

  auto x = a.Allocate(100);  // 128: only the 128 hole fits exactly
  REQUIRE(x.has_value());
  CHECK(*x == *h128);
  auto y = a.Allocate(150);  // 192: the 192 hole beats the 256 hole and the tail
  REQUIRE(y.has_value());
  CHECK(*y == *h192);
  auto z = a.Allocate(64);  // the 256 hole is now the smallest
  REQUIRE(z.has_value());
  CHECK(*z == *h256);
  CHECK(a.free_blocks() == 2);  // the rest of the 256 hole and the tail
}

TEST_CASE("Allocator agrees with a model over a random sequence", "[allocator]") {
  constexpr uint64_t kSize = 1 << 20;
  constexpr uint64_t kAlign = 64;
  Allocator a(kSize, kAlign);
  std::map<uint64_t, uint64_t> model;  // offset -> block size
  std::mt19937_64 rng(20240611);
  std::uniform_int_distribution<uint64_t> small(1, 4096);
  std::uniform_int_distribution<uint64_t> large(1, 64 * 1024);
  int allocations = 0;
  int failures = 0;

  for (int step = 0; step < 5000; ++step) {
    bool allocate = model.empty() || rng() % 100 < 55;
    if (allocate) {
      uint64_t bytes = rng() % 4 == 0 ? large(rng) : small(rng);
      uint64_t need = RoundUp(bytes, kAlign);
      uint64_t largest_before = a.largest_free();
      auto off = a.Allocate(bytes);
      if (!off) {
        // Best fit must not fail while some hole could hold the request.
        CHECK(largest_before < need);
        ++failures;
        continue;
      }
      ++allocations;
      REQUIRE(*off % kAlign == 0);
      REQUIRE(*off + need <= kSize);
      auto next = model.lower_bound(*off);
      if (next != model.end()) REQUIRE(*off + need <= next->first);
      if (next != model.begin()) {
        auto prev = std::prev(next);
        REQUIRE(prev->first + prev->second <= *off);
      }
      model.emplace(*off, need);
    } else {
      auto it = model.begin();
      std::advance(it, static_cast<long>(rng() % model.size()));
      REQUIRE(a.Free(it->first, it->second));
      model.erase(it);
    }
    uint64_t sum = 0;
    for (const auto& [off, size] : model) sum += size;
    REQUIRE(a.used() == sum);
    REQUIRE(a.allocated_blocks() == model.size());
  }
  // The sequence must have exercised both outcomes to mean anything.
  CHECK(allocations > 1000);
  CHECK(failures > 0);

  for (const auto& [off, size] : model) REQUIRE(a.Free(off, size));
  CHECK(a.used() == 0);
  CHECK(a.largest_free() == a.size());
  CHECK(a.free_blocks() == 1);
}

TEST_CASE("Split cuts an allocated block into parts freed on their own", "[allocator]") {
  Allocator a(4096);
  auto block = a.Allocate(1024);
  REQUIRE(block);
  CHECK_FALSE(a.Split(*block, 1024, 0));     // nothing before the cut
  CHECK_FALSE(a.Split(*block, 1024, 100));   // not aligned
  CHECK_FALSE(a.Split(*block, 1024, 1024));  // nothing after it
  REQUIRE(a.Split(*block, 1024, 256));
  CHECK(a.allocated_blocks() == 2);
  CHECK(a.used() == 1024);
  REQUIRE(a.Free(*block, 256));
  CHECK(a.used() == 768);
  CHECK_FALSE(a.empty());
  REQUIRE(a.Free(*block + 256, 768));
  CHECK(a.empty());
  CHECK(a.largest_free() == 4096);  // the parts coalesced with the rest
}

}  // namespace
}  // namespace depot

TEST_CASE("Reserve takes exactly the block named, and only free space", "[allocator]") {
  depot::Allocator a(1024, 64);
  REQUIRE(a.Reserve(128, 100));  // [128, 256)
  CHECK(a.used() == 128);
  CHECK(a.allocated_blocks() == 1);
  CHECK_FALSE(a.Reserve(192, 64));   // inside the block just taken
  CHECK_FALSE(a.Reserve(64, 128));   // overlaps its start
  CHECK_FALSE(a.Reserve(100, 64));   // misaligned
  CHECK_FALSE(a.Reserve(960, 128));  // leaves the region
  CHECK_FALSE(a.Reserve(0, 0));
  REQUIRE(a.Reserve(0, 64));
  REQUIRE(a.Reserve(960, 64));
  // What is left free is [64, 128) and [256, 960): Allocate finds them, and nothing overlaps.
  CHECK(a.largest_free() == 704);
  CHECK(a.Allocate(64) == std::optional<uint64_t>(64));
  CHECK(a.Allocate(704) == std::optional<uint64_t>(256));
  CHECK_FALSE(a.Allocate(64).has_value());
  // Reserved blocks are freed like allocated ones, and coalesce.
  REQUIRE(a.Free(128, 100));
  REQUIRE(a.Free(0, 64));
  REQUIRE(a.Free(64, 64));
  CHECK(a.largest_free() == 256);
}

TEST_CASE("Sizes past the region are refused on every path before they are rounded",
          "[allocator]") {
  // A size within an alignment of 2^64 rounds up to 0: a block that reserves nothing, whose
  // Free later fails and leaves its segment taken for good (kept put-ring records carry sizes a
  // client wrote).
  depot::Allocator a(1024, 64);
  for (uint64_t huge : {UINT64_MAX, UINT64_MAX - 62, uint64_t{1} << 63, uint64_t{1025}}) {
    INFO(huge);
    CHECK_FALSE(a.Allocate(huge).has_value());
    CHECK_FALSE(a.Reserve(0, huge));
    CHECK_FALSE(a.Free(0, huge));
    CHECK_FALSE(a.Split(0, huge, 64));
    CHECK(a.used() == 0);
    CHECK(a.allocated_blocks() == 0);
  }
  REQUIRE(a.Reserve(0, 1024));
  CHECK_FALSE(a.Free(0, UINT64_MAX));
  CHECK_FALSE(a.Split(0, UINT64_MAX, 64));
  CHECK(a.allocated_blocks() == 1);
  REQUIRE(a.Free(0, 1024));
  CHECK(a.empty());
}
