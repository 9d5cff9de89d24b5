#include "daemon/namespace_set.h"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/wall_clock.h"
#include "daemon/device_source.h"
#include "daemon/shm_source.h"

namespace depot {

NamespaceSet::NamespaceSet(NamespaceOptions options, DeviceSet& devices, NamespaceHooks hooks)
    : options_(std::move(options)), devices_(devices), hooks_(std::move(hooks)) {
  host_budget_.capacity = ShmSource::UsableCapacity(options_.host.capacity);
  host_budget_.warm_limit = std::min(options_.host.keep_warm, host_budget_.capacity);
  // A GPU's memory is scarcer: one empty chunk is kept there, whoever's it was.
  for (size_t i = 0; i < devices_.size(); ++i) {
    devices_.mutable_budget(i)->warm_limit = devices_.chunk_size();
  }
  if (hooks_.post) maker_ = std::make_unique<SegmentMaker>(hooks_.post);
}

Result<Namespace*> NamespaceSet::For(uid_t uid) {
  uint32_t key = options_.per_user ? static_cast<uint32_t>(uid) : Namespace::kShared;
  if (auto it = namespaces_.find(key); it != namespaces_.end()) return it->second.get();
  auto owned = std::make_unique<Namespace>(key);
  Namespace* ns = owned.get();
  std::string prefix = options_.host.name_prefix;
  if (key != Namespace::kShared) prefix += fmt::format("u{}-", key);
  auto retire = [this, ns](uint32_t n) {
    return [this, ns, n](uint32_t id) { hooks_.retired(*ns, n, id); };
  };
  auto host = SegmentedPool::Create(std::make_unique<ShmSource>(prefix, maker_.get()),
                                    {.budget = &host_budget_,
                                     .segment_size = options_.host.segment_size,
                                     .prefault = options_.host.prefault,
                                     .reuse_large = true},
                                    retire(0));
  if (!host.ok()) return host.status();
  ns->pools_.push_back(std::move(*host));
  for (size_t i = 0; i < devices_.size(); ++i) {
    // An object of more than half a chunk gets a chunk of its own: a chunk is large.
    auto device = SegmentedPool::Create(
        std::make_unique<DeviceSource>(devices_.backend(), devices_.backend_index(i),
                                       devices_.device(i)),
        {.budget = devices_.mutable_budget(i),
         .segment_size = devices_.chunk_size(),
         .alignment = DeviceSource::kAlignment,
         .dedicated_divisor = 2,
         .prefault = false},
        retire(static_cast<uint32_t>(i + 1)));
    if (!device.ok()) return device.status();
    ns->pools_.push_back(std::move(*device));
  }
  ns->table_ = std::make_unique<ObjectTable>(
      [this, ns](const StoredObject& o) {
        ns->Free(o.frames());
        hooks_.freed(o);
      },
      WallClockNs);
  ns->table_->set_observer([this, ns](TableEvent e, const StoredObject& o, SessionId by) {
    hooks_.event(*ns, e, o, by);
  });
  if (key != Namespace::kShared) spdlog::info("namespace of uid {} created", key);
  namespaces_.emplace(key, std::move(owned));
  return ns;
}

void NamespaceSet::MaybeDrop(Namespace* ns) {
  const ObjectCounts& c = ns->table().counts();
  if (ns->key() == Namespace::kShared || ns->sessions > 0 ||
      c.creating + c.sealed + c.deleted > 0) {
    return;
  }
  spdlog::info("namespace of uid {} is empty; its segments are given back", ns->key());
  namespaces_.erase(ns->key());
}

Result<std::vector<Location>> NamespaceSet::Allocate(Namespace& ns, std::span<const uint64_t> sizes,
                                                     std::span<const uint32_t> pools, SessionId by,
                                                     uid_t uid) {
  // Spares are taken back once per try: a failed try may itself leave a new empty segment
  // behind, and taking that back again would loop. Each eviction earns another try.
  bool take_spares = true;
  while (true) {
    auto frames = ns.Allocate(sizes, pools, static_cast<uint32_t>(uid));
    if (frames.ok() || !frames.status().IsStoreFull()) return frames;
    if (take_spares) {
      take_spares = false;
      uint64_t released = 0;
      for (auto& [key, each] : namespaces_) released += each->ReleaseSpares();
      if (released > 0) continue;
    }
    if (!options_.eviction || !ns.table().EvictLru(by)) return frames;
    take_spares = true;
  }
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
                     .chunks = use.segments});
  }
  return pools;
}

ObjectCounts NamespaceSet::Counts() const {
  ObjectCounts total;
  for (const auto& [key, ns] : namespaces_) {
    const ObjectCounts& n = ns->table().counts();
    total.creating += n.creating;
    total.sealed += n.sealed;
    total.deleted += n.deleted;
    total.evictions += n.evictions;
    total.evicted_bytes += n.evicted_bytes;
  }
  return total;
}

}  // namespace depot
