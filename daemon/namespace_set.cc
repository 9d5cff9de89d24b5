#include "daemon/namespace_set.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>

#include "common/wall_clock.h"
#include "daemon/device_source.h"
#include "daemon/shm_source.h"

namespace depot {

NamespaceSet::NamespaceSet(boost::asio::io_context& io, NamespaceOptions options,
                           DeviceSet& devices, NamespaceHooks hooks)
    : options_(std::move(options)),
      devices_(devices),
      hooks_(std::move(hooks)),
      kept_(io, options_.keep_memory, options_.restart_grace),
      spill_(io, options_.spill,
             {.restored = [this](Namespace& ns, const Guid& guid,
                                 const Status& st) { hooks_.restored(ns, guid, st); },
              .allocate = [this](Namespace& ns, std::span<const uint64_t> sizes,
                                 uid_t uid) { return Allocate(ns, sizes, {}, 0, uid); },
              .idle = [this](Namespace* ns) { MaybeDrop(ns); },
              .held_by_clients = [this] { return Stats(0).retired_held; }}) {
  host_budget_.capacity = ShmSource::UsableCapacity(options_.host.capacity);
  host_budget_.warm_limit = std::min(options_.host.keep_warm, host_budget_.capacity);
  if (hooks_.post) maker_ = std::make_unique<SegmentMaker>(hooks_.post);
  if (hooks_.post && devices_.may_redetect()) {
    watch_ = std::make_unique<DeviceWatch>(
        devices_.backend(), hooks_.post, [this](Result<std::vector<DeviceInfo>> found, bool asked) {
          Found(std::move(found), asked);
        });
    watch_->Start();
  }
}

NamespaceSet::~NamespaceSet() {
  kept_.Stop();  // the daemon stops: its segments stay in the store for the next one
}

AdoptionReport NamespaceSet::AdoptKept(const proto::ObjectLimits& limits) {
  auto pool_of_gpu = [this](const std::string& uuid) -> std::optional<uint32_t> {
    for (size_t i = 0; i < devices_.size(); ++i) {
      if (devices_.device(i).uuid == uuid) return static_cast<uint32_t>(i + 1);
    }
    return std::nullopt;
  };
  auto ns_for = [this](uint32_t key) -> Namespace* {
    if ((key == Namespace::kShared) == options_.per_user) {
      spdlog::warn("kept memory of namespace {} is not served under namespaces = {}", key,
                   options_.per_user ? "per_user" : "shared");
      return nullptr;
    }
    if (options_.host.prefault) {
      spdlog::warn("kept memory is not adopted with prefault = on: its objects are lost");
      return nullptr;
    }
    auto ns = For(key == Namespace::kShared ? 0 : key);
    if (!ns.ok()) {
      spdlog::error("kept memory of namespace {}: {}", key, ns.status().message());
      return nullptr;
    }
    return *ns;
  };
  return kept_.Adopt(ns_for, pool_of_gpu, limits);
}

Status NamespaceSet::LoadSpilled() {
  auto keys = spill_.Open();
  if (!keys.ok()) return keys.status();
  for (uint32_t key : *keys) {
    if ((key == Namespace::kShared) == options_.per_user) {
      spdlog::warn("{}: objects spilled under namespaces = {} are not served under {}",
                   spill_.dir(), options_.per_user ? "shared" : "per_user",
                   options_.per_user ? "per_user" : "shared");
      continue;
    }
    auto ns = For(key == Namespace::kShared ? 0 : key);
    if (!ns.ok()) return ns.status();
  }
  return Status::OK();
}

void NamespaceSet::ForEachObject(const std::function<void(const StoredObject&)>& fn) const {
  constexpr size_t kPage = 4096;
  for (const auto& [key, ns] : namespaces_) {
    std::optional<Guid> after;
    std::vector<const StoredObject*> page;
    do {
      page = ns->table().List(after, kPage);
      for (const StoredObject* o : page) fn(*o);
      if (!page.empty()) after = page.back()->guid;
    } while (page.size() == kPage);
  }
}

void NamespaceSet::Persist() {
  std::vector<Namespace*> all;
  for (auto& [key, ns] : namespaces_) all.push_back(ns.get());
  spill_.PersistAll(all);
}

Result<Namespace*> NamespaceSet::For(uid_t uid) {
  uint32_t key = options_.per_user ? static_cast<uint32_t>(uid) : Namespace::kShared;
  if (auto it = namespaces_.find(key); it != namespaces_.end()) return it->second.get();
  auto owned = std::make_unique<Namespace>(key);
  Namespace* ns = owned.get();
  std::string prefix = options_.host.name_prefix;
  if (key != Namespace::kShared) prefix += fmt::format("u{}-", key);
  auto host = SegmentedPool::Create(
      std::make_unique<ShmSource>(prefix, maker_.get(), options_.host.hugepages),
      {.budget = &host_budget_,
       .segment_size = options_.host.segment_size,
       .prefault = options_.host.prefault,
       .reuse_large = true,
       .keeper = kept_.KeeperFor(key)},
      [this, ns](uint32_t id) { return hooks_.retired(*ns, 0, id); });
  if (!host.ok()) return host.status();
  ns->pools_.push_back(std::move(*host));
  if (Status st = AddDevicePools(*ns); !st.ok()) return st;
  if (options_.index_entries > 0) {
    LockFreeGets::MakeIndexFn make;
    if (maker_) {
      make = [maker = maker_.get()](uint64_t entries, std::string name,
                                    std::function<void(LockFreeGets::MadeIndex)> done) {
        maker->Run<LockFreeGets::MadeIndex>(
            [entries, name = std::move(name)] { return ObjectIndex::Create(entries, name); },
            std::move(done));
      };
    }
    auto gets = LockFreeGets::Create(
        options_.index_entries, std::max(options_.index_entries, options_.index_max_entries),
        options_.max_slots_per_user, prefix,
        [ns](const Location& f) {
          return f.size == 0 || !ns->SegmentOf(f.pool, f.segment).dedicated;
        },
        hooks_.post, std::move(make));
    if (!gets.ok()) return gets.status();
    ns->gets_ = std::move(*gets);
  }
  ns->table_ = std::make_unique<ObjectTable>(
      [this, ns](const StoredObject& o) {
        if (o.residence == Residence::kMemory) {
          for (const Location& f : o.frames()) {
            if (!(!o.evicted && f.size > 0 && hooks_.reclaim && hooks_.reclaim(*ns, o, f))) {
              ns->Free({&f, 1});
            }
          }
        }
        spill_.Forget(*ns, o);
        hooks_.freed(o);
      },
      WallClockNs);
  ns->table_->set_observer([this, ns](TableEvent e, const StoredObject& o, SessionId by) {
    kept_.Note(*ns, e, o);
    hooks_.event(*ns, e, o, by);
    if (!spill_.enabled()) return;
    if (e == TableEvent::kSealed) spill_.SpillAhead(*ns, Stats(0).used, host_budget_.capacity);
    if (e == TableEvent::kSealed || e == TableEvent::kDeleted || e == TableEvent::kEvicted) {
      spill_.NoteChange();
    }
  });
  ns->table_->set_slot_readers(ns->gets_.get());
  if (hooks_.post) ns->table_->set_post(hooks_.post);
  if (Status st = spill_.Attach(*ns, kept_.Adopting(key)); !st.ok()) return st;
  if (Status st = kept_.Attach(*ns); !st.ok()) return st;
  if (key != Namespace::kShared) spdlog::info("namespace of uid {} created", key);
  namespaces_.emplace(key, std::move(owned));
  return ns;
}

Status NamespaceSet::AddDevicePools(Namespace& ns) {
  for (size_t i = ns.pools_.size() - 1; i < devices_.size(); ++i) {
    auto n = static_cast<uint32_t>(i + 1);
    // A GPU's memory is scarcer: one empty chunk is kept there, whoever's it was.
    devices_.mutable_budget(i)->warm_limit = devices_.chunk_size();
    // An object of more than half a chunk gets a chunk of its own: a chunk is large.
    auto device = SegmentedPool::Create(
        std::make_unique<DeviceSource>(devices_.backend(), devices_.backend_index(i),
                                       devices_.device(i)),
        {.budget = devices_.mutable_budget(i),
         .segment_size = devices_.chunk_size(),
         .alignment = DeviceSource::kAlignment,
         .dedicated_divisor = 2,
         .prefault = false,
         .keeper = kept_.KeeperFor(ns.key(), n, devices_.device(i).uuid)},
        [this, ns = &ns, n](uint32_t id) { return hooks_.retired(*ns, n, id); });
    if (!device.ok()) return device.status();
    ns.pools_.push_back(std::move(*device));
  }
  return Status::OK();
}

void NamespaceSet::FindDevices() {
  if (!devices_.may_redetect() || !watch_) {
    spdlog::info("device pools: not looking again ({})", devices_.Summary());
    return;
  }
  watch_->LookNow();
}

void NamespaceSet::Found(Result<std::vector<DeviceInfo>> found, bool asked) {
  if (!devices_.may_redetect()) return;
  if (!devices_.Adopt(std::move(found))) {
    if (asked) spdlog::info("device pools: looked again, still {}", devices_.Summary());
    watch_->Start();  // ended if the backend found GPUs that are not to be pooled
    return;
  }
  spdlog::info("device pools: found on looking again: {}", devices_.Summary());
  for (auto& [key, ns] : namespaces_) {
    if (Status st = AddDevicePools(*ns); !st.ok()) {
      spdlog::error("device pools of namespace {}: {}", key, st.message());
    }
  }
}

void NamespaceSet::MaybeDrop(Namespace* ns) {
  const ObjectCounts& c = ns->table().counts();
  if (ns->key() == Namespace::kShared || ns->sessions > 0 ||
      c.creating + c.sealed + c.deleted > 0 || spill_.Busy(*ns)) {
    return;
  }
  spdlog::info("namespace of uid {} is empty; its segments are given back", ns->key());
  // Its evictions stay counted: they are counters since start, for status and metrics.
  evictions_dropped_ += c.evictions;
  evicted_bytes_dropped_ += c.evicted_bytes;
  spill_.Detach(*ns);
  kept_.Detach(*ns);
  namespaces_.erase(ns->key());
}

Result<std::vector<Location>> NamespaceSet::Allocate(Namespace& ns, std::span<const uint64_t> sizes,
                                                     std::span<const uint32_t> pools, SessionId by,
                                                     uid_t uid) {
  // Spares are taken back once per try: a failed try may itself leave a new empty segment
  // behind, and taking that back again would loop. Idle leases are taken back once, before any
  // object is evicted (their memory holds no object), and each eviction earns another try.
  bool take_spares = true;
  bool leases_taken = false;
  ObjectTable::EvictionBatch evictions(ns.table());  // a few reads of the slots, not one each
  while (true) {
    auto frames = ns.Allocate(sizes, pools, static_cast<uint32_t>(uid));
    if (frames.ok() || !frames.status().IsStoreFull()) return frames;
    if (take_spares) {
      take_spares = false;
      // Tried again even when nothing came back: what clients still map stays held, and the
      // refusal then says so.
      for (auto& [key, each] : namespaces_) each->ReleaseSpares();
      continue;
    }
    if (!leases_taken) {
      leases_taken = true;
      take_spares = hooks_.revoke_leases && hooks_.revoke_leases();
      if (take_spares) continue;
    }
    if (!options_.eviction || !ns.table().EvictLru(by)) return frames;
    take_spares = true;
  }
}

bool NamespaceSet::FreeUnpinned() {
  bool held = false;
  for (auto& [key, ns] : namespaces_) held |= ns->table().FreeUnpinned();
  return held;
}

uint64_t NamespaceSet::PinsMade() const {
  uint64_t made = 0;
  for (const auto& [key, ns] : namespaces_) made += ns->table().pins_made();
  return made;
}

PoolStats NamespaceSet::Stats(uint32_t pool) const {
  PoolStats total;
  for (const auto& [key, ns] : namespaces_) {
    PoolStats p = ns->pool(pool).stats();
    total.reserved += p.reserved;
    total.used += p.used;
    total.largest_free = std::max(total.largest_free, p.largest_free);
    total.free_in_segments += p.free_in_segments;
    total.largest_block = std::max(total.largest_block, p.largest_block);
    total.segments += p.segments;
    total.retired_held += p.retired_held;
  }
  if (namespaces_.empty() && pool == 0) {
    total.largest_free = host_budget_.capacity - host_budget_.reserved;
  }
  return total;
}

void NamespaceSet::Report(StoreStatus& st) const {
  PoolStats host = Stats(0);
  st.capacity = host_budget_.capacity;
  st.reserved = host.reserved;
  st.used = host.used;
  st.largest_free = host.largest_free;
  st.free_in_segments = host.free_in_segments;
  st.largest_free_block = host.largest_block;
  st.segments = host.segments;
  st.retired_held = host.retired_held;
  st.warm = host_budget_.warm;
  st.keep_warm = host_budget_.warm_limit;
  ObjectCounts c = Counts();
  st.objects_creating = c.creating;
  st.objects_sealed = c.sealed;
  st.objects_deleted = c.deleted;
  st.evictions = c.evictions;
  st.evicted_bytes = c.evicted_bytes;
  st.prefault = options_.host.prefault;
  st.per_user_namespaces = options_.per_user;
  st.namespaces = static_cast<uint32_t>(namespaces_.size());
  st.device_pools = DevicePools();
  st.spilled_objects = c.spilled;
  st.spilled_bytes = c.spilled_bytes;
  st.objects_lost = c.lost;
  for (const auto& [key, ns] : namespaces_) {
    if (ns->gets() == nullptr) continue;
    const ObjectIndex& index = ns->gets()->index();
    st.indexed += index.indexed();
    st.index_entries += index.entries();
    st.index_over_share += index.refused_over_share();
    st.index_taken_back += index.taken_back();
    st.index_left_out += index.left_out();
    st.index_growths += ns->gets()->generation() - 1;
    st.index_moving +=
        ns->gets()->moving() || ns->gets()->making() || ns->table().republishing() ? 1 : 0;
    st.slots_granted += ns->gets()->slots_granted();
    st.slot_grants_refused += ns->gets()->grants_refused();
    st.slot_reads += ns->gets()->slot_reads();
  }
  spill_.Report(st);
  kept_.Report(st);
}

std::vector<DevicePoolInfo> NamespaceSet::DevicePools() const {
  std::vector<DevicePoolInfo> pools;
  for (size_t i = 0; i < devices_.size(); ++i) {
    auto n = static_cast<uint32_t>(i + 1);
    PoolStats use = Stats(n);
    pools.push_back({.pool = n,
                     .uuid = devices_.device(i).uuid,
                     .name = devices_.device(i).name,
                     .kind = devices_.backend().kind(),
                     .capacity = devices_.budget(i).capacity,
                     .chunk_size = devices_.chunk_size(),
                     .reserved = devices_.budget(i).reserved,
                     .used = use.used,
                     .chunks = use.segments,
                     .retired_held = use.retired_held});
  }
  return pools;
}

std::vector<PoolReport> NamespaceSet::PoolReports() const {
  std::vector<PoolReport> pools;
  pools.push_back({"host", "host", Stats(0), host_budget_.peak_used});
  pools.back().stats.capacity = host_budget_.capacity;
  for (size_t i = 0; i < devices_.size(); ++i) {
    const PoolBudget& budget = devices_.budget(i);
    pools.push_back(
        {devices_.device(i).uuid, "device", Stats(static_cast<uint32_t>(i + 1)), budget.peak_used});
    pools.back().stats.capacity = budget.capacity;
  }
  if (spill_.enabled()) {
    // The spill directory as a pool of spill_capacity bytes, its files all used.
    StoreStatus st;
    spill_.Report(st);
    PoolStats disk{
        .capacity = st.spill_capacity,
        .reserved = st.spill_disk_bytes,
        .used = st.spill_disk_bytes,
        .largest_free = st.spill_capacity - std::min(st.spill_capacity, st.spill_disk_bytes)};
    pools.push_back({spill_.dir(), "disk", disk, 0});
  }
  return pools;
}

ObjectCounts NamespaceSet::Counts(bool slot_holds) const {
  ObjectCounts total;
  total.evictions = evictions_dropped_;
  total.evicted_bytes = evicted_bytes_dropped_;
  for (const auto& [key, ns] : namespaces_) {
    const ObjectCounts& n = ns->table().counts();
    total.creating += n.creating;
    total.sealed += n.sealed;
    total.deleted += n.deleted;
    total.creating_bytes += n.creating_bytes;
    total.sealed_bytes += n.sealed_bytes;
    total.deleted_bytes += n.deleted_bytes;
    total.evictable += n.evictable;
    total.evictable_bytes += n.evictable_bytes;
    total.evictions += n.evictions;
    total.evicted_bytes += n.evicted_bytes;
    total.spilled += n.spilled;
    total.spilled_bytes += n.spilled_bytes;
    total.lost += n.lost;
    // An evictable object a reference slot holds is referenced too: eviction passes over it.
    // The slots are read on demand, rather than counted as clients write them, and at most once
    // per kSlotHoldsAge: a read costs a lookup for every slot of every session.
    if (!slot_holds || n.evictable == 0 || ns->gets() == nullptr) continue;
    for (ObjectId id : SlotHeldEvictable(key, *ns)) {
      const StoredObject* o = ns->table().Get(id);
      if (o == nullptr || !o->in_lru || !o->evictable) continue;
      --total.evictable;
      total.evictable_bytes -= o->size();
    }
  }
  return total;
}

const std::vector<ObjectId>& NamespaceSet::SlotHeldEvictable(uint32_t key,
                                                             const Namespace& ns) const {
  auto now = std::chrono::steady_clock::now();
  if (now - slot_holds_.read >= kSlotHoldsAge) slot_holds_ = {.read = now, .held = {}};
  auto [it, fresh] = slot_holds_.held.try_emplace(key);
  if (!fresh) return it->second;
  std::vector<ObjectId>& held = it->second;
  const ObjectTable& table = ns.table();
  // Only ids that name an evictable object are kept: garbage in the slots is looked up, never
  // collected.
  ns.gets()->ForEachHeld([&](ObjectId id) {
    const StoredObject* o = table.Get(id);
    if (o != nullptr && o->in_lru && o->evictable) held.push_back(id);
  });
  std::sort(held.begin(), held.end());
  held.erase(std::unique(held.begin(), held.end()), held.end());
  return held;
}

}  // namespace depot
