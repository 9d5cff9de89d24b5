#include "daemon/object_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace depot {

ObjectTable::ObjectTable(FreeFn on_free, ClockFn clock)
    : on_free_(std::move(on_free)), clock_(std::move(clock)) {}

StoredObject* ObjectTable::Live(ObjectId id) const {
  uint32_t slot = SlotOf(id);
  if (slot >= slots_) return nullptr;
  StoredObject& o = At(slot);
  return o.live_ && o.id == id ? &o : nullptr;
}

StoredObject& ObjectTable::NewRecord() {
  uint32_t slot = free_head_;
  ObjectId generation = 1;
  if (slot != kNoSlot) {
    free_head_ = At(slot).lru_next_;
    generation = (At(slot).id >> 32) + 1;
  } else {
    if (slots_ % kChunkRecords == 0) {
      chunks_.push_back(std::make_unique<StoredObject[]>(kChunkRecords));
    }
    slot = slots_++;
  }
  StoredObject& o = At(slot);
  o.id = generation << 32 | slot;
  o.live_ = true;
  return o;
}

void ObjectTable::FreeRecord(StoredObject& o) {
  ObjectId id = o.id;
  o = StoredObject();
  o.id = id;                           // keeps the generation
  if (id >> 32 == UINT32_MAX) return;  // the next would wrap: retired
  o.lru_next_ = free_head_;
  free_head_ = SlotOf(id);
}

Result<StoredObject*> ObjectTable::Insert(const NewObject& n) {
  if (index_.Find(n.guid)) {
    return Status::AlreadyExists(fmt::format("object {} already exists", n.guid.ToString()));
  }
  StoredObject& o = NewRecord();
  ObjectId id = o.id;
  o = StoredObject(n.frames, n.name, n.metadata);
  o.id = id;
  o.live_ = true;
  o.guid = n.guid;
  o.evictable = n.evictable;
  o.owner_scoped = n.owner_scoped;
  o.creator = n.creator;
  o.creator_pid = n.creator_pid;
  o.creator_uid = n.creator_uid;
  index_.Insert(SlotOf(id));
  order_.Insert(SlotOf(id));
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
  auto slot = index_.Find(guid);
  if (!slot) return Status::NotFound(fmt::format("object {} does not exist", guid.ToString()));
  StoredObject& o = At(*slot);
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

void ObjectTable::Join(SessionId session, uid_t uid, UserCap* cap) {
  SessionRefs& refs = sessions_[session];
  refs.uid = uid;
  refs.cap = cap;
}

Result<const StoredObject*> ObjectTable::Acquire(SessionId session, const Guid& guid) {
  auto slot = index_.Find(guid);
  if (!slot) return Status::NotFound(fmt::format("object {} does not exist", guid.ToString()));
  StoredObject& o = At(*slot);
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
  SessionRefs& refs = sessions_[session];
  auto [held, fresh] = refs.held.try_emplace(o.id, 0);
  if (fresh && refs.cap != nullptr) {
    if (Status st = refs.cap->Take(refs.uid); !st.ok()) {
      refs.held.erase(held);
      return st;
    }
  }
  if (held->second++ == 0 && o.refcount++ == 0) LruRemove(o);
  return &o;
}

void ObjectTable::TakeTouches() {
  if (readers_ == nullptr) return;
  for (ObjectId id : readers_->Touched()) {
    StoredObject* o = Live(id);
    if (o != nullptr && o->in_lru) LruAdd(*o);  // to the recent end
  }
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
    index_.Erase(SlotOf(o.id));
    order_.Erase(SlotOf(o.id));
    bool creating = o.state == ObjectState::kCreating;
    --(creating ? counts_.creating : counts_.sealed);
    (creating ? counts_.creating_bytes : counts_.sealed_bytes) -= o.size();
  }
  on_free_(o);
  FreeRecord(o);
}

void ObjectTable::LruAdd(StoredObject& o) {
  LruRemove(o);
  if (o.residence != Residence::kMemory || (!o.evictable && !spilling_)) return;
  Lru& list = o.evictable ? lru_ : spill_lru_;
  uint32_t slot = SlotOf(o.id);
  o.lru_prev_ = list.tail;
  o.lru_next_ = kNoSlot;
  (list.tail == kNoSlot ? list.head : At(list.tail).lru_next_) = slot;
  list.tail = slot;
  ++list.size;
  o.in_lru = true;
  if (!o.evictable) return;  // a spill candidate, not a cache entry
  ++counts_.evictable;
  counts_.evictable_bytes += o.size();
}

void ObjectTable::LruUnlink(Lru& list, StoredObject& o) {
  (o.lru_prev_ == kNoSlot ? list.head : At(o.lru_prev_).lru_next_) = o.lru_next_;
  (o.lru_next_ == kNoSlot ? list.tail : At(o.lru_next_).lru_prev_) = o.lru_prev_;
  --list.size;
}

void ObjectTable::LruRemove(StoredObject& o) {
  if (!o.in_lru) return;
  LruUnlink(o.evictable ? lru_ : spill_lru_, o);
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
  uint32_t it = spill_lru_.head;
  // In batches that would reach `bytes` if no slot held any: one read of the slots per batch,
  // and a few batches at most, so that slots holding candidates cannot make this a walk.
  for (int batches = 0; batches < kSpillBatches && it != kNoSlot && total < bytes; ++batches) {
    std::vector<ObjectId> batch;
    std::vector<ObjectId> indexed;
    for (uint64_t more = total; it != kNoSlot && more < bytes; it = At(it).lru_next_) {
      const StoredObject& o = At(it);
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
      total += Must(id).size();
    }
  }
  return out;
}

void ObjectTable::StartSpill(ObjectId id) {
  StoredObject& o = Must(id);
  LruRemove(o);
  o.residence = Residence::kSpilling;
}

bool ObjectTable::FinishSpill(ObjectId id, bool written) {
  StoredObject& o = Must(id);
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

void ObjectTable::StartRestore(ObjectId id) { Must(id).residence = Residence::kRestoring; }

void ObjectTable::FinishRestore(ObjectId id, std::span<const Location> frames,
                                const Status& restored) {
  StoredObject& o = Must(id);
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

Result<const StoredObject*> ObjectTable::Adopt(NewObject n, const SpilledFacts& facts,
                                               bool in_memory) {
  n.creator = 0;  // no session of this daemon created it
  auto inserted = Insert(n);
  if (!inserted.ok()) return inserted.status();
  StoredObject& o = **inserted;
  o.created_ns = facts.created_ns;
  o.sealed_ns = facts.sealed_ns;
  o.checksum = facts.checksum;
  o.has_checksum = facts.has_checksum;
  o.state = ObjectState::kSealed;
  ++counts_.sealed;
  if (in_memory) {
    counts_.sealed_bytes += o.size();
    LruAdd(o);
    Publish(o);
    Notify(TableEvent::kSealed, o, 0);
    return &o;
  }
  o.residence = Residence::kDisk;
  ++counts_.spilled;
  counts_.spilled_bytes += o.size();
  return &o;
}

const StoredObject* ObjectTable::Get(ObjectId id) const { return Live(id); }

StoredObject& ObjectTable::Must(ObjectId id) const {
  StoredObject* o = Live(id);
  if (o == nullptr) throw std::out_of_range(fmt::format("no object has handle {}", id));
  return *o;
}

const StoredObject* ObjectTable::Find(const Guid& guid) const {
  auto slot = index_.Find(guid);
  return slot ? &At(*slot) : nullptr;
}

std::vector<const StoredObject*> ObjectTable::List(std::optional<Guid> after, size_t limit) const {
  std::vector<const StoredObject*> out;
  if (limit == 0) return out;
  order_.ForEachAfter(after, [&](uint32_t slot) {
    out.push_back(&At(slot));
    return out.size() < limit;
  });
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
  for (const auto& [id, count] : s->second.held) h.bytes += Must(id).size();
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
  for (const auto& [id, count] : s->second.held) out.push_back(&Must(id));
  for (ObjectId id : s->second.creating) out.push_back(&Must(id));
  return out;
}

namespace {

void SortDistinct(std::vector<ObjectId>& ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
}

}  // namespace

void ObjectTable::NoteLeftOut(ObjectId id) {
  left_out_.push_back(id);
  if (left_out_.size() <= 2 * counts_.sealed + 4096) return;
  SortDistinct(left_out_);
  std::erase_if(left_out_, [&](ObjectId left) {
    StoredObject* o = Live(left);
    return o == nullptr || o->deleted || readers_->Indexed(left);
  });
}

void ObjectTable::PublishLeftOut() {
  // Only what was left out: a walk of every object took 270 ms of the loop at 860,000 objects.
  // And in parts: the objects left out while a bigger index was made, 100,000 and more at a
  // million, took 50-90 ms of the loop at once.
  std::vector<ObjectId> ids = std::exchange(left_out_, {});
  ids.insert(ids.end(), republish_.begin() + static_cast<ptrdiff_t>(republished_),
             republish_.end());
  SortDistinct(ids);
  republish_ = std::move(ids);
  republished_ = 0;
  RepublishPart();
}

void ObjectTable::RepublishPart() {
  size_t end = republish_.size();
  if (post_) end = std::min(end, republished_ + kRepublishPart);
  for (; republished_ < end; ++republished_) {
    ObjectId id = republish_[republished_];
    StoredObject* o = Live(id);
    if (o == nullptr || o->state != ObjectState::kSealed || o->deleted ||
        o->residence != Residence::kMemory || readers_->Indexed(id)) {
      continue;
    }
    if (readers_->Publish(*o)) {
      o->indexed = true;
    } else {
      NoteLeftOut(id);
    }
  }
  if (republished_ == republish_.size()) {
    republish_ = {};
    republished_ = 0;
    return;
  }
  if (republish_posted_) return;
  republish_posted_ = true;
  post_([self = std::weak_ptr<ObjectTable*>(self_)] {
    if (auto alive = self.lock()) {
      (*alive)->republish_posted_ = false;
      (*alive)->RepublishPart();
    }
  });
}

}  // namespace depot
