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

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "daemon/location.h"
#include "daemon/object_table_hash.h"
#include "daemon/object_table_order.h"
#include "daemon/slot_readers.h"
#include "daemon/stored_object.h"
#include "daemon/user_cap.h"
#include "depot/guid.h"
#include "depot/status.h"

namespace depot {

// What Create needs to know about a new object.
struct NewObject {
  Guid guid;
  std::vector<Location> frames;
  std::vector<uint8_t> metadata;
  std::string name;
  bool evictable = false;
  bool owner_scoped = false;
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

class ObjectTable {
 public:
  using FreeFn = std::function<void(const StoredObject&)>;
  using ClockFn = std::function<int64_t()>;  // wall-clock nanoseconds
  // `by` is the session whose request (or disconnect) caused the event; 0 for the daemon itself.
  using EventFn = std::function<void(TableEvent, const StoredObject&, SessionId by)>;
  // One session's acquires of one object not yet released.
  using HoldCount = uint64_t;
  // Runs a function on the daemon's loop later, after what is queued there already.
  using PostFn = std::function<void(std::function<void()>)>;
  // Objects published again in one part after the index grew (PublishLeftOut).
  static constexpr size_t kRepublishPart = 256;

  ObjectTable(FreeFn on_free, ClockFn clock);
  // Its indexes name its records by address: it stays where it was made.
  ObjectTable(const ObjectTable&) = delete;
  ObjectTable& operator=(const ObjectTable&) = delete;

  // Called after every transition (created, sealed, aborted, deleted, evicted) and when a
  // deleted object's memory is finally freed.
  void set_observer(EventFn fn) { observer_ = std::move(fn); }
  // Where the objects left out of the index are published again after it grew, in parts;
  // without it, all at once.
  void set_post(PostFn post) { post_ = std::move(post); }
  // Whether objects left out of the index are being published again, in parts.
  bool republishing() const { return !republish_.empty(); }

  // Adds an object in state Creating, owned by `creator`. AlreadyExists when the GUID is taken.
  Result<const StoredObject*> Create(NewObject o);

  // Creating -> Sealed, recording the checksum of its bytes when the creator gives one. Only the
  // creator may seal. NotFound for an unknown GUID, InvalidArgument when already sealed,
  // PermissionDenied for another session.
  Status Seal(SessionId session, const Guid& guid, std::optional<uint64_t> checksum = {});

  // Creating -> freed. Same errors as Seal.
  Status Abort(SessionId session, const Guid& guid);

  // `session` is of user `uid`: each object it comes to hold is counted in `cap` (shared by every
  // table of the daemon), and refused with QuotaExceeded once the user holds its share.
  // Sessions that never join hold without a cap.
  void Join(SessionId session, uid_t uid, UserCap* cap);

  // Takes a reference for `session` on a sealed object. NotFound when absent; Timeout ("not sealed
  // yet") when still being created; Unavailable while it is on disk; DataLoss when it is lost;
  // QuotaExceeded when the session's user holds its share of objects (Join).
  Result<const StoredObject*> Acquire(SessionId session, const Guid& guid);

  // Drops one acquire of `session` on object `id`. NotFound when the session holds no such
  // reference. Frees a deleted object whose last reference this was.
  Status Release(SessionId session, ObjectId id);

  // Removes a sealed object's GUID at once; its memory is freed now, or when the last reference
  // is released, or once no reference slot holds it (FreeUnpinned). NotFound when absent;
  // InvalidArgument for an object still being created. `by` asked for it (named in events).
  Status Delete(const Guid& guid, SessionId by = 0);

  // A session ended: aborts what it was creating and drops every reference it held (one batch
  // of frees, below).
  void DropSession(SessionId session);

  // While a FreeBatch lives, the objects that deletes and last releases free wait for one read
  // of the reference slots, made when it ends, instead of one read each: a request that deletes
  // a thousand objects costs one pass over every session's slots, not a thousand. Until then
  // they are deleted and unreferenced, as if a slot held them. Nothing but deletes, releases
  // and lookups may use the table meanwhile. Batches nest; the outermost one reads.
  class FreeBatch {
   public:
    explicit FreeBatch(ObjectTable& table) : table_(table) { ++table_.batches_; }
    ~FreeBatch() {
      if (--table_.batches_ == 0) table_.FreeBatched();
    }
    FreeBatch(const FreeBatch&) = delete;
    FreeBatch& operator=(const FreeBatch&) = delete;

   private:
    ObjectTable& table_;
  };

  // Evicts the least recently used evictable, sealed, unreferenced object that no reference slot
  // holds, to make room for `by`. False when none.
  bool EvictLru(SessionId by = 0);

  // While an EvictionBatch lives, EvictLru reads the reference slots for several of the least
  // recently used objects at once (one, then twice as many at each read, up to
  // kEvictionReadMax): making room for a large object out of many small ones costs a few reads
  // of every session's slots, not one per object evicted. The objects read and found free are
  // withdrawn from the index until they are evicted or the batch ends (then published again):
  // meanwhile a get of one goes to the daemon. Batches nest; the outermost one publishes.
  class EvictionBatch {
   public:
    explicit EvictionBatch(ObjectTable& table) : table_(table) { ++table_.evicting_; }
    ~EvictionBatch() {
      if (--table_.evicting_ == 0) table_.EndEvictions();
    }
    EvictionBatch(const EvictionBatch&) = delete;
    EvictionBatch& operator=(const EvictionBatch&) = delete;

   private:
    ObjectTable& table_;
  };

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

  // Adds a sealed object a previous daemon left, owned by no session: on disk (it spilled it), or
  // `in_memory` at `o.frames` (memory it kept, see KeptMemory), then published and told as
  // sealed. AlreadyExists when the GUID is taken.
  Result<const StoredObject*> Adopt(NewObject o, const SpilledFacts& facts, bool in_memory = false);

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
    uid_t uid = 0;
    UserCap* cap = nullptr;  // counts `held` for `uid` (Join)
  };

  Result<StoredObject*> FindCreating(SessionId session, const Guid& guid);
  void Unreference(StoredObject& o, SessionId by);
  // A deleted object no session references: freed now, or kept in pinned_ while a reference
  // slot holds it; in a FreeBatch, asked about when it ends.
  void FreeDeleted(StoredObject& o, SessionId by);
  // The end of the outermost FreeBatch: one read of the slots for the objects it kept.
  void FreeBatched();
  void Free(StoredObject& o, SessionId by);
  // Withdrawn from the index; whether a reference slot still holds it.
  bool Pinned(const StoredObject& o) {
    if (!o.indexed) return false;
    readers_->Withdraw(o.id);
    return readers_->Pinned(o.id);
  }
  void Publish(StoredObject& o) {
    if (readers_ == nullptr) return;
    if (readers_->Publish(o)) {
      o.indexed = true;
    } else {
      NoteLeftOut(o.id);
    }
    readers_->TakeDropped(left_out_);
    if (readers_->TakeGrown()) PublishLeftOut();
  }
  // Notes an object the index refused, for PublishLeftOut; the list stays within about twice
  // the objects sealed.
  void NoteLeftOut(ObjectId id);
  // Publishes again the objects left out (it grew): those noted, not every object; the first
  // kRepublishPart now, and each next part posted to the loop.
  void PublishLeftOut();
  // The next part of those PublishLeftOut took; posts the one after while some are left.
  void RepublishPart();
  void Destroy(StoredObject& o);  // frees the memory and forgets the object
  bool Evict(StoredObject& o, SessionId by);
  // EvictLru in an EvictionBatch: the next object of evict_ready_, read for more when empty.
  bool EvictBatched(SessionId by);
  // Publishes again what an EvictionBatch withdrew and did not evict.
  void EndEvictions();
  // `o`, withdrawn by an EvictionBatch and not evicted: back in the index, unless it has gone or
  // is there already.
  void Republish(StoredObject& o);
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

  // Records are numbered by slot and kept in chunks that never move; an ObjectId is the slot in
  // its low 32 bits and the record's generation (1, 2, ...) above, so Get needs no map and no id
  // comes back: a record whose generation would wrap is retired instead of reused.
  static constexpr uint32_t kNoSlot = UINT32_MAX;
  static constexpr size_t kChunkRecords = 4096;
  StoredObject& At(uint32_t slot) const {
    return chunks_[slot / kChunkRecords][slot % kChunkRecords];
  }
  static uint32_t SlotOf(ObjectId id) { return static_cast<uint32_t>(id); }
  // The live object `id`, or nullptr (ids from clients included).
  StoredObject* Live(ObjectId id) const;
  // The live object `id`; throws std::out_of_range if there is none (a broken invariant).
  StoredObject& Must(ObjectId id) const;
  StoredObject& NewRecord();
  void FreeRecord(StoredObject& o);
  struct GuidOfSlot {
    const ObjectTable* table;
    const Guid& operator()(uint32_t slot) const { return table->At(slot).guid; }
  };
  // An intrusive list through the records' lru links.
  struct Lru {
    uint32_t head = kNoSlot;  // least recently used
    uint32_t tail = kNoSlot;
    size_t size = 0;
  };
  void LruUnlink(Lru& list, StoredObject& o);

  FreeFn on_free_;
  EventFn observer_;
  ClockFn clock_;
  std::vector<std::unique_ptr<StoredObject[]>> chunks_;
  uint32_t slots_ = 0;                             // records made
  uint32_t free_head_ = kNoSlot;                   // free records, linked through lru_next_
  GuidHash<GuidOfSlot> index_{GuidOfSlot{this}};   // visible objects by GUID
  GuidOrder<GuidOfSlot> order_{GuidOfSlot{this}};  // the same, in GUID order for paging
  Lru lru_;                                        // evictable, sealed, unreferenced
  Lru spill_lru_;                                  // non-evictable, sealed, unreferenced, in memory
  std::unordered_map<SessionId, SessionRefs> sessions_;
  bool spilling_ = false;
  ObjectCounts counts_;
  SlotReaders* readers_ = nullptr;
  // Deleted, unreferenced, held by reference slots; the session that caused the free beside each.
  std::unordered_map<ObjectId, SessionId> pinned_;
  // Objects the index refused or dropped (some gone or indexed since, some more than once).
  std::vector<ObjectId> left_out_;
  // Those PublishLeftOut took, sorted, and how many of them its parts went through.
  std::vector<ObjectId> republish_;
  size_t republished_ = 0;
  bool republish_posted_ = false;
  PostFn post_;
  // Posted parts hold a weak copy: one that runs after this is gone does nothing.
  std::shared_ptr<ObjectTable*> self_ = std::make_shared<ObjectTable*>(this);
  uint64_t pins_made_ = 0;
  // FreeBatch: how many are open, and the deleted, unreferenced, indexed objects waiting for
  // their end (freed with a kFreed event, or at once as a delete frees, when no slot holds one).
  struct Batched {
    ObjectId id;
    SessionId by;
    bool freed_event;
  };
  int batches_ = 0;
  std::vector<Batched> batched_;
  // EvictionBatch: how many are open; the objects read free of slots and withdrawn, to evict
  // next (least recently used first; each checked again before it goes); how many the next
  // read covers.
  int evicting_ = 0;
  std::deque<ObjectId> evict_ready_;
  size_t evict_read_ = 1;
  static constexpr size_t kEvictionReadMax = 256;
  // Reads of the slots one SpillCandidates call makes at most.
  static constexpr int kSpillBatches = 4;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_OBJECT_TABLE_H_
