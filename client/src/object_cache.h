// internal::ObjectCache is the local object cache: the objects this process holds, by GUID, so
// that a get of one it already holds costs no round trip. It remembers each Holding without
// keeping it alive, and forgets it when the holding's last Object goes.
//
// Thread-safe: one mutex guards the table (HoldingTable).
#ifndef DEPOT_CLIENT_SRC_OBJECT_CACHE_H_
#define DEPOT_CLIENT_SRC_OBJECT_CACHE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "client/src/holding_table.h"
#include "client/src/segment_map.h"
#include "depot/guid.h"
#include "depot/object.h"

namespace depot::internal {

class Connection;

// What an Object points at: one reference on the daemon (a handle), or one reference slot (an
// object taken from the shared index), let go when the last Object goes.
struct Holding {
  std::shared_ptr<Connection> conn;
  Guid guid;
  uint64_t handle = 0;
  std::optional<uint32_t> slot;  // the reference slot that holds it, instead of a handle
  bool by_guid = false;  // got from the put ring: the daemon's reference is released by GUID
  FrameViews frames;
  std::vector<std::byte> metadata;
  std::optional<uint64_t> checksum;
  uint32_t creator_uid = 0;
  int32_t creator_pid = 0;
  std::vector<Place> places;  // empty: every frame on the host
  SegmentUses segment_uses;
  uint64_t size = 0;
  // A reconnect named it (Link::Carry), and the daemon it found holds it for the connection now
  // (`carried`: released by GUID through that connection when this goes) or does not have it.
  // Guarded by the Link's mutex.
  bool named = false;
  bool carried = false;
  // Provided, so that making one (std::allocate_shared value-initializes it) runs the member
  // initializers above and nothing else: the implicit constructor first zeroed the whole object.
  Holding() {}  // NOLINT(modernize-use-equals-default): `= default` brings the zeroing back
  ~Holding();   // hands the reference back, or clears the slot (Connection::Forget)
};

class ObjectCache {
 public:
  // The holding of `guid` while an Object still holds it; null otherwise. Inline: a get of an
  // object this process holds is this lookup and nothing more.
  std::shared_ptr<Holding> Find(const Guid& guid) {
    std::lock_guard lk(mu_);
    // The entry's line loads beside the tags': a get that finds nothing remembers what it got
    // there next (Remember), and a get that finds it reads it.
    entries_.PrefetchEntry(guid);
    const HoldingTable::Entry* e = entries_.Find(guid);
    return e != nullptr ? e->holding.lock() : nullptr;
  }
  // Find for each of `guids`, under one lock: found[i] is guids[i]'s holding or null.
  void FindMany(std::span<const Guid> guids, std::span<std::shared_ptr<Holding>> found);
  // Remembers `h` as the holding of its GUID.
  void Remember(const std::shared_ptr<Holding>& h);
  // Remember for each of `holdings`, under one lock.
  void RememberMany(std::span<const std::shared_ptr<Holding>> holdings);
  // `h`'s last Object is gone: forgets it, unless a newer holding of its GUID took its place.
  void Forget(const Holding& h);
  // Every holding still held, each kept alive by the result: also those no longer found by GUID
  // (deleted, or replaced by a newer holding of their GUID), whose Objects still map them.
  std::vector<std::shared_ptr<Holding>> All();
  bool empty();
  // This process deleted `guid`: a get or contains of it must ask the daemon again, and find it
  // gone. The Objects that hold it keep their bytes.
  void Deleted(const Guid& guid);

 private:
  // Keeps `h`, no longer found by GUID, for All (with mu_ held); forgets the expired ones each
  // time their number doubles.
  void SetAside(std::weak_ptr<Holding> h);

  std::mutex mu_;
  HoldingTable entries_;
  std::vector<std::weak_ptr<Holding>> aside_;
  size_t aside_pruned_ = 0;  // aside_'s size after its last pruning
};

}  // namespace depot::internal

#endif  // DEPOT_CLIENT_SRC_OBJECT_CACHE_H_
