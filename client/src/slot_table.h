// internal::SlotTable is this connection's reference slots (proto/index_layout.h), mapped
// read-write from the memfd the daemon sent at hello. An object taken from the index is held by
// its id in a slot instead of a daemon reference: publishing and clearing a slot costs no
// message. The daemon reads the slots before it frees, evicts or spills an object.
//
// Thread-safe: one mutex guards the list of free slots; the slots are written as atomics.
#ifndef DEPOT_CLIENT_SRC_SLOT_TABLE_H_
#define DEPOT_CLIENT_SRC_SLOT_TABLE_H_

#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "common/shared_mapping.h"
#include "common/unique_fd.h"
#include "depot/status.h"

namespace depot::internal {

class SlotTable {
 public:
  // Maps `count` slots from `fd`. ProtocolError when the file is smaller than that.
  static Result<SlotTable> Map(const UniqueFd& fd, uint32_t count);
  SlotTable(SlotTable&& o) noexcept : map_(std::move(o.map_)), free_(std::move(o.free_)) {}

  // Claims a free slot, writes `id` into it and fences (seq_cst), so that a re-read of the index
  // entry after this orders against the daemon's withdrawal (see IndexReader::Unchanged).
  // nullopt when every slot is taken: the caller asks the daemon instead.
  std::optional<uint32_t> Publish(uint64_t id);
  // Empties slot `slot` (release: the reads of the object's bytes come before it) and frees it.
  void Clear(uint32_t slot);

 private:
  explicit SlotTable(SharedMapping map);

  SharedMapping map_;
  std::mutex mu_;
  std::vector<uint32_t> free_;
};

}  // namespace depot::internal

#endif  // DEPOT_CLIENT_SRC_SLOT_TABLE_H_
