// internal::SlotTable is this connection's reference slots (proto/index_layout.h), mapped
// read-write from the memfd the daemon sent at hello. An object taken from the index is held by
// its id in a slot instead of a daemon reference: publishing and clearing a slot costs no
// message. The daemon reads the slots before it frees, evicts or spills an object.
//
// The table takes the lowest free slot and keeps the high-water word at one past the highest
// slot in use, so that the daemon's reads of these slots cost what this process holds, not the
// table's size. It starts with the slots the daemon granted at hello; when they are all taken,
// the connection asks for more (Grow, up to capacity()). The free slots are a bitmap with a
// summary word per 64 of its words, so that taking and clearing a slot cost a few words
// whatever the count.
//
// Thread-safe: one mutex guards the free slots and the high-water word; the slots are written as
// atomics.
#ifndef DEPOT_CLIENT_SRC_SLOT_TABLE_H_
#define DEPOT_CLIENT_SRC_SLOT_TABLE_H_

#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "common/shared_mapping.h"
#include "common/unique_fd.h"
#include "depot/status.h"
#include "proto/index_layout.h"

namespace depot::internal {

class SlotTable {
 public:
  // Maps the slots from `fd` and uses the first `count` of them. ProtocolError when the file is
  // smaller than the layout or its layout words are not this library's (proto/layout_words.h).
  static Result<SlotTable> Map(const UniqueFd& fd, uint32_t count);
  SlotTable(SlotTable&& o) noexcept
      : map_(std::move(o.map_)),
        base_(o.base_),
        capacity_(o.capacity_),
        count_(o.count_),
        used_(std::move(o.used_)),
        full_(std::move(o.full_)),
        high_(o.high_),
        touched_(o.touched_),
        first_open_(o.first_open_) {}

  // The most slots the file has room for: more may be asked for up to this.
  uint32_t capacity() const { return capacity_; }
  uint32_t count() const;
  // Whether a slot is free now (a hint: another thread may take it).
  bool HasFree() const;
  // Uses the first `count` slots (the daemon granted them); fewer than now changes nothing.
  void Grow(uint32_t count);

  // Claims the lowest free slot, raises the high-water word past it when needed, writes `id`
  // into it and fences (seq_cst), so that a re-read of the index entry after this orders against
  // the daemon's withdrawal (see IndexReader::Unchanged): the daemon then sees both words.
  // It also notes `id` among the touches, so that the daemon's LRU sees the get.
  // nullopt when every slot is taken: the caller asks the daemon instead.
  std::optional<uint32_t> Publish(uint64_t id);
  // Publish for many ids under one lock and with one fence after the last: claims slots for the
  // first of `ids` while slots are free, writing slot k into `slots[k]`. Returns how many it
  // claimed (the rest: the caller asks for more slots, or asks the daemon).
  size_t PublishMany(std::span<const uint64_t> ids, std::span<uint32_t> slots);
  // Empties slot `slot` (release: the reads of the object's bytes come before it), frees it and
  // lowers the high-water word past the free slots at the top.
  void Clear(uint32_t slot);

 private:
  SlotTable(SharedMapping map, uint32_t capacity, uint32_t count);
  uint64_t* Slot(uint32_t n) const { return base_ + index::SlotWord(n); }
  void StoreHigh();                      // under mu_
  void MarkUsed(uint32_t n, bool used);  // under mu_
  // Claims the lowest free slot into `claimed` and notes the touch of `id`; false when none is
  // free. Under mu_. (Not an optional: returned through a register, its value and flag were
  // stored apart and loaded as one word, which waited on the stores.)
  bool Claim(uint64_t id, uint32_t& claimed);

  SharedMapping map_;
  uint64_t* base_;
  uint32_t capacity_;
  uint32_t count_;
  mutable std::mutex mu_;
  std::vector<uint64_t> used_;  // bit n: slot n taken (or not granted)
  std::vector<uint64_t> full_;  // bit k: used_[k] all taken
  uint32_t high_ = 0;           // what the high-water word holds
  uint64_t touched_ = 0;        // what the touch count holds
  size_t first_open_ = 0;       // no full_ word before this one has a clear bit
};

}  // namespace depot::internal

#endif  // DEPOT_CLIENT_SRC_SLOT_TABLE_H_
