// The invariants of leases and the allocator (fuzz/lease_driver.h), as properties over many
// random sequences of operations shaped like a client's: leases, puts placed relative to a
// lease's start, end and cursor (as messages and as put-ring records), deletes, memory pressure
// that takes idle leases back, segments given back, closes. After every check operation and at
// the end: no two live objects share a byte; `used` is exactly the live objects' blocks; once
// everything is closed and deleted, nothing is used or leased. A failing sequence is printed
// with its seed, to be kept under fuzz/regressions/fuzz_lease/.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "fuzz/lease_driver.h"

namespace depot::test {
namespace {

std::string Hex(const std::vector<uint8_t>& bytes) {
  std::string out;
  for (uint8_t b : bytes) out += fmt::format("{:02x}", b);
  return out;
}

// `count` operations drawn so that most are leases and puts, with a check every few.
std::vector<uint8_t> RandomOperations(std::mt19937& rng, int count) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::discrete_distribution<int> op({4, 6, 6, 2, 1, 1, 2});  // by operation, see lease_driver.h
  std::vector<uint8_t> in;
  for (int i = 0; i < count; ++i) {
    int o = op(rng);
    in.push_back(static_cast<uint8_t>(o * 2 + byte(rng) % 2));
    if (o == 0 || o == 3) in.push_back(static_cast<uint8_t>(byte(rng)));
    if (o == 1 || o == 2) {
      int frames = byte(rng) % 3;
      in.push_back(static_cast<uint8_t>(frames));
      for (int f = 0; f <= frames; ++f) {
        // Mostly frames a client would put (at the cursor or a block past it, of a size that
        // fits), else anything near any anchor, now and then off the alignment or the segment.
        uint8_t pick;
        int offset;
        if (byte(rng) < 180) {
          pick = static_cast<uint8_t>(1 | (1 + byte(rng) % 4) << 3);
          offset = byte(rng) % 2;
        } else {
          pick = static_cast<uint8_t>(byte(rng) & (byte(rng) < 64 ? 0xff : 0x3f));
          offset = std::binomial_distribution<int>(8, 0.5)(rng) - 4;
        }
        in.push_back(pick);
        in.push_back(static_cast<uint8_t>(static_cast<int8_t>(offset)));
      }
      if (o == 2) in.push_back(static_cast<uint8_t>(byte(rng)));
    }
  }
  in.push_back(12);  // a last check
  return in;
}

TEST_CASE("leases and the allocator keep their invariants over random client operations",
          "[lease][property]") {
  spdlog::set_level(spdlog::level::off);
  uint64_t refused = 0;
  uint64_t objects = 0;
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> in = RandomOperations(rng, 60);
    fuzz::LeaseDriver driver;
    std::string broken = driver.Run(in);
    if (broken.empty()) broken = driver.Finish();
    INFO("seed " << seed << ", input " << Hex(in));
    REQUIRE(broken == "");
    refused += driver.sessions_refused();
    objects += driver.most_objects();
  }
  // The sequences reached both sides: puts taken, and sessions closed for a put refused.
  CHECK(objects > 300);
  CHECK(refused > 30);
}

TEST_CASE("a put after one that took the whole lease breaks no invariant", "[lease]") {
  spdlog::set_level(spdlog::level::off);
  // Control bytes: operation * 2 + slot; see fuzz/make_corpus.cc for the pick bytes.
  const std::vector<std::vector<uint8_t>> inputs = {
      {0, 5, 2, 0, 6 << 3, 0, 2, 0, 2 << 3, 1, 12},            // message, 64 bytes past the start
      {0, 5, 2, 0, 6 << 3, 0, 2, 0, 2 << 3, 0, 12, 6, 0, 12},  // message, the same offset
      {0, 5, 4, 0, 6 << 3, 0, 0, 4, 0, 2 << 3, 1, 1, 12},      // ring records and a doorbell
  };
  for (const auto& in : inputs) {
    INFO("input " << Hex(in));
    fuzz::LeaseDriver driver;
    std::string broken = driver.Run(in);
    if (broken.empty()) broken = driver.Finish();
    CHECK(broken == "");
    CHECK(driver.sessions_refused() == 1);
  }
}

}  // namespace
}  // namespace depot::test
