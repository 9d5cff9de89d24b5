// NamespaceSet holds the daemon's namespaces: the shared one, or one per user made on first use
// and dropped once it has neither sessions nor objects. All namespaces draw on one host budget
// (the capacity) and on each GPU's budget, so allocation is where they meet: a namespace short
// of space first takes back the empty segments kept warm (its own and the other namespaces'),
// then evicts its own least recently used evictable objects. With spilling on, its SpillStore
// writes non-evictable ones to disk when that is not enough (see SpillStore). Every namespace has
// a pool on each GPU of the DeviceSet; when the set found none, a DeviceWatch looks again on a
// thread of its own, and at once on SIGHUP (FindDevices).
//
// Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_NAMESPACE_SET_H_
#define DEPOT_DAEMON_NAMESPACE_SET_H_

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "daemon/device_set.h"
#include "daemon/device_watch.h"
#include "daemon/kept_memory.h"
#include "daemon/namespace.h"
#include "daemon/segment_maker.h"
#include "daemon/spill_store.h"
#include "depot/device_pool_info.h"
#include "depot/store_status.h"

namespace depot {

// The host memory of the whole daemon.
struct HostMemoryOptions {
  uint64_t capacity = 0;
  uint64_t segment_size = 0;  // larger objects go to segments of large objects
  bool prefault = false;      // reserve the whole capacity at start-up and keep it
  bool hugepages = false;     // segments on 2 MiB pages where the kernel gives them
  // Bytes of empty segments kept warm for the next objects (at most the capacity).
  uint64_t keep_warm = uint64_t{2} << 30;
  std::string name_prefix;  // segment names are name_prefix + id, e.g. "depot-1000-ab12cd-7"
};

struct NamespaceOptions {
  HostMemoryOptions host;
  bool per_user = false;            // each uid gets a namespace of its own
  bool eviction = false;            // evict LRU evictable objects when full
  uint64_t index_entries = 0;       // entries of each namespace's shared index (0: no index)
  uint64_t index_max_entries = 0;   // ... up to which it grows
  uint64_t max_slots_per_user = 0;  // reference slots past the first 1024 of each session
  SpillOptions spill;
  // Host memory kept across restarts in systemd's descriptor store (KeptMemory), and how long
  // adopted segments stay closed to new objects.
  bool keep_memory = false;
  std::chrono::milliseconds restart_grace{30000};
};

// What the rest of the daemon hears from its namespaces.
struct NamespaceHooks {
  // A segment (pool 0) or chunk was given back: clients must unmap it. Returns whether some
  // client may still map it; then its pool holds it until Namespace::Dropped.
  std::function<bool(const Namespace&, uint32_t pool, uint32_t id)> retired;
  // A frame of an object in memory that was deleted (not evicted) is about to be freed: whether
  // its creator's lease takes the block back (it then stays allocated) instead of its pool.
  std::function<bool(Namespace&, const StoredObject&, const Location&)> reclaim;
  // Memory is short: takes back the leases of host memory that clients left idle. Whether it
  // freed any.
  std::function<bool()> revoke_leases;
  // An object's memory was freed (its frames are already back in their pools, or taken back).
  std::function<void(const StoredObject&)> freed;
  // An object table transition (see ObjectTable::EventFn).
  std::function<void(const Namespace&, TableEvent, const StoredObject&, SessionId by)> event;
  // A restore from disk ended (see SpillStore::Hooks::restored).
  std::function<void(Namespace&, const Guid&, const Status&)> restored;
  // Runs a function on the daemon's loop. When set, host segments are made ahead of need on a
  // helper thread (see SegmentMaker) and handed back through it.
  std::function<void(std::function<void()>)> post;
};

class NamespaceSet {
 public:
  NamespaceSet(boost::asio::io_context& io, NamespaceOptions options, DeviceSet& devices,
               NamespaceHooks hooks);
  ~NamespaceSet();  // stops the watch
  NamespaceSet(const NamespaceSet&) = delete;
  NamespaceSet& operator=(const NamespaceSet&) = delete;

  // The namespace of user `uid` (the shared one unless per_user), made on first use (with
  // prefault, the shared one reserves the whole capacity then).
  Result<Namespace*> For(uid_t uid);

  // When the daemon has no GPU and could have one, has the watch look for them at once (SIGHUP);
  // the answer comes to Found. Otherwise logs that it does not look.
  void FindDevices();

  // Forgets a per-user namespace left without sessions or objects (its segments go back).
  void MaybeDrop(Namespace* ns);

  // Allocates every frame in `ns` for session `by` of user `uid` (in segments of that uid's
  // own), taking back spare segments (every uid's, in every namespace), then idle leases
  // (NamespaceHooks::revoke_leases), and then evicting `ns`'s least recently used evictable
  // objects while that helps.
  Result<std::vector<Location>> Allocate(Namespace& ns, std::span<const uint64_t> sizes,
                                         std::span<const uint32_t> pools, SessionId by, uid_t uid);

  // Frees, in every namespace, the deleted objects that only reference slots held and none holds
  // now; whether some are still held.
  bool FreeUnpinned();

  // Opens the spill directory and makes every namespace that has objects on disk (each adopts
  // them). The directory's error when it cannot be used.
  Status LoadSpilled();
  // At a clean stop, every session closed: writes every object still in memory to disk.
  void Persist();
  // Adopts the memory a previous daemon kept (see KeptMemory; kept().Take has read its names),
  // before anything is served.
  AdoptionReport AdoptKept(const proto::ObjectLimits& limits);
  KeptMemory& kept() { return kept_; }
  const KeptMemory& kept() const { return kept_; }
  // The disk behind the host pools: MakeRoom for creates, Acquire for gets.
  SpillStore& spill() { return spill_; }
  const SpillStore& spill() const { return spill_; }

  const PoolBudget& host_budget() const { return host_budget_; }
  size_t size() const { return namespaces_.size(); }
  // Every object of every namespace, in no particular order.
  void ForEachObject(const std::function<void(const StoredObject&)>& fn) const;

  // Adds the totals over every namespace to a status: pools, objects, device pools.
  void Report(StoreStatus& status) const;
  // Every device pool: its GPU, its budget and its use.
  std::vector<DevicePoolInfo> DevicePools() const;
  // Every pool for metrics: the host, then each GPU.
  std::vector<PoolReport> PoolReports() const;
  // Objects by state and evictions, totalled over every namespace. With `slot_holds` (metrics),
  // an evictable object a reference slot holds counts as not evictable, as eviction passes over
  // it: as the slots were at a read at most kSlotHoldsAge old (docs/design.md, "Gets without a
  // round trip"), so that no caller can make each call a read of every slot.
  ObjectCounts Counts(bool slot_holds = false) const;
  // Objects that came to wait for reference slots only, ever, over every namespace (see
  // ObjectTable::pins_made).
  uint64_t PinsMade() const;

 private:
  // A look of the watch: gives every namespace a pool on each GPU found. Logs what it found (an
  // unchanged failure only when the look was `asked` for).
  void Found(Result<std::vector<DeviceInfo>> found, bool asked);

  // Makes `ns`'s pools on the GPUs it has none on yet.
  Status AddDevicePools(Namespace& ns);
  // Totals over every namespace.
  PoolStats Stats(uint32_t pool) const;
  // The evictable objects of `ns` that its reference slots hold, as of slot_holds_.
  const std::vector<ObjectId>& SlotHeldEvictable(uint32_t key, const Namespace& ns) const;

  static constexpr std::chrono::seconds kSlotHoldsAge{1};
  // What the slots held at the last read, by namespace: the evictable objects they held then,
  // sorted. Checked again against the table at each use (one may be gone or held otherwise).
  struct SlotHolds {
    std::chrono::steady_clock::time_point read;
    std::map<uint32_t, std::vector<ObjectId>> held;
  };
  mutable SlotHolds slot_holds_;
  NamespaceOptions options_;
  DeviceSet& devices_;
  NamespaceHooks hooks_;
  PoolBudget host_budget_;
  std::unique_ptr<SegmentMaker> maker_;  // before the namespaces, whose pools use it
  KeptMemory kept_;                      // before the namespaces, whose pools tell it
  std::map<uint32_t, std::unique_ptr<Namespace>> namespaces_;
  // Evictions of the namespaces dropped so far.
  uint64_t evictions_dropped_ = 0;
  uint64_t evicted_bytes_dropped_ = 0;
  std::unique_ptr<DeviceWatch> watch_;  // while the set has no GPU and could have some
  SpillStore spill_;  // declared last: its I/O threads end before the namespaces go
};

}  // namespace depot

#endif  // DEPOT_DAEMON_NAMESPACE_SET_H_
