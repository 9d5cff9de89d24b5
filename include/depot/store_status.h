// StoreStatus: the daemon's status and counters (Client::GetStatus, `depotctl status`, the
// Python client's status()).
//
// Its scalar fields are described once, in DEPOT_STORE_STATUS_SCALARS below; that list declares
// the members and is what the daemon's reply builder, the client's reading of the reply, the
// Python dict and `depotctl --json` all walk, so a field added to it reaches every one of them.
// Each name is also the name of the field in the wire table StatusReply (proto/depot.fbs),
// which must say the same type. The fields that are not scalars are declared by hand below.
#ifndef DEPOT_STORE_STATUS_H_
#define DEPOT_STORE_STATUS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "depot/device_pool_info.h"

// X(name, type, group, key, meaning), one row per scalar field. `group` is the part of the store
// the field describes ("" for the daemon as a whole) and `key` its name within that part:
// `depotctl --json` nests the fields by group under those keys.
#define DEPOT_STORE_STATUS_SCALARS(X)                                                             \
  X(daemon_pid, int32_t, "", "daemon_pid", "the daemon's process id")                             \
  X(uptime_ms, uint64_t, "", "uptime_ms", "milliseconds since the daemon started")                \
  X(capacity, uint64_t, "host_pool", "capacity", "bytes of shared memory the host pool may hold") \
  X(reserved, uint64_t, "host_pool", "reserved", "bytes of shared memory held in segments")       \
  X(used, uint64_t, "host_pool", "used", "bytes allocated to objects")                            \
  X(largest_free, uint64_t, "host_pool", "largest_free",                                          \
    "the largest object that fits without eviction")                                              \
  X(largest_free_block, uint64_t, "host_pool", "largest_free_block",                              \
    "the largest free block inside the segments that exist now")                                  \
  X(segments, uint32_t, "host_pool", "segments", "shared-memory segments that exist now")         \
  X(prefault, bool, "host_pool", "prefault", "the whole capacity was reserved at start-up")       \
  X(free_in_segments, uint64_t, "host_pool", "free_in_segments",                                  \
    "free bytes inside the segments that exist now")                                              \
  X(retired_held, uint64_t, "host_pool", "retired_held",                                          \
    "bytes of retired segments that clients still map, counted until they unmap them")            \
  X(warm, uint64_t, "host_pool", "warm",                                                          \
    "bytes of empty segments kept, mapped and faulted in, for the next objects")                  \
  X(keep_warm, uint64_t, "host_pool", "keep_warm", "the most bytes of empty segments kept")       \
  X(objects_creating, uint64_t, "objects", "creating", "objects being written, not sealed yet")   \
  X(objects_sealed, uint64_t, "objects", "sealed", "sealed objects")                              \
  X(objects_deleted, uint64_t, "objects", "deleted", "deleted objects still referenced")          \
  X(clients, uint32_t, "", "clients", "connections open now")                                     \
  X(connections, uint64_t, "", "connections", "connections accepted since start")                 \
  X(gets_waiting, uint32_t, "", "gets_waiting", "gets parked until their objects are sealed")     \
  X(evictions, uint64_t, "", "evictions", "evictable objects dropped to make room")               \
  X(evicted_bytes, uint64_t, "", "evicted_bytes", "bytes those evictions gave back")              \
  X(requests, uint64_t, "", "requests", "requests answered since start")                          \
  X(per_user_namespaces, bool, "namespaces", "per_user",                                          \
    "each user has objects and segments of its own")                                              \
  X(namespaces, uint32_t, "namespaces", "count", "namespaces that exist now")                     \
  X(user_quota_bytes, uint64_t, "quotas", "user_bytes", "bytes one user may hold; 0: no limit")   \
  X(user_quota_objects, uint64_t, "quotas", "user_objects",                                       \
    "objects one user may hold; 0: no limit")                                                     \
  X(client_quota_bytes, uint64_t, "quotas", "client_bytes",                                       \
    "bytes one connection may hold; 0: no limit")                                                 \
  X(client_quota_objects, uint64_t, "quotas", "client_objects",                                   \
    "objects one connection may hold; 0: no limit")                                               \
  X(spill_capacity, uint64_t, "spill", "capacity",                                                \
    "bytes of spill files allowed; 0: spilling is off")                                           \
  X(spill_disk_bytes, uint64_t, "spill", "disk_bytes", "bytes of spill files now")                \
  X(spilled_objects, uint64_t, "spill", "objects", "objects on disk only now")                    \
  X(spilled_bytes, uint64_t, "spill", "bytes", "bytes of the objects on disk only")               \
  X(spills, uint64_t, "spill", "spills", "objects written to disk since start")                   \
  X(spill_bytes, uint64_t, "spill", "spill_bytes", "bytes of the objects written to disk")        \
  X(spill_ms, uint64_t, "spill", "spill_ms", "milliseconds the I/O threads spent writing them")   \
  X(restores, uint64_t, "spill", "restores", "objects read back from disk since start")           \
  X(restore_bytes, uint64_t, "spill", "restore_bytes", "bytes of the objects read back")          \
  X(restore_ms, uint64_t, "spill", "restore_ms",                                                  \
    "milliseconds the I/O threads spent reading them")                                            \
  X(spill_failures, uint64_t, "spill", "failures",                                                \
    "spills that failed: a full disk, an I/O error")                                              \
  X(objects_lost, uint64_t, "spill", "lost", "objects whose spill file could not be read back")   \
  X(leased, uint64_t, "host_pool", "leased",                                                      \
    "bytes leased to clients for puts, with blocks handed back, not used yet")                    \
  X(leases_revoked, uint64_t, "host_pool", "leases_revoked",                                      \
    "idle leases taken back because memory ran short, since start")                               \
  X(pending_guids, uint64_t, "limits", "pending_guids", "GUIDs the gets waiting name")            \
  X(pending_guids_top_user, uint64_t, "limits", "pending_guids_top_user",                         \
    "GUIDs the gets waiting of the user with the most name")                                      \
  X(max_pending_guids, uint32_t, "limits", "max_pending_guids",                                   \
    "GUIDs the gets waiting of one connection may name")                                          \
  X(max_pending_guids_per_user, uint32_t, "limits", "max_pending_guids_per_user",                 \
    "GUIDs the gets waiting of one user may name")                                                \
  X(parked_create_bytes, uint64_t, "limits", "parked_create_bytes",                               \
    "bytes of creates waiting for objects to be written to disk")                                 \
  X(parked_create_bytes_top_user, uint64_t, "limits", "parked_create_bytes_top_user",             \
    "bytes of such creates of the user with the most")                                            \
  X(max_parked_bytes_per_user, uint64_t, "limits", "max_parked_bytes_per_user",                   \
    "bytes of such creates one user may have")                                                    \
  X(sessions_top_user, uint32_t, "limits", "sessions_top_user",                                   \
    "connections of the user with the most")                                                      \
  X(max_sessions_per_user, uint32_t, "limits", "max_sessions_per_user",                           \
    "connections one user may have (the daemon's own user: any number)")                          \
  X(handshakes_top_user, uint32_t, "limits", "handshakes_top_user",                               \
    "connections yet to say hello of the user with the most")                                     \
  X(max_handshakes_per_user, uint32_t, "limits", "max_handshakes_per_user",                       \
    "connections yet to say hello one user may have")                                             \
  X(handshakes_refused, uint64_t, "limits", "handshakes_refused",                                 \
    "connections refused since start: their user had max_handshakes_per_user yet to say hello")   \
  X(references_top_user, uint64_t, "limits", "references_top_user",                               \
    "objects held through depotd by the user with the most")                                      \
  X(max_references_per_user, uint64_t, "limits", "max_references_per_user",                       \
    "objects one user's connections may hold through depotd")                                     \
  X(references_refused, uint64_t, "limits", "references_refused",                                 \
    "references refused since start: their user held max_references_per_user")                    \
  X(indexed, uint64_t, "index", "indexed", "objects in the shared indexes now")                   \
  X(index_entries, uint64_t, "index", "entries", "entries of the shared indexes")                 \
  X(index_over_share, uint64_t, "index", "over_share",                                            \
    "objects left out of an index since start: their user had its equal part of it")              \
  X(index_taken_back, uint64_t, "index", "taken_back",                                            \
    "entries taken back since start from a user over its part, for another user's object")        \
  X(index_left_out, uint64_t, "index", "left_out",                                                \
    "objects left out of an index since start: their set or the records were full")               \
  X(index_growths, uint64_t, "index", "growths",                                                  \
    "times since start an index moved to one twice as big")                                       \
  X(index_moving, uint32_t, "index", "moving",                                                    \
    "indexes moving to one twice as big now (gets go on through the old one until it ends)")      \
  X(slots_granted, uint64_t, "index", "slots_granted",                                            \
    "reference slots granted now past the first 1024 of each connection")                         \
  X(slot_grants_refused, uint64_t, "index", "slot_grants_refused",                                \
    "asks for more reference slots refused since start (the user's part spent)")                  \
  X(slot_reads, uint64_t, "index", "slot_reads",                                                  \
    "reads of every connection's slots since start, for objects leaving memory")                  \
  X(max_slots_per_user, uint64_t, "limits", "max_slots_per_user",                                 \
    "reference slots one user may be granted past the first 1024 of each connection")             \
  X(keep_memory, bool, "kept", "on",                                                              \
    "memory (host segments, device chunks) is kept in systemd's store across restarts")           \
  X(kept_descriptors, uint64_t, "kept", "descriptors", "descriptors handed to that store now")    \
  X(adopted_objects, uint64_t, "kept", "adopted_objects",                                         \
    "objects served again at start from the memory the last daemon kept")                         \
  X(adopted_bytes, uint64_t, "kept", "adopted_bytes", "bytes of those objects")                   \
  X(adoption_dropped, uint64_t, "kept", "dropped",                                                \
    "kept entries dropped at start: torn, or not matching the kept segments")                     \
  X(adoption_refused, uint64_t, "kept", "refused",                                                \
    "kept catalogs refused whole at start (another format version)")                              \
  X(adoption_us, uint64_t, "kept", "adoption_us", "microseconds the adoption at start took")      \
  X(kept_closed_bytes, uint64_t, "kept", "closed_bytes",                                          \
    "bytes of adopted segments taking no new objects until the grace period ends")                \
  X(grace_waiting, uint64_t, "kept", "grace_waiting",                                             \
    "sessions of the last daemon the grace period still waits for (their process's exit or "      \
    "resume)")                                                                                    \
  X(grace_resumed, uint64_t, "kept", "grace_resumed",                                             \
    "sessions of the last daemon that their processes resumed after the start")

namespace depot {

// What DEPOT_STORE_STATUS_SCALARS says about one field, for code that walks them all.
struct StoreStatusField {
  std::string_view name;
  std::string_view group;
  std::string_view key;
  std::string_view meaning;
};

// A snapshot of the daemon's status, totalled over every namespace. A plain value.
struct StoreStatus {
  std::string daemon_version;
  std::string socket_path;
#define DEPOT_STORE_STATUS_MEMBER(name, type, group, key, meaning) type name{};
  DEPOT_STORE_STATUS_SCALARS(DEPOT_STORE_STATUS_MEMBER)
#undef DEPOT_STORE_STATUS_MEMBER
  std::vector<uint64_t> errors;  // error replies since start, indexed by Status::Code

  // What each user has created and not freed yet, against the quotas (0: no limit).
  struct UserUsage {
    uint32_t uid = 0;
    uint64_t objects = 0;
    uint64_t bytes = 0;

    bool operator==(const UserUsage&) const = default;
  };
  std::vector<UserUsage> users;  // every user with objects
  std::vector<DevicePoolInfo> device_pools;
  std::string devices_unavailable;  // why there are no device pools, when there are none

  // 0 when the free space inside the segments is one block, towards 1 as it splinters.
  double fragmentation() const {
    return free_in_segments == 0 ? 0.0
                                 : 1.0 - static_cast<double>(largest_free_block) /
                                             static_cast<double>(free_in_segments);
  }

  // Calls f(const StoreStatusField&, value) for each scalar field, in the list's order.
  template <typename F>
  void ForEachScalar(F&& f) const {
#define DEPOT_STORE_STATUS_VISIT(name, type, group, key, meaning) \
  f(StoreStatusField{#name, group, key, meaning}, name);
    DEPOT_STORE_STATUS_SCALARS(DEPOT_STORE_STATUS_VISIT)
#undef DEPOT_STORE_STATUS_VISIT
  }

  bool operator==(const StoreStatus&) const = default;
};

}  // namespace depot

#endif  // DEPOT_STORE_STATUS_H_
