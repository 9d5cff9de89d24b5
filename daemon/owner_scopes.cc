#include "daemon/owner_scopes.h"

#include <algorithm>

namespace depot {
namespace {

// Lists shorter than this are never pruned: pruning costs a lookup per entry.
constexpr size_t kPruneFloor = 64;

}  // namespace

bool OwnerScopes::StillOwned(const ObjectTable& table, SessionId session, const Guid& guid) {
  const StoredObject* o = table.Find(guid);
  return o != nullptr && o->creator == session;
}

void OwnerScopes::Add(SessionId session, const Guid& guid, const ObjectTable& table) {
  Scope& scope = scopes_[session];
  if (scope.guids.size() >= std::max(kPruneFloor, 2 * scope.pruned_size)) {
    std::erase_if(scope.guids, [&](const Guid& g) { return !StillOwned(table, session, g); });
    scope.pruned_size = scope.guids.size();
  }
  scope.guids.push_back(guid);
}

void OwnerScopes::Close(SessionId session, ObjectTable& table) {
  auto it = scopes_.find(session);
  if (it == scopes_.end()) return;
  ObjectTable::FreeBatch batch(table);
  for (const Guid& guid : it->second.guids) {
    const StoredObject* o = table.Find(guid);
    if (o != nullptr && o->creator == session && o->state == ObjectState::kSealed) {
      (void)table.Delete(guid, session);  // sealed and present: cannot fail
    }
  }
  scopes_.erase(it);
}

void OwnerScopes::Orphan(const StoredObject& o) {
  orphans_[{o.creator_pid, o.creator_uid}].push_back(o.guid);
}

std::vector<std::pair<int32_t, uint32_t>> OwnerScopes::Orphaned() const {
  std::vector<std::pair<int32_t, uint32_t>> out;
  for (const auto& [process, guids] : orphans_) out.push_back(process);
  return out;
}

size_t OwnerScopes::DropOrphans(int32_t pid, uint32_t uid, ObjectTable& table) {
  auto it = orphans_.find({pid, uid});
  if (it == orphans_.end()) return 0;
  size_t deleted = 0;
  ObjectTable::FreeBatch batch(table);
  for (const Guid& guid : it->second) {
    // Still the object adopted (a GUID deleted and taken again is another's now).
    const StoredObject* o = table.Find(guid);
    if (o != nullptr && o->owner_scoped && o->creator == 0 && o->creator_pid == pid) {
      deleted += table.Delete(guid).ok() ? 1 : 0;
    }
  }
  orphans_.erase(it);
  return deleted;
}

size_t OwnerScopes::remembered(SessionId session) const {
  auto it = scopes_.find(session);
  return it == scopes_.end() ? 0 : it->second.guids.size();
}

}  // namespace depot
