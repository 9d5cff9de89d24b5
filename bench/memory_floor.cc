#include "bench/memory_floor.h"

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "bench/harness.h"
#include "common/prefetch.h"

namespace depot::bench {
namespace {

constexpr size_t kLine = 64;
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
  const size_t lines = index_.size() / kLine;
  std::array<size_t, kObjects> first{}, second{};
  std::array<size_t, kObjects> slot{};
  for (size_t i = 0; i < kObjects; ++i) {
    first[i] = rng_() % lines;
    second[i] = rng_() % lines;
    slot[i] = rng_() % table_.size();
  }
  auto line = [&](size_t n) { return index_.data() + n * kLine; };
  std::array<const std::byte*, kBlock> entry{};
  uint64_t sum = 0;
  auto t0 = Clock::now();
  for (size_t from = 0; from < kObjects; from += kBlock) {
    const size_t n = std::min(kBlock, kObjects - from);
    for (size_t k = 0; k < n; ++k) {  // both sets' tags, and the holding's slot
      Prefetch(line(first[from + k]));
      Prefetch(line(second[from + k]));
      Prefetch(&table_[slot[from + k]]);
    }
    for (size_t k = 0; k < n; ++k) {  // the entry the first set's tags name
      uint64_t word = 0;
      std::memcpy(&word, line(first[from + k]), sizeof word);
      entry[k] = line((word ^ (first[from + k] * 0x9e3779b97f4a7c15ULL)) % lines);
      Prefetch(entry[k]);
    }
    for (size_t k = 0; k < n; ++k) {  // the entry read, the holding remembered
      uint64_t word = 0;
      std::memcpy(&word, entry[k], sizeof word);
      sum += word;
      table_[slot[from + k]] = {word, sum, 1, 2, 3};
    }
  }
  double t = Since(t0);
  KeepAlive(sum);
  return t;
}

}  // namespace depot::bench
