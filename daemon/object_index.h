// ObjectIndex is the daemon's side of a namespace's shared index (proto/index_layout.h): a
// sealed memfd it maps read-write and sends read-only to every session of the namespace, in
// which clients find a sealed object's frames without a round trip. It is a cache of the object
// table, bounded by its geometry: an object that does not fit (its set full, the arena full, too
// many frames) is simply not indexed, and a client that misses asks the daemon.
//
// Insert publishes an entry (seqlock: odd while written); Remove withdraws one and then issues a
// seq_cst fence, so that a reference slot read after Remove is one published before the client
// re-checked the entry (see ReferenceSlots and docs/design.md).
//
// Not thread-safe: the daemon's single loop owns it; clients read the memory concurrently.
#ifndef DEPOT_DAEMON_OBJECT_INDEX_H_
#define DEPOT_DAEMON_OBJECT_INDEX_H_

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/shared_mapping.h"
#include "common/unique_fd.h"
#include "daemon/allocator.h"
#include "daemon/object_table.h"
#include "proto/index_layout.h"

namespace depot {

class ObjectIndex {
 public:
  // An index of at least `entries` entries (rounded up to a power of two of sets), with a record
  // arena of 64 bytes per entry, in a memfd named `name`. The memfd's error when it cannot be
  // made.
  static Result<std::unique_ptr<ObjectIndex>> Create(uint64_t entries, const std::string& name);

  // Indexes sealed object `o`, in memory, at `frames` (its frames). False when it does not fit.
  // An object already indexed is indexed again (a new seq).
  bool Insert(const StoredObject& o);
  // Withdraws object `id` if it is indexed, then fences (seq_cst).
  void Remove(ObjectId id);
  bool Contains(ObjectId id) const { return placed_.contains(id); }

  // Sent to sessions: opened O_RDONLY, it cannot back a writable mapping.
  int read_only_fd() const { return read_only_fd_.get(); }
  uint64_t sets() const { return sets_; }
  uint64_t arena_bytes() const { return arena_.size(); }
  uint64_t size() const { return map_.size(); }
  size_t indexed() const { return placed_.size(); }

 private:
  struct Placed {
    uint64_t entry;   // word offset of its entry
    uint64_t record;  // byte offset of its record in the arena
    uint64_t record_bytes;
  };

  ObjectIndex(UniqueFd fd, UniqueFd read_only_fd, SharedMapping map, uint64_t sets);
  uint64_t* entry(uint64_t word) { return map_.words() + word; }
  uint64_t* arena() { return map_.words() + sets_ * index::kWays * index::kEntryWords; }

  UniqueFd fd_;
  UniqueFd read_only_fd_;
  SharedMapping map_;
  uint64_t sets_;
  Allocator arena_;
  std::vector<bool> used_;  // by entry number
  std::unordered_map<ObjectId, Placed> placed_;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_OBJECT_INDEX_H_
