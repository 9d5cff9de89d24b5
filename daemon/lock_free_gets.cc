#include "daemon/lock_free_gets.h"

#include <algorithm>

namespace depot {

Result<std::unique_ptr<LockFreeGets>> LockFreeGets::Create(uint64_t entries,
                                                           const std::string& name_prefix,
                                                           IndexableFn indexable) {
  auto index = ObjectIndex::Create(entries, "index-" + name_prefix);
  if (!index.ok()) return index.status();
  return std::unique_ptr<LockFreeGets>(
      new LockFreeGets(std::move(*index), name_prefix, std::move(indexable)));
}

bool LockFreeGets::Publish(const StoredObject& o) {
  auto frames = o.frames();
  return std::all_of(frames.begin(), frames.end(), indexable_) && index_->Insert(o);
}

bool LockFreeGets::Pinned(ObjectId id) const {
  return std::any_of(slots_.begin(), slots_.end(),
                     [id](const auto& s) { return s.second->Holds(id); });
}

std::vector<bool> LockFreeGets::HeldAmong(std::span<const ObjectId> ids) const {
  std::vector<bool> held(ids.size());
  if (ids.empty()) return held;
  // Ids are few (pinned objects, a batch of spill candidates) and the slots many, written by
  // clients: a slot outside [first, last] costs two compares, one inside a binary search.
  ObjectId first = ids.front();
  ObjectId last = ids.back();
  size_t unseen = ids.size();
  for (const auto& [session, slots] : slots_) {
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
  for (auto& [session, slots] : slots_) slots->TakeTouches(ids);
  return ids;
}

Result<const ReferenceSlots*> LockFreeGets::Join(SessionId session) {
  auto slots = ReferenceSlots::Create("slots-" + name_prefix_ + std::to_string(session));
  if (!slots.ok()) return slots.status();
  const ReferenceSlots* out = slots->get();
  slots_[session] = std::move(*slots);
  return out;
}

}  // namespace depot
