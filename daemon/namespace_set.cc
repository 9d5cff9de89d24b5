#include "daemon/namespace_set.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace depot {
namespace {

int64_t WallClockNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

NamespaceSet::NamespaceSet(NamespaceOptions options, DeviceSet& devices, NamespaceHooks hooks)
    : options_(std::move(options)), devices_(devices), hooks_(std::move(hooks)) {
  host_budget_.capacity = HostPool::UsableCapacity(options_.host.capacity);
  options_.host.budget = &host_budget_;
}

Result<Namespace*> NamespaceSet::For(uid_t uid) {
  uint32_t key = options_.per_user ? static_cast<uint32_t>(uid) : Namespace::kShared;
  if (auto it = namespaces_.find(key); it != namespaces_.end()) return it->second.get();
  auto owned = std::make_unique<Namespace>(key);
  Namespace* ns = owned.get();
  HostPoolOptions po = options_.host;
  if (key != Namespace::kShared) po.name_prefix += fmt::format("u{}-", key);
  auto host = HostPool::Create(po, [this, ns](uint32_t id) { hooks_.retired(*ns, 0, id); });
  if (!host.ok()) return host.status();
  ns->host_ = std::move(*host);
  for (size_t i = 0; i < devices_.size(); ++i) {
    auto n = static_cast<uint32_t>(i + 1);
    ns->devices_.push_back(std::make_unique<DevicePool>(
        devices_.backend(), devices_.backend_index(i), devices_.device(i), devices_.chunk_size(),
        devices_.budget(i), [this, ns, n](uint32_t id) { hooks_.retired(*ns, n, id); }));
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
                                                     std::span<const uint32_t> pools,
                                                     SessionId by) {
  while (true) {
    auto frames = ns.Allocate(sizes, pools);
    if (frames.ok() || !frames.status().IsStoreFull()) return frames;
    // Other namespaces' spare segments go before this namespace's evictable objects.
    uint64_t released = 0;
    for (auto& [key, other] : namespaces_) {
      if (other.get() != &ns) released += other->ReleaseSpares();
    }
    if (released == 0 && (!options_.eviction || !ns.table().EvictLru(by))) return frames;
  }
}

HostPoolStats NamespaceSet::HostStats() const {
  HostPoolStats total;
  for (const auto& [key, ns] : namespaces_) {
    HostPoolStats p = ns->host().stats();
    total.reserved += p.reserved;
    total.used += p.used;
    total.largest_free = std::max(total.largest_free, p.largest_free);
    total.free_in_segments += p.free_in_segments;
    total.largest_block = std::max(total.largest_block, p.largest_block);
    total.segments += p.segments;
  }
  if (namespaces_.empty()) total.largest_free = host_budget_.capacity - host_budget_.reserved;
  return total;
}

DevicePool::Stats NamespaceSet::DeviceStats(size_t device) const {
  DevicePool::Stats total;
  for (const auto& [key, ns] : namespaces_) {
    DevicePool::Stats s = ns->device(device).stats();
    total.used += s.used;
    total.chunks += s.chunks;
  }
  return total;
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
