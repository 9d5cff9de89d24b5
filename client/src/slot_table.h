// internal::SlotTable is this connection's reference slots (proto/index_layout.h), mapped
// read-write from the memfd the daemon sent at hello. An object taken from the index is held by
// its id in a slot instead of a daemon reference: publishing and clearing a slot costs no
// message. The daemon reads the slots before it frees, evicts or spills an object.
//
// The table takes the lowest free slot and keeps the high-water word at one past the highest
// slot in use, so that the daemon's reads of these slots cost what this process holds, not the
// table's size.
//
// Thread-safe: one mutex guards the free slots and the high-water word; the slots are written as
// atomics.
#ifndef DEPOT_CLIENT_SRC_SLOT_TABLE_H_
#define DEPOT_CLIENT_SRC_SLOT_TABLE_H_

#include <cstdint>
#include <mutex>
#include <optional>
#include <set>

#include "common/shared_mapping.h"
#include "common/unique_fd.h"
#include "depot/status.h"

namespace depot::internal {

class SlotTable {
 public:
  // Maps the slots from `fd` and uses the first `count` of them. ProtocolError when the file is
  // smaller than the layout or its layout words are not this library's (proto/layout_words.h).
  static Result<SlotTable> Map(const UniqueFd& fd, uint32_t count);
  SlotTable(SlotTable&& o) noexcept
      : map_(std::move(o.map_)),
        slots_(o.slots_),
        high_word_(o.high_word_),
        touches_(o.touches_),
        free_(std::move(o.free_)),
        high_(o.high_),
        touched_(o.touched_) {}

  // Claims the lowest free slot, raises the high-water word past it when needed, writes `id`
  // into it and fences (seq_cst), so that a re-read of the index entry after this orders against
  // the daemon's withdrawal (see IndexReader::Unchanged): the daemon then sees both words.
  // It also notes `id` among the touches, so that the daemon's LRU sees the get.
  // nullopt when every slot is taken: the caller asks the daemon instead.
  std::optional<uint32_t> Publish(uint64_t id);
  // Empties slot `slot` (release: the reads of the object's bytes come before it), frees it and
  // lowers the high-water word past the free slots at the top.
  void Clear(uint32_t slot);

 private:
  SlotTable(SharedMapping map, uint32_t count);
  void StoreHigh();  // under mu_

  SharedMapping map_;
  uint64_t* slots_;
  uint64_t* high_word_;
  uint64_t* touches_;  // the touch count, then the ring
  std::mutex mu_;
  std::set<uint32_t> free_;  // lowest first
  uint32_t high_ = 0;        // what the high-water word holds
  uint64_t touched_ = 0;     // what the touch count holds
};

}  // namespace depot::internal

#endif  // DEPOT_CLIENT_SRC_SLOT_TABLE_H_
