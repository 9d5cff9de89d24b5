// HostPool owns the node's shared memory for host frames: named POSIX shared-memory segments
// (Boost.Interprocess, mode 0600) created on demand up to a capacity, each reserved in full with
// posix_fallocate when it is created so that a full /dev/shm is an error here, never a SIGBUS in a
// client later. Objects are carved out of segments by an Allocator per segment; an object larger
// than the segment size gets a segment of its own. Segments that fall empty are given back (one
// empty shared segment is kept as a spare; with prefault, the whole capacity is kept).
//
// Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_HOST_POOL_H_
#define DEPOT_DAEMON_HOST_POOL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <boost/interprocess/shared_memory_object.hpp>

#include "daemon/allocator.h"
#include "depot/status.h"

namespace depot {

// A frame's place in the host pool.
struct Location {
  uint32_t segment = 0;  // or device chunk
  uint32_t pool = 0;     // 0: the host pool; n: device pool n
  uint64_t offset = 0;
  uint64_t size = 0;  // bytes asked for; the block may be larger (alignment)
};

// A capacity that several pools share (one per namespace): each segment is reserved against it.
struct PoolBudget {
  uint64_t capacity = 0;
  uint64_t reserved = 0;
};

struct HostPoolOptions {
  uint64_t capacity = 0;
  uint64_t segment_size = 64ull << 20;
  bool prefault = false;        // reserve the whole capacity at start-up and keep it
  std::string name_prefix;      // segment names are name_prefix + id, e.g. "depot-1000-ab12cd-7"
  PoolBudget* budget = nullptr;  // shared with other pools (outlives this one); null: its own
};

struct HostPoolStats {
  uint64_t capacity = 0;
  uint64_t reserved = 0;      // bytes in segments
  uint64_t used = 0;          // bytes in allocated blocks
  uint64_t largest_free = 0;  // largest object that fits now, counting segments not yet created
  uint64_t free_in_segments = 0;  // free bytes inside the segments that exist
  uint64_t largest_block = 0;     // largest free block inside them (fragmentation: 1 - this/that)
  uint32_t segments = 0;
};

class HostPool {
 public:
  struct Segment {
    uint32_t id;
    std::string name;
    boost::interprocess::shared_memory_object shm;
    uint64_t size;
    bool dedicated;  // holds one object larger than the segment size
    Allocator allocator;
    uint8_t* map = nullptr;  // the daemon's own mapping, made for inline writes (see Map)
    int fd() const { return shm.get_mapping_handle().handle; }
  };

  // Called with a segment's id when it is given back, so that clients can unmap it.
  using RetireFn = std::function<void(uint32_t segment)>;

  // Builds a pool; with prefault, reserves the whole capacity now, failing when /dev/shm cannot
  // hold it.
  static Result<std::unique_ptr<HostPool>> Create(HostPoolOptions options, RetireFn on_retire);

  // Removes every segment this pool created, and gives their bytes back to the budget.
  ~HostPool();

  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  // Reserves `size` (> 0) bytes, 64-byte aligned. StoreFull, with the sizes in the message, when
  // neither a segment nor the capacity left can hold it, or when /dev/shm has no room for a new
  // segment.
  Result<Location> Allocate(uint64_t size);

  // Returns a block from Allocate. A segment left empty may be given back (see class comment).
  void Free(const Location& location);

  // Gives back the empty shared segments kept as spares (not with prefault), so that another pool
  // on the same budget can use their bytes. Returns how many bytes went back.
  uint64_t ReleaseSpares();

  // nullptr for an unknown or retired id.
  const Segment* segment(uint32_t id) const;

  // The daemon's read-write mapping of a segment, made on first use: the daemon writes only the
  // bytes of small objects that arrive inside a create request.
  Result<uint8_t*> Map(uint32_t id);

  HostPoolStats stats() const;
  const HostPoolOptions& options() const { return options_; }

  // The segment name prefix for a daemon serving `socket_path`: it carries the user and a hash of
  // the path, so a daemon restarted on the same socket finds what a crashed one left, and daemons
  // on other sockets are untouched.
  static std::string NamePrefix(const std::string& socket_path);

  // Unlinks leftover segments whose names start with `prefix` (from a daemon that crashed).
  // Returns how many were removed.
  static int RemoveStale(const std::string& prefix);

  // Free bytes of the filesystem behind POSIX shared memory (/dev/shm).
  static uint64_t ShmAvailable();

  // What a pool of `capacity` bytes can use: whole pages, so every segment's allocator spans it.
  static uint64_t UsableCapacity(uint64_t capacity);

 private:
  HostPool(HostPoolOptions options, RetireFn on_retire);
  Result<Segment*> AddSegment(uint64_t size, bool dedicated);
  void Retire(std::map<uint32_t, Segment>::iterator it);
  static void Unmap(Segment& seg);

  HostPoolOptions options_;
  RetireFn on_retire_;
  std::map<uint32_t, Segment> segments_;
  uint32_t next_id_ = 1;
  uint64_t reserved_ = 0;  // by this pool
  PoolBudget own_budget_;
  PoolBudget* budget_;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_HOST_POOL_H_
