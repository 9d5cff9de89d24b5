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

std::unordered_set<ObjectId> LockFreeGets::Held() const {
  std::unordered_set<ObjectId> ids;
  for (const auto& [session, slots] : slots_) slots->Collect(ids);
  return ids;
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

std::unordered_set<ObjectId> LockFreeGets::HeldBy(SessionId session) const {
  std::unordered_set<ObjectId> ids;
  if (auto it = slots_.find(session); it != slots_.end()) it->second->Collect(ids);
  return ids;
}

}  // namespace depot
