#include "bench/memory_floor.h"

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <string>

#include "bench/harness.h"
#include "common/prefetch.h"
#include "proto/index_layout.h"

namespace depot::bench {
namespace {

constexpr size_t kObjects = 1000;
constexpr size_t kBlock = 512;

// The largest mapping of a shared index in this process, read-only.
std::span<const std::byte> MappedIndex() {
  std::ifstream maps("/proc/self/maps");
  std::span<const std::byte> best;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("/memfd:index-") == std::string::npos) continue;
    uintptr_t begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR, &begin, &end) != 2) continue;
    if (end - begin > best.size()) {
      best = {reinterpret_cast<const std::byte*>(begin), end - begin};
    }
  }
  if (best.empty()) throw BenchError("no shared index is mapped in this process");
  return best;
}

}  // namespace

MemoryFloor::MemoryFloor(uint64_t held)
    : index_(MappedIndex()), table_(std::bit_ceil(std::max<uint64_t>(held, 2048) * 2)) {}

double MemoryFloor::Time1000() {
  // The sets of an index of this size (a power of two; the arena after them is smaller).
  const uint64_t sets = std::bit_floor(index_.size() / (index::kSetWords * 8));
  const auto* words = reinterpret_cast<const uint64_t*>(index_.data());
  std::array<uint64_t, kObjects> first{}, second{};
  std::array<size_t, kObjects> slot{};
  for (size_t i = 0; i < kObjects; ++i) {
    first[i] = rng_() % sets;
    second[i] = rng_() % sets;
    slot[i] = rng_() % table_.size();
  }
  auto tags = [&](uint64_t set) { return words + index::TagWord(set * index::kWays); };
  std::array<const uint64_t*, kBlock> entry{};
  uint64_t sum = 0;
  auto t0 = Clock::now();
  for (size_t from = 0; from < kObjects; from += kBlock) {
    const size_t n = std::min(kBlock, kObjects - from);
    for (size_t k = 0; k < n; ++k) {  // both sets' tags, and the holding's slot
      Prefetch(tags(first[from + k]));
      Prefetch(tags(second[from + k]));
      Prefetch(&table_[slot[from + k]]);
    }
    for (size_t k = 0; k < n; ++k) {  // an entry of the first set, by what its tags hold
      uint64_t way = index::Load(tags(first[from + k])) % index::kWays;
      entry[k] = words + index::EntryWord(first[from + k] * index::kWays + way);
      Prefetch(entry[k]);
    }
    for (size_t k = 0; k < n; ++k) {  // the entry read, the holding remembered
      uint64_t word = index::Load(entry[k]);
      sum += word;
      table_[slot[from + k]] = {word, sum, 1, 2, 3};
    }
  }
  double t = Since(t0);
  KeepAlive(sum);
  return t;
}

}  // namespace depot::bench
