// SlotReaders is the lock-free get path as the object table sees it (implemented by
// LockFreeGets): clients find sealed objects in memory through a shared index and hold them
// through reference slots the daemon reads. The table publishes each object that becomes sealed
// and in memory, withdraws it before its memory may go, and then asks whether a slot still holds
// it. Objects never published are never asked about; deleted objects kept for slots are asked
// about together (FreeUnpinned), as are spill candidates: one read of the slots for the batch,
// which costs what the batch holds, not what the slots hold.
#ifndef DEPOT_DAEMON_SLOT_READERS_H_
#define DEPOT_DAEMON_SLOT_READERS_H_

#include <cstdint>
#include <span>
#include <vector>

namespace depot {

using ObjectId = uint64_t;
class StoredObject;  // daemon/object_table.h

class SlotReaders {
 public:
  virtual ~SlotReaders() = default;
  // `o` is sealed and in memory: clients may find it. Whether it went into the index.
  virtual bool Publish(const StoredObject& o) = 0;
  // No client may find `id` from now on (a no-op when it was not published).
  virtual void Withdraw(ObjectId id) = 0;
  // Whether a reference slot holds `id` now; asked only after Withdraw(id).
  virtual bool Pinned(ObjectId id) const = 0;
  // Which of `ids` (sorted, distinct) a reference slot holds now, held[i] about ids[i]: one
  // read of the slots for ids withdrawn before the call. Each slot is looked up among `ids`
  // only: what else the slots hold, garbage included, costs a compare and is never collected.
  virtual std::vector<bool> HeldAmong(std::span<const ObjectId> ids) const = 0;
  // The ids clients took from the index since the last call, oldest first (untrusted).
  virtual std::vector<ObjectId> Touched() = 0;
  // Whether the index grew since the last call: the objects it left out may fit now.
  virtual bool TakeGrown() { return false; }
  // Appends to `out` the objects the index dropped since the last call (their entries taken
  // back for another user's): they are left out from then on.
  virtual void TakeDropped(std::vector<ObjectId>& /*out*/) {}
  // Whether `id` is in the index now.
  virtual bool Indexed(ObjectId id) const = 0;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_SLOT_READERS_H_
