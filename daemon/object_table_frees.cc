// ObjectTable (daemon/object_table.h): how objects go. Releases, deletes and evictions, and the
// reads of the reference slots they wait for: at once, once for a FreeBatch or for each read of
// an EvictionBatch, or in pinned_ while a slot holds a deleted object.
#include <fmt/format.h>

#include <algorithm>

#include "daemon/object_table.h"

namespace depot {

Status ObjectTable::Release(SessionId session, ObjectId id) {
  auto s = sessions_.find(session);
  if (s == sessions_.end() || !s->second.held.contains(id)) {
    return Status::NotFound(
        fmt::format("this connection holds no reference on object handle {}", id));
  }
  auto h = s->second.held.find(id);
  if (--h->second > 0) return Status::OK();
  s->second.held.erase(h);
  if (s->second.cap != nullptr) s->second.cap->Give(s->second.uid);
  Unreference(Must(id), session);
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
  if (batches_ > 0 && o.indexed) {
    batched_.push_back({o.id, by, true});
    return;
  }
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
    if (!held[i]) Free(Must(ids[i]), pinned_.at(ids[i]));
  }
  return !pinned_.empty();
}

void ObjectTable::FreeBatched() {
  if (batched_.empty()) return;
  std::vector<Batched> batch = std::exchange(batched_, {});
  std::sort(batch.begin(), batch.end(),
            [](const Batched& a, const Batched& b) { return a.id < b.id; });
  std::vector<ObjectId> ids;
  ids.reserve(batch.size());
  for (const Batched& b : batch) ids.push_back(b.id);  // distinct: each went once
  std::vector<bool> held = readers_->HeldAmong(ids);
  for (size_t i = 0; i < batch.size(); ++i) {
    StoredObject& o = Must(batch[i].id);
    if (held[i]) {
      pinned_[o.id] = batch[i].by;
      ++pins_made_;
    } else if (batch[i].freed_event) {
      Free(o, batch[i].by);
    } else {
      Destroy(o);
    }
  }
}

Status ObjectTable::Delete(const Guid& guid, SessionId by) {
  auto slot = index_.Find(guid);
  if (!slot) return Status::NotFound(fmt::format("object {} does not exist", guid.ToString()));
  StoredObject& o = At(*slot);
  if (o.state != ObjectState::kSealed) {
    return Status::InvalidArgument(fmt::format(
        "object {} is still being created; its creator must seal or abort it", guid.ToString()));
  }
  index_.Erase(SlotOf(o.id));
  order_.Erase(SlotOf(o.id));
  LruRemove(o);
  if (readers_ != nullptr) readers_->Withdraw(o.id);  // gone for every get from now on
  Notify(TableEvent::kDeleted, o, by);
  bool batch = batches_ > 0 && o.indexed;
  if (o.refcount == 0 && !batch && !Pinned(o)) {
    Destroy(o);
    return Status::OK();
  }
  o.deleted = true;
  --counts_.sealed;
  ++counts_.deleted;
  counts_.sealed_bytes -= o.size();
  counts_.deleted_bytes += o.size();
  if (o.refcount > 0) return Status::OK();
  if (batch) {
    batched_.push_back({o.id, by, false});
  } else {
    pinned_[o.id] = by;
    ++pins_made_;
  }
  return Status::OK();
}

bool ObjectTable::EvictLru(SessionId by) {
  if (evicting_ > 0 && readers_ != nullptr) return EvictBatched(by);  // no index: nothing to read
  TakeTouches();
  // An object a reference slot holds is passed over: back in the index, at the LRU's recent end.
  // Each is tried once per call, so a cache that slots hold entirely ends the search.
  for (size_t tries = lru_.size; tries > 0; --tries) {
    StoredObject& o = At(lru_.head);
    if (!Pinned(o)) return Evict(o, by);
    Publish(o);
    LruAdd(o);
  }
  return false;
}

bool ObjectTable::EvictBatched(SessionId by) {
  for (size_t tries = lru_.size; true;) {
    while (!evict_ready_.empty()) {
      StoredObject* o = Live(evict_ready_.front());
      evict_ready_.pop_front();
      if (o == nullptr) continue;
      // Still unreferenced on the LRU and out of the index: no get took it since (a get through
      // the daemon takes a reference, and none through the index can find it). One the index
      // took again (it grew, and published what it lacked) needs a read of its own.
      if (o->in_lru && o->evictable && !readers_->Indexed(o->id)) return Evict(*o, by);
      Republish(*o);
    }
    if (tries == 0 || lru_.size == 0) return false;
    TakeTouches();
    // The next objects from the least recently used end, withdrawn, then one read for them all.
    std::vector<ObjectId> read;
    for (uint32_t at = lru_.head; at != kNoSlot && read.size() < std::min(evict_read_, tries);
         at = At(at).lru_next_) {
      read.push_back(At(at).id);
    }
    tries -= read.size();
    evict_read_ = std::min(evict_read_ * 2, kEvictionReadMax);
    std::vector<ObjectId> indexed;
    for (ObjectId id : read) {
      if (!Must(id).indexed) continue;
      readers_->Withdraw(id);
      indexed.push_back(id);
    }
    std::sort(indexed.begin(), indexed.end());
    std::vector<bool> held = indexed.empty() ? std::vector<bool>{} : readers_->HeldAmong(indexed);
    for (ObjectId id : read) {
      auto it = std::lower_bound(indexed.begin(), indexed.end(), id);
      StoredObject& o = Must(id);
      if (it != indexed.end() && *it == id && held[it - indexed.begin()]) {
        Publish(o);  // passed over, as above
        LruAdd(o);
      } else {
        evict_ready_.push_back(id);
      }
    }
  }
}

void ObjectTable::EndEvictions() {
  evict_read_ = 1;
  for (ObjectId id : std::exchange(evict_ready_, {})) {
    if (StoredObject* o = Live(id); o != nullptr) Republish(*o);
  }
}

void ObjectTable::Republish(StoredObject& o) {
  if (o.state == ObjectState::kSealed && !o.deleted && o.residence == Residence::kMemory &&
      !readers_->Indexed(o.id)) {
    Publish(o);
  }
}

bool ObjectTable::Evict(StoredObject& o, SessionId by) {
  ++counts_.evictions;
  counts_.evicted_bytes += o.size();
  Notify(TableEvent::kEvicted, o, by);
  o.evicted = true;
  Destroy(o);
  return true;
}

void ObjectTable::DropSession(SessionId session) {
  auto s = sessions_.find(session);
  if (s == sessions_.end()) return;
  SessionRefs refs = std::move(s->second);
  sessions_.erase(s);
  FreeBatch batch(*this);
  for (ObjectId id : refs.creating) {
    Notify(TableEvent::kAborted, Must(id), session);
    Destroy(Must(id));
  }
  if (refs.cap != nullptr) refs.cap->Give(refs.uid, refs.held.size());
  for (const auto& [id, count] : refs.held) Unreference(Must(id), session);
}

}  // namespace depot
