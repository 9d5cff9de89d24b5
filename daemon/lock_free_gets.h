// LockFreeGets is one namespace's side of gets without a round trip: its shared index
// (ObjectIndex) and the reference slots of its sessions (ReferenceSlots). The object table
// publishes sealed objects through it and, before an object's memory may go, withdraws it and
// asks whether a slot still holds it (SlotReaders). Slots are read only for this namespace's
// ids: a session's slots are read for its own namespace only, so garbage in them keeps at most
// objects its own gets could keep.
//
// Only the slots of sessions that were sent a segment of the namespace are read (Mapped): a get
// through the index maps the object's segment, which a session has only from a reply, so the
// slots of a session that was never sent one hold nothing it got, and a connection that stays
// idle costs the daemon's reads nothing, however many there are.
//
// Both grow with what they hold. When an object is left out of a crowded index (ObjectIndex::
// Crowded), the namespace moves to an index twice as big (up to `max_entries`). The move runs in
// steps (MoveStep), each posted to the loop behind the requests already waiting, so that no
// request waits for more than one step however many objects move; meanwhile sessions read the
// old index, an object published meanwhile goes into it and, where the move has passed its
// entry or it does not fit, into the new one, and what is withdrawn leaves both. After the last
// step the old one is retired and a new generation counted; sessions learn of it when a get
// misses in the retired index and they ask (IndexRequest). A session whose slots are all taken asks
// for more (Grant): each user's slots past the first kSlotCount of each session come out of
// `max_slots_per_user`, so that no user can make the daemon's slot reads, which every user's
// deletes wait on, long.
//
// Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_LOCK_FREE_GETS_H_
#define DEPOT_DAEMON_LOCK_FREE_GETS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "daemon/object_index.h"
#include "daemon/object_table.h"
#include "daemon/reference_slots.h"

namespace depot {

class LockFreeGets : public SlotReaders {
 public:
  // Whether a frame may be read through the index: not one in a segment dedicated to a single
  // object, whose descriptor travels with each reply that names it.
  using IndexableFn = std::function<bool(const Location&)>;
  // Runs a function on the daemon's loop later, after what is queued there already.
  using PostFn = std::function<void(std::function<void()>)>;
  using MadeIndex = Result<std::unique_ptr<ObjectIndex>>;
  // Makes an index (ObjectIndex::Create) away from the loop and hands it to `done` on the loop
  // (SegmentMaker::Run): reserving the pages of a bigger index takes the kernel hundreds of
  // milliseconds at a million objects, which no request should wait for.
  using MakeIndexFn =
      std::function<void(uint64_t entries, std::string name, std::function<void(MadeIndex)> done)>;
  // Entries of the old index that one step of a move copies, and more for each object published
  // since the step before, up to kMoveStepMax.
  static constexpr uint64_t kMoveStep = 512;
  static constexpr uint64_t kMovedPerPublish = 2;
  static constexpr uint64_t kMoveStepMax = 16 * kMoveStep;
  // Entries of the old index that one step of its retirement withdraws, after a move.
  static constexpr uint64_t kRetireStep = 16384;

  // An index of `entries` entries. Its memfds are named after the namespace's segments
  // (`name_prefix`), as index-<prefix> and slots-<prefix><session>: not depot-…, so that nothing
  // takes them for segments. A move's steps go through `post`; without one a move is made whole
  // at once. A bigger index is made through `make`; without one, on the loop when it is needed.
  // The memfd's error.
  static Result<std::unique_ptr<LockFreeGets>> Create(uint64_t entries, uint64_t max_entries,
                                                      uint64_t max_slots_per_user,
                                                      const std::string& name_prefix,
                                                      IndexableFn indexable, PostFn post = {},
                                                      MakeIndexFn make = {});

  // Whether `o` went into the index sessions read or, during a move, the one they will.
  bool Publish(const StoredObject& o) override;
  void Withdraw(ObjectId id) override {
    index_->Remove(id);
    if (next_) next_->Remove(id);
    if (retiring_) retiring_->Remove(id);
  }
  bool Pinned(ObjectId id) const override;
  std::vector<bool> HeldAmong(std::span<const ObjectId> ids) const override;
  std::vector<ObjectId> Touched() override;
  bool TakeGrown() override { return std::exchange(grown_, false); }
  void TakeDropped(std::vector<ObjectId>& out) override {
    index_->TakeDropped(out);
    if (next_) next_->TakeDropped(out);
  }
  bool Indexed(ObjectId id) const override {
    return index_->Contains(id) || (next_ && next_->Contains(id));
  }

  // Makes `session`'s slots (sent to it at hello), of a session of user `uid`. The memfd's error.
  Result<const ReferenceSlots*> Join(SessionId session, uint32_t uid);
  // `session` closed: its slots keep nothing from now on.
  void Leave(SessionId session);
  // `session` is being sent a segment of the namespace (SegmentTracker::Collect, before the
  // reply that carries it): its slots are read from now on.
  void Mapped(SessionId session);
  // Grants `session` slots up to `count` in all, as far as its user's part allows; the slots it
  // has then (0: it has none).
  uint32_t Grant(SessionId session, uint32_t count);

  // Whether `session`'s slots, if it has any, still have their layout words (ReferenceSlots::
  // Intact).
  bool SlotsIntact(SessionId session) const {
    auto it = slots_.find(session);
    return it == slots_.end() || it->second->Intact();
  }
  // What `session` holds through its slots, as stat, list and clients report it: like the reads
  // before memory goes, only a session that was sent a segment holds anything that way.
  // Whether one of `session`'s slots holds `id` now.
  bool HeldBy(SessionId session, ObjectId id) const {
    auto it = read_.find(session);
    return it != read_.end() && it->second->Holds(id);
  }
  // Calls `fn` with each id `session`'s slots hold now (untrusted: any may name nothing, and
  // one may come more than once).
  template <typename Fn>
  void ForEachHeldBy(SessionId session, Fn&& fn) const {
    if (auto it = read_.find(session); it != read_.end()) it->second->ForEach(fn);
  }
  // The ids `session`'s slots hold that `names` accepts, each once (ReferenceSlots::Naming).
  template <typename Fn>
  std::vector<ObjectId> NamedBy(SessionId session, Fn&& names) const {
    auto it = read_.find(session);
    if (it == read_.end()) return {};
    return it->second->Naming(names);
  }
  // Calls `fn` with each id the slots of every session that mapped a segment hold now.
  template <typename Fn>
  void ForEachHeld(Fn&& fn) const {
    for (const auto& [session, slots] : read_) slots->ForEach(fn);
  }

  // The index sessions read.
  const ObjectIndex& index() const { return *index_; }
  // Which index this is: 1 for the first, one more at each move to a bigger one.
  uint64_t generation() const { return generation_; }
  // Whether a move to a bigger index is under way (its steps, or those of the old index's
  // retirement, queued on the loop).
  bool moving() const { return next_ != nullptr || retiring_ != nullptr; }
  // Whether a bigger index is being made (through `make`) for a move to begin with.
  bool making() const { return making_; }
  // Slot grants refused (the user's part spent, or no memory), and the slots granted past the
  // first kSlotCount of each session, in all.
  uint64_t grants_refused() const { return grants_refused_; }
  uint64_t slots_granted() const { return granted_; }
  // Reads of every session's slots for objects leaving memory (Pinned, HeldAmong), since start.
  uint64_t slot_reads() const { return slot_reads_; }

 private:
  LockFreeGets(std::unique_ptr<ObjectIndex> index, uint64_t max_entries,
               uint64_t max_slots_per_user, std::string name_prefix, IndexableFn indexable,
               PostFn post, MakeIndexFn make)
      : index_(std::move(index)),
        max_entries_(max_entries),
        max_slots_per_user_(max_slots_per_user),
        name_prefix_(std::move(name_prefix)),
        indexable_(std::move(indexable)),
        post_(std::move(post)),
        make_(std::move(make)) {}
  // When this index is crowded and may grow: starts a move to one twice as big, or asks for it
  // to be made (the move begins when it comes; objects left out meanwhile are published again
  // then). Whether the move began.
  bool Grow();
  // Begins the move to `bigger`, the first step at once; an index that could not be made stays
  // as it is, at its largest.
  void BeginMove(MadeIndex bigger);
  // One step of the move; the next is posted, or after the last the new index replaces the old,
  // which is retired in steps.
  void MoveStep();
  // One step of the old index's retirement; the next is posted, or after the last its memory
  // goes. With `whole`, all that is left of it at once.
  void RetireStep(bool whole = false);

  std::unique_ptr<ObjectIndex> index_;
  std::unique_ptr<ObjectIndex> next_;      // during a move: the bigger index being filled
  std::unique_ptr<ObjectIndex> retiring_;  // after a move: the old index, until it is retired
  uint64_t retired_ = 0;                   // entries of retiring_ withdrawn
  bool retire_posted_ = false;
  uint64_t moved_ = 0;              // entries of index_ whose objects next_ has
  uint64_t steps_ = 0;              // of the move under way
  uint64_t published_in_move_ = 0;  // since the last step
  bool making_ = false;             // a bigger index asked of make_ and not come yet
  // When the bigger index was asked for; once it came, when its move began.
  std::chrono::steady_clock::time_point move_started_;
  uint64_t max_entries_;
  uint64_t max_slots_per_user_;
  std::string name_prefix_;
  IndexableFn indexable_;
  PostFn post_;
  MakeIndexFn make_;
  // Posted steps and a made index's hand-over hold a weak copy: one that runs after this is
  // gone does nothing.
  std::shared_ptr<LockFreeGets*> self_ = std::make_shared<LockFreeGets*>(this);
  std::map<SessionId, std::unique_ptr<ReferenceSlots>> slots_;
  std::map<SessionId, ReferenceSlots*> read_;    // of the sessions that mapped a segment
  std::map<SessionId, uint32_t> uids_;           // each session's user
  std::map<uint32_t, uint64_t> granted_by_uid_;  // slots past the first kSlotCount, by user
  uint64_t generation_ = 1;
  bool grown_ = false;  // began a move, with objects left out, since TakeGrown
  uint64_t grants_refused_ = 0;
  uint64_t granted_ = 0;
  mutable uint64_t slot_reads_ = 0;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_LOCK_FREE_GETS_H_
