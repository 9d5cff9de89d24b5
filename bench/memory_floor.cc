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
    : index_(MappedIndex()), table_(std::bit_ceil(std::max<uint64_t>(held, 2048) * 2)) {
  // The sets of an index of this size (a power of two; the arena after them is smaller).
  const uint64_t sets = std::bit_floor(index_.size() / (index::kSetWords * 8));
  const auto* words = reinterpret_cast<const uint64_t*>(index_.data());
  for (uint64_t n = 0; n < sets * index::kWays; ++n) {
    if (index::Load(words + index::EntryWord(n) + index::kId) == 0) continue;
    const uint64_t* tag = words + index::TagWord(n);
    objects_.push_back({n, index::SetOf(Guid{index::Load(&tag[0]), index::Load(&tag[1])}, sets)});
  }
  if (objects_.empty()) throw BenchError("the shared index this process maps holds no object");
}

double MemoryFloor::Time1000() {
  const auto* words = reinterpret_cast<const uint64_t*>(index_.data());
  std::array<Object, kObjects> objects{};
  std::array<size_t, kObjects> slot{};
  for (size_t i = 0; i < kObjects; ++i) {
    objects[i] = objects_[rng_() % objects_.size()];
    slot[i] = rng_() % table_.size();
  }
  auto tags = [&](uint64_t set) { return words + index::TagWord(set * index::kWays); };
  auto in_first = [](const Object& o) { return o.entry / index::kWays == o.first_set; };
  // Zero, but not to the compiler: an address plus (a word read & zero) waits for that word, as
  // a lookup's next line waits for what the line before it says.
  const uint64_t zero = opaque_zero_;
  std::array<const uint64_t*, kBlock> entry{};
  std::array<size_t, kBlock> second{};  // those of the block in their second set
  uint64_t sum = 0;
  auto t0 = Clock::now();
  for (size_t from = 0; from < kObjects; from += kBlock) {
    const size_t n = std::min(kBlock, kObjects - from);
    for (size_t k = 0; k < n; ++k) {  // the first set's tags, and the holding's slot
      Prefetch(tags(objects[from + k].first_set));
      Prefetch(&table_[slot[from + k]]);
    }
    size_t seconds = 0;
    for (size_t k = 0; k < n; ++k) {  // the entry, or else the second set's tags, once they came
      const Object& o = objects[from + k];
      uint64_t word = index::Load(tags(o.first_set)) & zero;
      if (in_first(o)) {
        entry[k] = words + index::EntryWord(o.entry) + word;
        Prefetch(entry[k]);
      } else {
        Prefetch(tags(o.entry / index::kWays) + word);
        second[seconds++] = k;
      }
    }
    for (size_t i = 0; i < seconds; ++i) {  // the entry of those, once their tags came
      const Object& o = objects[from + second[i]];
      uint64_t word = index::Load(tags(o.entry / index::kWays)) & zero;
      entry[second[i]] = words + index::EntryWord(o.entry) + word;
      Prefetch(entry[second[i]]);
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
