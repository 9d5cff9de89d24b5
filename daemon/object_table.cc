#include "daemon/object_table.h"

#include <algorithm>

#include <fmt/format.h>

namespace depot {

StoredObject::StoredObject(std::span<const Location> frames, std::string_view name,
                           std::span<const uint8_t> metadata)
    : frame_count_(static_cast<uint32_t>(frames.size())),
      metadata_size_(static_cast<uint32_t>(metadata.size())),
      name_size_(static_cast<uint16_t>(name.size())) {
  if (frames.size() == 1) {
    first_frame_ = frames[0];
  } else if (frames.size() > 1) {
    more_frames_ = std::make_unique<Location[]>(frames.size());
    std::copy(frames.begin(), frames.end(), more_frames_.get());
  }
  if (!name.empty() || !metadata.empty()) {
    extra_ = std::make_unique<uint8_t[]>(name.size() + metadata.size());
    std::copy(name.begin(), name.end(), extra_.get());
    std::copy(metadata.begin(), metadata.end(), extra_.get() + name.size());
  }
}

uint64_t StoredObject::size() const {
  uint64_t total = 0;
  for (const Location& f : frames()) total += f.size;
  return total;
}

ObjectTable::ObjectTable(FreeFn on_free, ClockFn clock)
    : on_free_(std::move(on_free)), clock_(std::move(clock)) {}

Result<const StoredObject*> ObjectTable::Create(NewObject n) {
  if (index_.contains(n.guid)) {
    return Status::AlreadyExists(fmt::format("object {} already exists", n.guid.ToString()));
  }
  ObjectId id = next_id_++;
  StoredObject& o =
      objects_.try_emplace(id, n.frames, n.name, n.metadata).first->second;
  o.id = id;
  o.guid = n.guid;
  o.evictable = n.evictable;
  o.creator = n.creator;
  o.creator_pid = n.creator_pid;
  o.creator_uid = n.creator_uid;
  o.created_ns = clock_();
  index_.emplace(o.guid, id);
  sessions_[o.creator].creating.insert(id);
  ++counts_.creating;
  counts_.creating_bytes += o.size();
  Notify(TableEvent::kCreated, o, o.creator);
  return &o;
}

Result<StoredObject*> ObjectTable::FindCreating(SessionId session, const Guid& guid) {
  auto it = index_.find(guid);
  if (it == index_.end()) {
    return Status::NotFound(fmt::format("object {} does not exist", guid.ToString()));
  }
  StoredObject& o = objects_.at(it->second);
  if (o.state != ObjectState::kCreating) {
    return Status::InvalidArgument(fmt::format("object {} is already sealed", guid.ToString()));
  }
  if (o.creator != session) {
    return Status::PermissionDenied(fmt::format(
        "object {} is being created by another connection; only its creator may seal or abort it",
        guid.ToString()));
  }
  return &o;
}

Status ObjectTable::Seal(SessionId session, const Guid& guid, std::optional<uint64_t> checksum) {
  auto found = FindCreating(session, guid);
  if (!found.ok()) return found.status();
  StoredObject& o = **found;
  o.state = ObjectState::kSealed;
  o.has_checksum = checksum.has_value();
  o.checksum = checksum.value_or(0);
  o.sealed_ns = clock_();
  sessions_[session].creating.erase(o.id);
  --counts_.creating;
  ++counts_.sealed;
  counts_.creating_bytes -= o.size();
  counts_.sealed_bytes += o.size();
  if (o.evictable) LruAdd(o);
  Notify(TableEvent::kSealed, o, session);
  return Status::OK();
}

Status ObjectTable::Abort(SessionId session, const Guid& guid) {
  auto found = FindCreating(session, guid);
  if (!found.ok()) return found.status();
  sessions_[session].creating.erase((*found)->id);
  Notify(TableEvent::kAborted, **found, session);
  Destroy(**found);
  return Status::OK();
}

Result<const StoredObject*> ObjectTable::Acquire(SessionId session, const Guid& guid) {
  auto it = index_.find(guid);
  if (it == index_.end()) {
    return Status::NotFound(fmt::format("object {} does not exist", guid.ToString()));
  }
  StoredObject& o = objects_.at(it->second);
  if (o.state != ObjectState::kSealed) {
    return Status::Timeout(fmt::format("object {} is not sealed yet", guid.ToString()));
  }
  HoldCount& held = sessions_[session].held[o.id];
  if (held++ == 0 && o.refcount++ == 0) LruRemove(o);
  return &o;
}

Status ObjectTable::Release(SessionId session, ObjectId id) {
  auto s = sessions_.find(session);
  if (s == sessions_.end() || !s->second.held.contains(id)) {
    return Status::NotFound(fmt::format("this connection holds no reference on object handle {}", id));
  }
  auto h = s->second.held.find(id);
  if (--h->second > 0) return Status::OK();
  s->second.held.erase(h);
  Unreference(objects_.at(id), session);
  return Status::OK();
}

void ObjectTable::Unreference(StoredObject& o, SessionId by) {
  if (--o.refcount > 0) return;
  if (o.deleted) {
    Notify(TableEvent::kFreed, o, by);
    Destroy(o);
  } else if (o.evictable) {
    LruAdd(o);
  }
}

Status ObjectTable::Delete(const Guid& guid, SessionId by) {
  auto it = index_.find(guid);
  if (it == index_.end()) {
    return Status::NotFound(fmt::format("object {} does not exist", guid.ToString()));
  }
  StoredObject& o = objects_.at(it->second);
  if (o.state != ObjectState::kSealed) {
    return Status::InvalidArgument(fmt::format(
        "object {} is still being created; its creator must seal or abort it", guid.ToString()));
  }
  index_.erase(it);
  LruRemove(o);
  Notify(TableEvent::kDeleted, o, by);
  if (o.refcount == 0) {
    Destroy(o);
  } else {
    o.deleted = true;
    --counts_.sealed;
    ++counts_.deleted;
    counts_.sealed_bytes -= o.size();
    counts_.deleted_bytes += o.size();
  }
  return Status::OK();
}

void ObjectTable::DropSession(SessionId session) {
  auto s = sessions_.find(session);
  if (s == sessions_.end()) return;
  SessionRefs refs = std::move(s->second);
  sessions_.erase(s);
  for (ObjectId id : refs.creating) {
    Notify(TableEvent::kAborted, objects_.at(id), session);
    Destroy(objects_.at(id));
  }
  for (const auto& [id, count] : refs.held) Unreference(objects_.at(id), session);
}

bool ObjectTable::EvictLru(SessionId by) {
  if (lru_.empty()) return false;
  StoredObject& o = objects_.at(lru_.front());
  ++counts_.evictions;
  counts_.evicted_bytes += o.size();
  Notify(TableEvent::kEvicted, o, by);
  Destroy(o);
  return true;
}

void ObjectTable::Destroy(StoredObject& o) {
  LruRemove(o);
  if (o.deleted) {
    --counts_.deleted;
    counts_.deleted_bytes -= o.size();
  } else {
    index_.erase(o.guid);
    bool creating = o.state == ObjectState::kCreating;
    --(creating ? counts_.creating : counts_.sealed);
    (creating ? counts_.creating_bytes : counts_.sealed_bytes) -= o.size();
  }
  on_free_(o);
  objects_.erase(o.id);
}

void ObjectTable::LruAdd(StoredObject& o) {
  LruRemove(o);
  o.lru_pos = lru_.insert(lru_.end(), o.id);
  o.in_lru = true;
  ++counts_.evictable;
  counts_.evictable_bytes += o.size();
}

void ObjectTable::LruRemove(StoredObject& o) {
  if (!o.in_lru) return;
  lru_.erase(o.lru_pos);
  o.in_lru = false;
  --counts_.evictable;
  counts_.evictable_bytes -= o.size();
}

const StoredObject* ObjectTable::Find(const Guid& guid) const {
  auto it = index_.find(guid);
  return it == index_.end() ? nullptr : &objects_.at(it->second);
}

std::vector<const StoredObject*> ObjectTable::List(std::optional<Guid> after, size_t limit) const {
  std::vector<const StoredObject*> out;
  auto it = after ? index_.upper_bound(*after) : index_.begin();
  for (; it != index_.end() && out.size() < limit; ++it) out.push_back(&objects_.at(it->second));
  return out;
}

ObjectTable::HoldCount ObjectTable::HeldBy(SessionId session, ObjectId id) const {
  auto s = sessions_.find(session);
  if (s == sessions_.end()) return 0;
  auto h = s->second.held.find(id);
  return h == s->second.held.end() ? 0 : h->second;
}

Holdings ObjectTable::HoldingsOf(SessionId session) const {
  Holdings h;
  auto s = sessions_.find(session);
  if (s == sessions_.end()) return h;
  h.references = s->second.held.size();
  for (const auto& [id, count] : s->second.held) h.bytes += objects_.at(id).size();
  h.creating = s->second.creating.size();
  return h;
}

std::vector<Holder> ObjectTable::HoldersOf(ObjectId id) const {
  std::vector<Holder> out;
  for (const auto& [session, refs] : sessions_) {
    if (auto h = refs.held.find(id); h != refs.held.end()) out.push_back({session, h->second});
  }
  std::sort(out.begin(), out.end(),
            [](const Holder& a, const Holder& b) { return a.session < b.session; });
  return out;
}

std::vector<const StoredObject*> ObjectTable::ObjectsHeldBy(SessionId session) const {
  std::vector<const StoredObject*> out;
  auto s = sessions_.find(session);
  if (s == sessions_.end()) return out;
  for (const auto& [id, count] : s->second.held) out.push_back(&objects_.at(id));
  for (ObjectId id : s->second.creating) out.push_back(&objects_.at(id));
  return out;
}

}  // namespace depot
