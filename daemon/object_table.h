// ObjectTable is the lifecycle of every object: which GUIDs exist, in which state, who created
// them, which sessions hold references, and which objects may be evicted. It owns no memory: when
// an object's bytes may be reused it calls the FreeFn it was built with, exactly once per object.
//
//   Create ──▶ Creating ──Seal──▶ Sealed ──Delete──▶ (gone from the index; freed at last release)
//                 │                  └──EvictLru (evictable, unreferenced)──▶ freed
//                 └──Abort / creator disconnects──▶ freed
//
// With spilling on (set_spilling), a sealed object also has a residence: its bytes are in memory,
// being written to disk (still in memory and readable), on disk (its memory freed), being
// restored, or lost (its file could not be read back). The table only records it: SpillStore
// moves objects between residences through StartSpill/FinishSpill and StartRestore/
// FinishRestore, and keeps a second LRU, of sealed, unreferenced, non-evictable objects in memory
// (the spill candidates).
//
// References are counted per session: a session holds the object while it has at least one
// acquire not yet released, and the object's refcount is the number of such sessions. Acquires
// and releases name the object by its ObjectId (the handle a get returns), so a GUID that is
// deleted and created again is never confused with its predecessor.
//
// Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_OBJECT_TABLE_H_
#define DEPOT_DAEMON_OBJECT_TABLE_H_

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "daemon/location.h"
#include "depot/guid.h"
#include "depot/status.h"

namespace depot {

using SessionId = uint64_t;
using ObjectId = uint64_t;

enum class ObjectState { kCreating, kSealed };

// Where a sealed object's bytes are (see the class comment of ObjectTable).
enum class Residence : uint8_t { kMemory, kSpilling, kDisk, kRestoring, kLost };

// One object as the daemon keeps it. Laid out for a store of millions of small objects: the
// first frame is inline and the name and metadata share one allocation made only when either is
// present (about 128 bytes for an object of one frame without either).
class StoredObject {
 public:
  StoredObject() = default;
  StoredObject(std::span<const Location> frames, std::string_view name,
               std::span<const uint8_t> metadata);

  std::span<const Location> frames() const {
    return {frame_count_ > 1 ? more_frames_.get() : &first_frame_, frame_count_};
  }
  std::string_view name() const {
    return {reinterpret_cast<const char*>(extra_.get()), name_size_};
  }
  std::span<const uint8_t> metadata() const { return {extra_.get() + name_size_, metadata_size_}; }
  uint64_t size() const;
  // Points the object at new memory of the same frame sizes (a restore).
  void Relocate(std::span<const Location> frames);

  ObjectId id = 0;
  Guid guid;
  int64_t created_ns = 0;  // wall clock, for people
  int64_t sealed_ns = 0;
  SessionId creator = 0;
  uint64_t checksum = 0;  // XXH3-64 of the bytes, recorded at seal when has_checksum
  std::list<ObjectId>::iterator lru_pos;
  int32_t creator_pid = 0;
  uint32_t creator_uid = 0;
  uint32_t refcount = 0;  // sessions holding it (at most one per connection: cannot wrap)
  ObjectState state = ObjectState::kCreating;
  bool deleted = false;  // gone from the index, waiting for its last reference
  bool indexed = false;  // was in the shared index once: a reference slot may hold it
  bool evictable = false;
  bool evicted = false;  // freed to make room, not because it was deleted
  bool in_lru = false;
  bool has_checksum = false;
  Residence residence = Residence::kMemory;

 private:
  Location first_frame_{};
  std::unique_ptr<Location[]> more_frames_;  // every frame, when there are several
  std::unique_ptr<uint8_t[]> extra_;         // name, then metadata
  uint32_t frame_count_ = 0;
  uint32_t metadata_size_ = 0;
  uint16_t name_size_ = 0;
};

// What Create needs to know about a new object.
struct NewObject {
  Guid guid;
  std::vector<Location> frames;
  std::vector<uint8_t> metadata;
  std::string name;
  bool evictable = false;
  SessionId creator = 0;
  int32_t creator_pid = 0;
  uint32_t creator_uid = 0;
};

// What a file on disk says about an object that a previous daemon spilled (ObjectTable::Adopt).
struct SpilledFacts {
  uint64_t checksum = 0;
  bool has_checksum = false;
  int64_t created_ns = 0;
  int64_t sealed_ns = 0;
};

// What happened to an object, for those who watch (depotctl watch).
enum class TableEvent {
  kCreated,
  kSealed,
  kAborted,
  kDeleted,
  kEvicted,
  kFreed,
  kSpilled,
  kRestored
};

// What a session holds, for depotctl clients.
struct Holdings {
  uint64_t references = 0;  // objects it holds a reference on
  uint64_t bytes = 0;       // their total size
  uint64_t creating = 0;    // objects it is creating
};

// Objects and bytes by state, kept as the states change (metrics read them without a walk).
struct ObjectCounts {
  uint64_t creating = 0;
  uint64_t sealed = 0;
  uint64_t deleted = 0;  // deleted, still referenced
  uint64_t creating_bytes = 0;
  uint64_t sealed_bytes = 0;
  uint64_t deleted_bytes = 0;
  uint64_t evictable = 0;  // sealed, evictable and unreferenced: on the LRU
  uint64_t evictable_bytes = 0;
  uint64_t evictions = 0;
  uint64_t evicted_bytes = 0;
  uint64_t spilled = 0;  // sealed objects on disk only (being restored included)
  uint64_t spilled_bytes = 0;
  uint64_t lost = 0;  // objects whose file could not be read back
};

// One session's hold on one object, for depotctl stat.
struct Holder {
  SessionId session = 0;
  uint64_t references = 0;  // its acquires not yet released
};

// The lock-free get path as the table sees it (LockFreeGets): clients find sealed objects in
// memory through a shared index and hold them through reference slots the daemon reads. The
// table publishes each object that becomes sealed and in memory, withdraws it before its memory
// may go, and then asks whether a slot still holds it. Objects never published are never asked
// about; deleted objects kept for slots are asked about together (FreeUnpinned), as are spill
// candidates: one read of the slots for the batch, which costs what the batch holds, not what
// the slots hold.
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
  // Whether `id` is in the index now.
  virtual bool Indexed(ObjectId id) const = 0;
};

class ObjectTable {
 public:
  using FreeFn = std::function<void(const StoredObject&)>;
  using ClockFn = std::function<int64_t()>;  // wall-clock nanoseconds
  // `by` is the session whose request (or disconnect) caused the event; 0 for the daemon itself.
  using EventFn = std::function<void(TableEvent, const StoredObject&, SessionId by)>;
  // One session's acquires of one object not yet released.
  using HoldCount = uint64_t;

  ObjectTable(FreeFn on_free, ClockFn clock);

  // Called after every transition (created, sealed, aborted, deleted, evicted) and when a
  // deleted object's memory is finally freed.
  void set_observer(EventFn fn) { observer_ = std::move(fn); }

  // Adds an object in state Creating, owned by `creator`. AlreadyExists when the GUID is taken.
  Result<const StoredObject*> Create(NewObject o);

  // Creating -> Sealed, recording the checksum of its bytes when the creator gives one. Only the
  // creator may seal. NotFound for an unknown GUID, InvalidArgument when already sealed,
  // PermissionDenied for another session.
  Status Seal(SessionId session, const Guid& guid, std::optional<uint64_t> checksum = {});

  // Creating -> freed. Same errors as Seal.
  Status Abort(SessionId session, const Guid& guid);

  // Takes a reference for `session` on a sealed object. NotFound when absent; Timeout ("not sealed
  // yet") when still being created; Unavailable while it is on disk; DataLoss when it is lost.
  Result<const StoredObject*> Acquire(SessionId session, const Guid& guid);

  // Drops one acquire of `session` on object `id`. NotFound when the session holds no such
  // reference. Frees a deleted object whose last reference this was.
  Status Release(SessionId session, ObjectId id);

  // Removes a sealed object's GUID at once; its memory is freed now, or when the last reference
  // is released, or once no reference slot holds it (FreeUnpinned). NotFound when absent;
  // InvalidArgument for an object still being created. `by` asked for it (named in events).
  Status Delete(const Guid& guid, SessionId by = 0);

  // A session ended: aborts what it was creating and drops every reference it held.
  void DropSession(SessionId session);

  // Evicts the least recently used evictable, sealed, unreferenced object, to make room for `by`.
  // False when none.
  bool EvictLru(SessionId by = 0);

  // Publishes sealed objects to `readers` from now on, and frees, evicts or spills none that a
  // reference slot holds (see SlotReaders). Null: off.
  void set_slot_readers(SlotReaders* readers) { readers_ = readers; }
  // Frees the deleted objects that only reference slots held and that none holds now, with one
  // read of the slots for all; whether some are still held (then the caller asks again later).
  bool FreeUnpinned();
  size_t pinned() const { return pinned_.size(); }
  // How many times an object came to wait for reference slots only (kept by pinned_), ever: a
  // caller that reads the slots less often while nothing new waits sees when something does.
  uint64_t pins_made() const { return pins_made_; }

  // Keeps the LRU of spill candidates from now on (see the class comment).
  void set_spilling(bool on) { spilling_ = on; }

  // Spill candidates, least recently used first, until their sizes reach `bytes` (or none is
  // left); `skip` says which to pass over.
  std::vector<ObjectId> SpillCandidates(uint64_t bytes,
                                        const std::function<bool(const StoredObject&)>& skip);
  // Memory -> Spilling: the object leaves the candidates while its file is written.
  void StartSpill(ObjectId id);
  // Spilling -> Disk when `written` and nobody took a reference meanwhile: returns true, and the
  // caller frees the frames. Else back to Memory (and false): the file is not needed.
  bool FinishSpill(ObjectId id, bool written);
  // Disk -> Restoring.
  void StartRestore(ObjectId id);
  // Restoring -> Memory at `frames` when `restored` is OK; -> Lost when it is DataLoss; else
  // back to Disk (no memory for it now).
  void FinishRestore(ObjectId id, std::span<const Location> frames, const Status& restored);

  // Adds a sealed object found on disk at start-up (a previous daemon spilled it): on disk, owned
  // by no session. AlreadyExists when the GUID is taken.
  Result<const StoredObject*> Adopt(NewObject o, const SpilledFacts& facts);

  // The visible object with this GUID, or nullptr.
  const StoredObject* Find(const Guid& guid) const;
  // A live object by handle (deleted ones included), or nullptr.
  const StoredObject* Get(ObjectId id) const;

  // Up to `limit` visible objects with GUIDs after `after` (nullopt: from the first), in GUID
  // order.
  std::vector<const StoredObject*> List(std::optional<Guid> after, size_t limit) const;

  const ObjectCounts& counts() const { return counts_; }

  // How many references `session` holds on object `id` (for tests and inspection).
  HoldCount HeldBy(SessionId session, ObjectId id) const;

  // Everything `session` holds or is creating.
  Holdings HoldingsOf(SessionId session) const;

  // The sessions holding object `id`, in session order (walks every session: for inspection).
  std::vector<Holder> HoldersOf(ObjectId id) const;

  // The objects `session` holds or is creating, deleted ones included, in no order.
  std::vector<const StoredObject*> ObjectsHeldBy(SessionId session) const;

 private:
  struct SessionRefs {
    // object -> acquires not yet released. 64-bit: a client that gets one object 2^32 times
    // without releasing must not wrap the count and free what others still hold.
    std::unordered_map<ObjectId, HoldCount> held;
    std::unordered_set<ObjectId> creating;
  };

  Result<StoredObject*> FindCreating(SessionId session, const Guid& guid);
  void Unreference(StoredObject& o, SessionId by);
  // A deleted object no session references: freed now, or kept in pinned_ while a reference
  // slot holds it.
  void FreeDeleted(StoredObject& o, SessionId by);
  void Free(StoredObject& o, SessionId by);
  // Withdrawn from the index; whether a reference slot still holds it.
  bool Pinned(const StoredObject& o) {
    if (!o.indexed) return false;
    readers_->Withdraw(o.id);
    return readers_->Pinned(o.id);
  }
  void Publish(StoredObject& o) {
    if (readers_ == nullptr) return;
    if (readers_->Publish(o)) o.indexed = true;
    if (readers_->TakeGrown()) PublishLeftOut();
  }
  // Publishes every sealed object in memory that the index does not hold (it grew).
  void PublishLeftOut();
  void Destroy(StoredObject& o);  // frees the memory and forgets the object
  bool Evict(StoredObject& o, SessionId by);
  void LruRemove(StoredObject& o);
  // Records `n` under a new ObjectId in the table and the GUID index: the part a create and an
  // adoption share. AlreadyExists when the GUID is taken.
  Result<StoredObject*> Insert(const NewObject& n);
  void LruAdd(StoredObject& o);
  // Moves the objects clients took from the index since the last call to the recent end of
  // their LRU (SlotReaders::Touched), before the LRU is read.
  void TakeTouches();
  void Notify(TableEvent e, const StoredObject& o, SessionId by) {
    if (observer_) observer_(e, o, by);
  }

  FreeFn on_free_;
  EventFn observer_;
  ClockFn clock_;
  ObjectId next_id_ = 1;
  std::unordered_map<ObjectId, StoredObject> objects_;  // every live object, deleted ones included
  std::map<Guid, ObjectId> index_;                      // visible objects, in GUID order for paging
  std::unordered_map<SessionId, SessionRefs> sessions_;
  std::list<ObjectId> lru_;        // evictable, sealed, unreferenced; front is least recently used
  std::list<ObjectId> spill_lru_;  // non-evictable, sealed, unreferenced, in memory
  bool spilling_ = false;
  ObjectCounts counts_;
  SlotReaders* readers_ = nullptr;
  // Deleted, unreferenced, held by reference slots; the session that caused the free beside each.
  std::unordered_map<ObjectId, SessionId> pinned_;
  uint64_t pins_made_ = 0;
  // Reads of the slots one SpillCandidates call makes at most.
  static constexpr int kSpillBatches = 4;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_OBJECT_TABLE_H_
