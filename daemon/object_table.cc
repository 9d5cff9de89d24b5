#include "daemon/object_table.h"

#include <fmt/format.h>

#include <algorithm>

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

void StoredObject::Relocate(std::span<const Location> frames) {
  if (frame_count_ > 1) {
    std::copy(frames.begin(), frames.end(), more_frames_.get());
  } else if (frame_count_ == 1) {
    first_frame_ = frames[0];
  }
}

ObjectTable::ObjectTable(FreeFn on_free, ClockFn clock)
    : on_free_(std::move(on_free)), clock_(std::move(clock)) {}

Result<StoredObject*> ObjectTable::Insert(const NewObject& n) {
  if (index_.contains(n.guid)) {
    return Status::AlreadyExists(fmt::format("object {} already exists", n.guid.ToString()));
  }
  ObjectId id = next_id_++;
  StoredObject& o = objects_.try_emplace(id, n.frames, n.name, n.metadata).first->second;
  o.id = id;
  o.guid = n.guid;
  o.evictable = n.evictable;
  o.creator = n.creator;
  o.creator_pid = n.creator_pid;
  o.creator_uid = n.creator_uid;
  index_.emplace(o.guid, id);
  return &o;
}

Result<const StoredObject*> ObjectTable::Create(NewObject n) {
  auto inserted = Insert(n);
  if (!inserted.ok()) return inserted.status();
  StoredObject& o = **inserted;
  o.created_ns = clock_();
  sessions_[o.creator].creating.insert(o.id);
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
  LruAdd(o);
  Publish(o);
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
  if (o.residence == Residence::kLost) {
    return Status::DataLoss(fmt::format(
        "object {} was spilled to disk and its file could not be read back", guid.ToString()));
  }
  if (o.residence == Residence::kDisk || o.residence == Residence::kRestoring) {
    return Status::Unavailable(
        fmt::format("object {} is on disk; it is being restored", guid.ToString()));
  }
  HoldCount& held = sessions_[session].held[o.id];
  if (held++ == 0 && o.refcount++ == 0) LruRemove(o);
  return &o;
}

Status ObjectTable::Release(SessionId session, ObjectId id) {
  auto s = sessions_.find(session);
  if (s == sessions_.end() || !s->second.held.contains(id)) {
    return Status::NotFound(
        fmt::format("this connection holds no reference on object handle {}", id));
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
    FreeDeleted(o, by);
  } else {
    LruAdd(o);
  }
}

void ObjectTable::FreeDeleted(StoredObject& o, SessionId by) {
  if (Pinned(o)) {
    pinned_[o.id] = by;
    ++pins_made_;
    return;
  }
  Free(o, by);
}

void ObjectTable::Free(StoredObject& o, SessionId by) {
  pinned_.erase(o.id);
  Notify(TableEvent::kFreed, o, by);
  Destroy(o);
}

bool ObjectTable::FreeUnpinned() {
  if (pinned_.empty()) return false;
  std::vector<ObjectId> ids;
  ids.reserve(pinned_.size());
  for (const auto& [id, by] : pinned_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  std::vector<bool> held = readers_->HeldAmong(ids);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!held[i]) Free(objects_.at(ids[i]), pinned_.at(ids[i]));
  }
  return !pinned_.empty();
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
  if (readers_ != nullptr) readers_->Withdraw(o.id);  // gone for every get from now on
  Notify(TableEvent::kDeleted, o, by);
  if (o.refcount == 0 && !Pinned(o)) {
    Destroy(o);
  } else {
    o.deleted = true;
    --counts_.sealed;
    ++counts_.deleted;
    counts_.sealed_bytes -= o.size();
    counts_.deleted_bytes += o.size();
    if (o.refcount == 0) {
      pinned_[o.id] = by;
      ++pins_made_;
    }
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

void ObjectTable::TakeTouches() {
  if (readers_ == nullptr) return;
  for (ObjectId id : readers_->Touched()) {
    auto it = objects_.find(id);
    if (it != objects_.end() && it->second.in_lru) LruAdd(it->second);  // to the recent end
  }
}

bool ObjectTable::EvictLru(SessionId by) {
  TakeTouches();
  // An object a reference slot holds is passed over: back in the index, at the LRU's recent end.
  // Each is tried once per call, so a cache that slots hold entirely ends the search.
  for (size_t tries = lru_.size(); tries > 0; --tries) {
    StoredObject& o = objects_.at(lru_.front());
    if (!Pinned(o)) return Evict(o, by);
    Publish(o);
    LruAdd(o);
  }
  return false;
}

bool ObjectTable::Evict(StoredObject& o, SessionId by) {
  ++counts_.evictions;
  counts_.evicted_bytes += o.size();
  Notify(TableEvent::kEvicted, o, by);
  o.evicted = true;
  Destroy(o);
  return true;
}

void ObjectTable::Destroy(StoredObject& o) {
  if (readers_ != nullptr) readers_->Withdraw(o.id);
  LruRemove(o);
  if (o.residence == Residence::kDisk || o.residence == Residence::kRestoring) {
    --counts_.spilled;
    counts_.spilled_bytes -= o.size();
  } else if (o.residence == Residence::kLost) {
    --counts_.lost;
  }
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
  if (o.residence != Residence::kMemory || (!o.evictable && !spilling_)) return;
  std::list<ObjectId>& list = o.evictable ? lru_ : spill_lru_;
  o.lru_pos = list.insert(list.end(), o.id);
  o.in_lru = true;
  if (!o.evictable) return;  // a spill candidate, not a cache entry
  ++counts_.evictable;
  counts_.evictable_bytes += o.size();
}

void ObjectTable::LruRemove(StoredObject& o) {
  if (!o.in_lru) return;
  (o.evictable ? lru_ : spill_lru_).erase(o.lru_pos);
  o.in_lru = false;
  if (!o.evictable) return;
  --counts_.evictable;
  counts_.evictable_bytes -= o.size();
}

std::vector<ObjectId> ObjectTable::SpillCandidates(
    uint64_t bytes, const std::function<bool(const StoredObject&)>& skip) {
  TakeTouches();
  std::vector<ObjectId> out;
  uint64_t total = 0;
  auto it = spill_lru_.begin();
  // In batches that would reach `bytes` if no slot held any: one read of the slots per batch,
  // and a few batches at most, so that slots holding candidates cannot make this a walk.
  for (int batches = 0; batches < kSpillBatches && it != spill_lru_.end() && total < bytes;
       ++batches) {
    std::vector<ObjectId> batch;
    std::vector<ObjectId> indexed;
    for (uint64_t more = total; it != spill_lru_.end() && more < bytes; ++it) {
      const StoredObject& o = objects_.at(*it);
      if (skip(o)) continue;
      batch.push_back(o.id);
      if (o.indexed) indexed.push_back(o.id);
      more += o.size();
    }
    std::sort(indexed.begin(), indexed.end());
    std::vector<bool> held = indexed.empty() ? std::vector<bool>{} : readers_->HeldAmong(indexed);
    for (ObjectId id : batch) {
      // One a reference slot holds now would be written out for nothing: FinishSpill keeps it.
      auto i = std::lower_bound(indexed.begin(), indexed.end(), id);
      if (i != indexed.end() && *i == id && held[static_cast<size_t>(i - indexed.begin())]) {
        continue;
      }
      out.push_back(id);
      total += objects_.at(id).size();
    }
  }
  return out;
}

void ObjectTable::StartSpill(ObjectId id) {
  StoredObject& o = objects_.at(id);
  LruRemove(o);
  o.residence = Residence::kSpilling;
}

bool ObjectTable::FinishSpill(ObjectId id, bool written) {
  StoredObject& o = objects_.at(id);
  if (!written || o.refcount > 0 || o.deleted || Pinned(o)) {
    if (written && o.refcount == 0 && !o.deleted) Publish(o);  // a slot held it: back it goes
    o.residence = Residence::kMemory;
    if (o.refcount == 0) LruAdd(o);
    return false;
  }
  o.residence = Residence::kDisk;
  // Its memory goes: the frames keep their sizes and name no place.
  std::vector<Location> sizes;
  for (const Location& f : o.frames()) sizes.push_back(Location{.pool = f.pool, .size = f.size});
  o.Relocate(sizes);
  ++counts_.spilled;
  counts_.spilled_bytes += o.size();
  Notify(TableEvent::kSpilled, o, 0);
  return true;
}

void ObjectTable::StartRestore(ObjectId id) { objects_.at(id).residence = Residence::kRestoring; }

void ObjectTable::FinishRestore(ObjectId id, std::span<const Location> frames,
                                const Status& restored) {
  StoredObject& o = objects_.at(id);
  if (!restored.ok()) {
    o.residence = restored.IsDataLoss() ? Residence::kLost : Residence::kDisk;
    if (restored.IsDataLoss()) {
      --counts_.spilled;
      counts_.spilled_bytes -= o.size();
      ++counts_.lost;
    }
    return;
  }
  o.Relocate(frames);
  o.residence = Residence::kMemory;
  --counts_.spilled;
  counts_.spilled_bytes -= o.size();
  if (o.refcount == 0) LruAdd(o);
  if (!o.deleted) Publish(o);
  Notify(TableEvent::kRestored, o, 0);
}

Result<const StoredObject*> ObjectTable::Adopt(NewObject n, const SpilledFacts& facts) {
  n.creator = 0;  // no session of this daemon created it
  auto inserted = Insert(n);
  if (!inserted.ok()) return inserted.status();
  StoredObject& o = **inserted;
  o.created_ns = facts.created_ns;
  o.sealed_ns = facts.sealed_ns;
  o.checksum = facts.checksum;
  o.has_checksum = facts.has_checksum;
  o.state = ObjectState::kSealed;
  o.residence = Residence::kDisk;
  ++counts_.sealed;
  ++counts_.spilled;
  counts_.spilled_bytes += o.size();
  return &o;
}

const StoredObject* ObjectTable::Get(ObjectId id) const {
  auto it = objects_.find(id);
  return it == objects_.end() ? nullptr : &it->second;
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

void ObjectTable::PublishLeftOut() {
  for (auto& [id, o] : objects_) {
    if (o.state == ObjectState::kSealed && !o.deleted && o.residence == Residence::kMemory &&
        !readers_->Indexed(id) && readers_->Publish(o)) {
      o.indexed = true;
    }
  }
}

}  // namespace depot
