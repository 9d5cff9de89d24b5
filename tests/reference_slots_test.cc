// Tests for ReferenceSlots against its contract (daemon/reference_slots.h): what the daemon reads
// of one session's slots (the ids below the high-water word, zeros left out), Naming's answer and
// when it looks ids up again, and the touches. The client's side is played by writing the words
// as any client may (proto/index_layout.h); object_index_test runs the library's SlotTable
// against the same memory.
#include "daemon/reference_slots.h"

#include <sys/mman.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <unordered_set>
#include <vector>

#include "proto/index_layout.h"

namespace depot {
namespace {

// A session's slots as the daemon has them, and their words as its client may write them.
class Slots {
 public:
  Slots() {
    auto made = ReferenceSlots::Create("reference-slots-test");
    REQUIRE(made.ok());
    slots_ = std::move(*made);
    void* m =
        ::mmap(nullptr, index::kSlotBytes, PROT_READ | PROT_WRITE, MAP_SHARED, slots_->fd(), 0);
    REQUIRE(m != MAP_FAILED);
    words_ = static_cast<uint64_t*>(m);
  }
  ~Slots() { ::munmap(words_, index::kSlotBytes); }
  Slots(const Slots&) = delete;
  Slots& operator=(const Slots&) = delete;

  ReferenceSlots& daemon() { return *slots_; }
  void Set(uint32_t slot, uint64_t id) { Word(index::kSlotsWord + slot).store(id); }
  void High(uint64_t high) { Word(index::kSlotHighWater).store(high); }
  // Notes `id` as taken from the index, as the library does.
  void Touch(uint64_t id) {
    Word(index::kTouchRing + touched_ % index::kTouchRingSize).store(id);
    Word(index::kTouchCount).store(++touched_);
  }
  std::atomic_ref<uint64_t> Word(uint64_t n) { return std::atomic_ref<uint64_t>(words_[n]); }

  std::vector<ObjectId> ForEach() {
    std::vector<ObjectId> out;
    slots_->ForEach([&](ObjectId id) { out.push_back(id); });
    return out;
  }

 private:
  std::unique_ptr<ReferenceSlots> slots_;
  uint64_t* words_ = nullptr;
  uint64_t touched_ = 0;
};

TEST_CASE("ReferenceSlots reads the ids below the high-water word, zeros left out",
          "[reference_slots]") {
  Slots s;
  CHECK(s.ForEach().empty());  // all empty at first
  s.Set(0, 5);
  s.Set(2, 7);
  s.Set(3, 5);
  s.Set(9, 99);  // above the word: not read
  s.High(4);
  CHECK(s.ForEach() == std::vector<ObjectId>{5, 7, 5});  // repeats not removed
  std::unordered_set<ObjectId> ids{1};
  s.daemon().Collect(ids);
  CHECK(ids == std::unordered_set<ObjectId>{1, 5, 7});
  CHECK(s.daemon().Holds(7));
  CHECK_FALSE(s.daemon().Holds(99));
  // A word past the slots is clamped to the last slot, never read beyond it.
  s.Set(index::kSlotCount - 1, 1234);
  s.High(~uint64_t{0});
  CHECK(s.daemon().Holds(99));
  CHECK(s.daemon().Holds(1234));
  CHECK(s.ForEach().size() == 5);
  // A word of 0 reads nothing.
  s.High(0);
  CHECK(s.ForEach().empty());
}

TEST_CASE("ReferenceSlots::Naming looks ids up again only when the slots change",
          "[reference_slots]") {
  Slots s;
  std::unordered_set<ObjectId> objects{3, 4, 8};  // what names something
  int lookups = 0;
  auto names = [&](ObjectId id) {
    ++lookups;
    return objects.contains(id);
  };
  for (uint32_t i = 0; i < 16; ++i) s.Set(i, 100 + i);  // garbage
  s.Set(5, 8);
  s.Set(6, 3);
  s.Set(7, 8);
  s.High(16);
  // Each once, in order, garbage left out.
  CHECK(s.daemon().Naming(names) == std::vector<ObjectId>{3, 8});
  CHECK(lookups == 16);
  // Unchanged slots cost no lookup, garbage and all.
  CHECK(s.daemon().Naming(names) == std::vector<ObjectId>{3, 8});
  CHECK(lookups == 16);
  // An id that names something only now is missed while the slots stay as they are...
  objects.insert(100);
  CHECK(s.daemon().Naming(names) == std::vector<ObjectId>{3, 8});
  // ... and found once they change; so is a changed high-water word.
  s.Set(6, 4);
  CHECK(s.daemon().Naming(names) == std::vector<ObjectId>{4, 8, 100});
  CHECK(lookups == 32);
  s.High(6);
  CHECK(s.daemon().Naming(names) == std::vector<ObjectId>{8, 100});
  CHECK(lookups == 38);
}

TEST_CASE("ReferenceSlots::TakeTouches gives the ids noted since the last call, at most a ring's",
          "[reference_slots]") {
  Slots s;
  std::vector<ObjectId> ids;
  s.daemon().TakeTouches(ids);
  CHECK(ids.empty());
  s.Touch(11);
  s.Touch(12);
  s.daemon().TakeTouches(ids);
  CHECK(ids == std::vector<ObjectId>{11, 12});
  ids.clear();
  s.daemon().TakeTouches(ids);  // nothing new
  CHECK(ids.empty());
  // More than the ring holds: the most recent ring's worth.
  for (uint64_t n = 0; n < index::kTouchRingSize + 10; ++n) s.Touch(1000 + n);
  s.daemon().TakeTouches(ids);
  REQUIRE(ids.size() == index::kTouchRingSize);
  CHECK(ids.front() == 1010);
  CHECK(ids.back() == 1000 + index::kTouchRingSize + 9);
  // A count that goes backwards gives nothing, and counts on from there.
  ids.clear();
  s.Word(index::kTouchCount).store(3);
  s.daemon().TakeTouches(ids);
  CHECK(ids.empty());
  s.Word(index::kTouchCount).store(4);
  s.daemon().TakeTouches(ids);
  CHECK(ids.size() == 1);
}

}  // namespace
}  // namespace depot
