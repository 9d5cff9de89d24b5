// IndexAtScale runs fuzz_index's inputs against one namespace's gets without a round trip at the
// scale users reach: an object table of N sealed objects (half evictable, a quarter with
// metadata), published through LockFreeGets into a shared index that grew to hold them, and one
// session granted kGranted reference slots. Made once; each input then
//   - writes its index bytes over real entries (the sets at a place the input's hash picks) and
//     its arena bytes over real records (the entries' record offsets moved there too), looks up
//     every GUID the patched entries name or named, and a sample of real GUIDs, and puts the
//     bytes back. A lookup must never return more frames or metadata than an object may have,
//     and a sample whose sets and record the patch left alone must be found exactly as before:
//     what a corrupt entry does stays with its own sets;
//   - writes its slot words into the session's slots at a place the input's hash picks (a word
//     with its top bit set names one of the table's objects, so that slots pin real ones), with
//     an honest, too high or too low high-water word; deletes objects its slots name and others,
//     alone and as a request does, evicts, and frees what no slot holds. No object may be freed
//     twice, or while a slot named it if it was ever in the index (a slot naming one that never
//     was, left out for room, holds nothing a get could have taken); once the slots are empty,
//     every deleted or evicted object must be freed. Freed objects are replaced by new ones, so the
//     table keeps N.
// Any broken check aborts, as a finding does under the fuzzer.
//
// Not thread-safe.
#ifndef DEPOT_FUZZ_INDEX_AT_SCALE_H_
#define DEPOT_FUZZ_INDEX_AT_SCALE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "client/src/index_reader.h"
#include "daemon/lock_free_gets.h"
#include "daemon/object_table.h"

namespace depot::fuzz {

class IndexAtScale {
 public:
  static constexpr uint32_t kGranted = uint32_t{1} << 17;  // slots: more than 100,000 held

  explicit IndexAtScale(uint64_t objects);
  ~IndexAtScale();

  // `index`: entries of `small_sets` sets, then up to `arena` bytes of records; `slots`: words.
  void Run(uint64_t small_sets, uint64_t arena, std::span<const uint8_t> index,
           std::span<const uint8_t> slots, uint64_t hash);

 private:
  void Add();  // one more sealed object
  void PatchIndex(uint64_t small_sets, uint64_t arena, std::span<const uint8_t> bytes,
                  uint64_t hash);
  void UseSlots(std::span<const uint8_t> words, uint64_t hash);
  // Maps the index the table publishes into now, read-write, and a reader of it.
  void MapIndex();

  uint64_t objects_;
  struct Freed {
    int times = 0;
    bool indexed = false;  // it was in the index once (StoredObject::indexed)
  };
  std::map<ObjectId, Freed> freed_;  // since the input began
  std::unique_ptr<ObjectTable> table_;
  std::unique_ptr<LockFreeGets> gets_;
  uint64_t* slots_ = nullptr;
  std::vector<Guid> guids_;                     // the table's objects
  std::vector<ObjectId> ids_;                   // the same, by place
  std::unordered_map<ObjectId, size_t> place_;  // where each id is in ids_
  uint64_t next_ = 0;                           // objects made so far
  uint64_t generation_ = 0;                     // of the index mapped
  uint8_t* index_ = nullptr;                    // read-write
  uint64_t index_bytes_ = 0;
  std::unique_ptr<internal::IndexReader> reader_;
};

}  // namespace depot::fuzz

#endif  // DEPOT_FUZZ_INDEX_AT_SCALE_H_
