#include "daemon/lock_free_gets.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

namespace depot {

Result<std::unique_ptr<LockFreeGets>> LockFreeGets::Create(uint64_t entries, uint64_t max_entries,
                                                           uint64_t max_slots_per_user,
                                                           const std::string& name_prefix,
                                                           IndexableFn indexable, PostFn post,
                                                           MakeIndexFn make) {
  auto index = ObjectIndex::Create(entries, "index-" + name_prefix);
  if (!index.ok()) return index.status();
  return std::unique_ptr<LockFreeGets>(
      new LockFreeGets(std::move(*index), max_entries, max_slots_per_user, name_prefix,
                       std::move(indexable), std::move(post), std::move(make)));
}

bool LockFreeGets::Publish(const StoredObject& o) {
  auto frames = o.frames();
  if (!std::all_of(frames.begin(), frames.end(), indexable_)) return false;
  if (next_) {
    // Sessions find it now, and still after the move: in an entry the move has yet to reach, or
    // in both indexes.
    ++published_in_move_;
    if (!index_->Insert(o)) return next_->Insert(o);
    if (*index_->EntryOf(o.id) < moved_) {
      (void)next_->Insert(o);
    } else {
      next_->Remove(o.id);  // what it held may be older: the move copies this
    }
    return true;
  }
  uint64_t left_out = index_->left_out();
  if (index_->Insert(o)) return true;
  // Left out for room (not for its user's part) from a crowded index: a bigger one holds it.
  return index_->left_out() != left_out && Grow() && Publish(o);
}

bool LockFreeGets::Grow() {
  uint64_t entries = index_->entries() * 2;
  if (making_ || !index_->Crowded() || entries > max_entries_) return false;
  move_started_ = std::chrono::steady_clock::now();
  if (!make_) {
    BeginMove(ObjectIndex::Create(entries, "index-" + name_prefix_));
    return next_ != nullptr;
  }
  making_ = true;
  make_(entries, "index-" + name_prefix_,
        [self = std::weak_ptr<LockFreeGets*>(self_)](MadeIndex bigger) {
          if (auto alive = self.lock()) (*alive)->BeginMove(std::move(bigger));
        });
  return false;
}

void LockFreeGets::BeginMove(MadeIndex bigger) {
  making_ = false;
  if (!bigger.ok()) {
    spdlog::warn("the shared index stays at {} entries: {}", index_->entries(),
                 bigger.status().message());
    max_entries_ = index_->entries();  // not tried again at every object left out
    return;
  }
  next_ = std::move(*bigger);
  moved_ = 0;
  published_in_move_ = 0;
  steps_ = 0;
  // Objects left out of this index (for room or their user's part, or while the bigger one was
  // made) may fit in the bigger one: the table publishes them again (TakeGrown).
  grown_ = grown_ || index_->left_out() + index_->refused_over_share() > 0;
  auto now = std::chrono::steady_clock::now();
  spdlog::info(
      "the shared index is moving to {} entries ({} objects, made in {:.1f} ms, from {} entries "
      "a step)",
      next_->entries(), index_->indexed(),
      std::chrono::duration<double, std::milli>(now - move_started_).count(), kMoveStep);
  move_started_ = now;
  MoveStep();
}

void LockFreeGets::MoveStep() {
  do {
    // Faster while objects come faster, so that the bigger index is not crowded before the end.
    uint64_t step =
        std::min(kMoveStep + kMovedPerPublish * std::exchange(published_in_move_, 0), kMoveStepMax);
    moved_ = index_->MoveInto(*next_, moved_, step);
    ++steps_;
  } while (!post_ && moved_ < index_->entries());
  if (moved_ < index_->entries()) {
    post_([self = std::weak_ptr<LockFreeGets*>(self_)] {
      if (auto alive = self.lock()) (*alive)->MoveStep();
    });
    return;
  }
  if (retiring_) RetireStep(true);  // the last move's, not done yet
  // Sessions that miss in the old index ask for this one from now on; what they find there
  // stays valid, and withdrawn from both, until its retirement's steps reach it (walking a
  // million entries at once took 10-26 ms of the loop).
  index_->BeginRetire();
  retiring_ = std::exchange(index_, std::move(next_));
  retired_ = 0;
  ++generation_;
  spdlog::info(
      "the shared index grew to {} entries ({} objects, moved in {} steps over {:.1f} ms)",
      index_->entries(), index_->indexed(), steps_,
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - move_started_)
          .count());
  RetireStep();
}

void LockFreeGets::RetireStep(bool whole) {
  if (!retiring_) return;
  do {
    retired_ = retiring_->RetireSome(retired_, whole ? retiring_->entries() : kRetireStep);
  } while (!post_ && retired_ < retiring_->entries());
  if (retired_ < retiring_->entries()) {
    if (!std::exchange(retire_posted_, true)) {
      post_([self = std::weak_ptr<LockFreeGets*>(self_)] {
        if (auto alive = self.lock()) {
          (*alive)->retire_posted_ = false;
          (*alive)->RetireStep();
        }
      });
    }
    return;
  }
  retiring_->EndRetire();
  retiring_.reset();
}

bool LockFreeGets::Pinned(ObjectId id) const {
  ++slot_reads_;
  return std::any_of(read_.begin(), read_.end(),
                     [id](const auto& s) { return s.second->Holds(id); });
}

std::vector<bool> LockFreeGets::HeldAmong(std::span<const ObjectId> ids) const {
  std::vector<bool> held(ids.size());
  if (ids.empty()) return held;
  ++slot_reads_;
  // Ids are few (pinned objects, a batch of spill candidates) and the slots many, written by
  // clients: a slot outside [first, last] costs two compares, one inside a binary search.
  ObjectId first = ids.front();
  ObjectId last = ids.back();
  size_t unseen = ids.size();
  for (const auto& [session, slots] : read_) {
    slots->ForEach([&](ObjectId id) {
      if (id < first || id > last) return;
      auto it = std::lower_bound(ids.begin(), ids.end(), id);
      if (it == ids.end() || *it != id) return;
      auto i = static_cast<size_t>(it - ids.begin());
      if (!held[i]) --unseen;
      held[i] = true;
    });
    if (unseen == 0) break;
  }
  return held;
}

std::vector<ObjectId> LockFreeGets::Touched() {
  std::vector<ObjectId> ids;
  for (auto& [session, slots] : read_) slots->TakeTouches(ids);
  return ids;
}

Result<const ReferenceSlots*> LockFreeGets::Join(SessionId session, uint32_t uid) {
  auto slots = ReferenceSlots::Create("slots-" + name_prefix_ + std::to_string(session));
  if (!slots.ok()) return slots.status();
  const ReferenceSlots* out = slots->get();
  slots_[session] = std::move(*slots);
  uids_[session] = uid;
  return out;
}

void LockFreeGets::Leave(SessionId session) {
  auto it = slots_.find(session);
  if (it == slots_.end()) return;
  uint32_t uid = uids_[session];
  uint64_t extra = it->second->granted() - index::kSlotCount;
  granted_ -= extra;
  if ((granted_by_uid_[uid] -= extra) == 0) granted_by_uid_.erase(uid);
  slots_.erase(it);
  read_.erase(session);
  uids_.erase(session);
}

void LockFreeGets::Mapped(SessionId session) {
  if (auto it = slots_.find(session); it != slots_.end()) read_.emplace(session, it->second.get());
}

uint32_t LockFreeGets::Grant(SessionId session, uint32_t count) {
  auto it = slots_.find(session);
  if (it == slots_.end()) return 0;
  ReferenceSlots& slots = *it->second;
  uint32_t had = slots.granted();
  count = std::min(count, index::kMaxSlots);
  if (count <= had) return had;
  uint64_t& mine = granted_by_uid_[uids_[session]];
  uint64_t room = max_slots_per_user_ > mine ? max_slots_per_user_ - mine : 0;
  count = static_cast<uint32_t>(std::min<uint64_t>(count, had + room));
  if (count <= had || !slots.Grant(count).ok()) {
    ++grants_refused_;
    return had;
  }
  mine += count - had;
  granted_ += count - had;
  return count;
}

}  // namespace depot
