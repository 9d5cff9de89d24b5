// Namespace is one set of objects and the memory they live in: an object table and one pool per
// memory (pool 0 the host, pool n device n). The daemon has one shared namespace, or one per
// user (`namespaces = per_user`), in which case a GUID names different objects for different
// users and a session is never sent a descriptor of another namespace's segment.
//
// Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_NAMESPACE_H_
#define DEPOT_DAEMON_NAMESPACE_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "daemon/lock_free_gets.h"
#include "daemon/object_table.h"
#include "daemon/segmented_pool.h"

namespace depot {

// A host segment or device chunk that a live object's frame names.
struct SegmentRef {
  int fd;            // read-write: for creators of objects in it (all of its owner's uid)
  int read_only_fd;  // for readers
  uint64_t size;
  bool dedicated;
};

class Namespace {
 public:
  static constexpr uint32_t kShared = UINT32_MAX;

  // Its pools and table are made by NamespaceSet, since they call back naming the namespace.
  explicit Namespace(uint32_t key) : key_(key) {}
  Namespace(const Namespace&) = delete;
  Namespace& operator=(const Namespace&) = delete;

  // The owner's uid, or kShared.
  uint32_t key() const { return key_; }
  ObjectTable& table() { return *table_; }
  const ObjectTable& table() const { return *table_; }
  // Pool 0 is the host's; pool n is device pool n.
  const SegmentedPool& pool(uint32_t n) const { return *pools_[n]; }
  SegmentedPool& pool(uint32_t n) { return *pools_.at(n); }
  SegmentedPool& host_pool() { return *pools_[0]; }
  uint32_t pools() const { return static_cast<uint32_t>(pools_.size()); }
  // Its shared index and its sessions' reference slots; null when the index is off.
  LockFreeGets* gets() { return gets_.get(); }
  const LockFreeGets* gets() const { return gets_.get(); }

  // Allocates every frame (size 0 takes no memory) in pool `pools[i]` (empty: all on the host),
  // in segments of `owner` (the creator's uid), all or nothing. StoreFull from the pool that had
  // no room.
  Result<std::vector<Location>> Allocate(std::span<const uint64_t> sizes,
                                         std::span<const uint32_t> pools, uint32_t owner);
  void Free(std::span<const Location> frames);
  // Cuts an allocated block in two (see SegmentedPool::Split).
  Result<Location> Split(Location& block, uint64_t head) {
    return pools_.at(block.pool)->Split(block, head);
  }

  // Writes `data` (the frames' bytes back to back) into host frames: the small objects that
  // arrive inside a create request.
  Status WriteInline(std::span<const Location> frames, std::span<const uint8_t> data);

  // The bytes of a host frame, in the daemon's own mapping of its segment (valid while the
  // frame is allocated).
  Result<std::span<uint8_t>> HostBytes(const Location& frame);

  // The segment or chunk a live object's frame names.
  SegmentRef SegmentOf(uint32_t pool, uint32_t id) const;

  // Every client that mapped retired segment `id` of pool `pool` has dropped it (see
  // SegmentedPool::Dropped).
  void Dropped(uint32_t pool, uint32_t id) { pools_.at(pool)->Dropped(id); }

  // Gives back every pool's empty spare segments; returns how many bytes went back.
  uint64_t ReleaseSpares();

  // Sessions of this namespace that are connected.
  size_t sessions = 0;

 private:
  friend class NamespaceSet;

  uint32_t key_;
  std::vector<std::unique_ptr<SegmentedPool>> pools_;
  std::unique_ptr<LockFreeGets> gets_;  // before the table, which points at it
  std::unique_ptr<ObjectTable> table_;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_NAMESPACE_H_
