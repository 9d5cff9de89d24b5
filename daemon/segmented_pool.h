// SegmentedPool is one pool of memory for frames, on the host or on one GPU: segments taken from a
// SegmentSource on demand up to a budget (shared with other pools), objects carved out of them by
// an Allocator per segment. Every segment has an owner, the uid whose objects it holds: whoever
// may write into a segment (its read-write descriptor) reaches only objects of that uid. An object
// finds the first shared segment of its owner with room; when none has room, a new segment is
// made: a shared one of the segment size (or less, for the last of the budget), or, for an object
// larger than the dedicated threshold, a segment of its own. Segments that fall empty are given
// back, one empty shared segment per owner kept as a spare (at most kMaxSpares in all) so that a
// put/delete cycle does not make one each time. With prefault, one segment of the whole budget is
// made at start-up and kept, and every owner's objects share it (see docs/design.md).
// A segment given back while clients still map it is held: its memory and its bytes against the
// budget stay until every such client has said it dropped it (Dropped), so that the budget never
// counts as free what a client's mapping keeps in memory.
//
// Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_SEGMENTED_POOL_H_
#define DEPOT_DAEMON_SEGMENTED_POOL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "daemon/allocator.h"
#include "daemon/location.h"
#include "daemon/segment_source.h"
#include "depot/status.h"

namespace depot {

struct SegmentedPoolOptions {
  PoolBudget* budget = nullptr;         // the capacity, shared with other pools; outlives this one
  uint64_t segment_size = 0;            // rounded up to the source's granularity
  uint64_t alignment = 64;              // of every block: 64 on the host, 256 on a GPU
  // An object larger than segment_size / dedicated_divisor that fits in no shared segment gets a
  // segment of its own: 1 on the host; 2 on a GPU, whose chunks are large.
  uint64_t dedicated_divisor = 1;
  bool prefault = false;  // reserve the whole budget at start-up and keep it
};

struct PoolStats {
  uint64_t capacity = 0;
  uint64_t reserved = 0;          // bytes in segments
  uint64_t used = 0;              // bytes in allocated blocks
  uint64_t largest_free = 0;      // largest object that fits now, counting segments not yet created
  uint64_t free_in_segments = 0;  // free bytes inside the segments that exist
  uint64_t largest_block = 0;     // largest free block inside them (fragmentation: 1 - this/that)
  uint32_t segments = 0;
  uint64_t retired_held = 0;      // bytes of retired segments that clients still map (in reserved)
};

// One pool as metrics name it (the host, a GPU by UUID), totalled over every namespace.
struct PoolReport {
  std::string pool;  // "host", or the GPU's UUID
  std::string kind;  // "host" or "device"
  PoolStats stats;
  uint64_t peak_used = 0;  // since start
};

class SegmentedPool {
 public:
  // The owner of the segment that prefault makes: every uid's objects go there.
  static constexpr uint32_t kAnyOwner = UINT32_MAX;
  // Empty shared segments kept, over all owners.
  static constexpr uint32_t kMaxSpares = 4;

  struct Segment {
    uint32_t id;
    SegmentMemory memory;
    bool dedicated;  // holds one object larger than the dedicated threshold
    uint32_t owner;  // the uid whose objects it holds, or kAnyOwner
    Allocator allocator;
    uint8_t* map = nullptr;  // the daemon's own mapping, made for inline writes (see Map)
    int fd() const { return memory.fd.get(); }
    // The descriptor for readers: read-only where the memory has one.
    int read_only_fd() const {
      return memory.read_only_fd.valid() ? memory.read_only_fd.get() : memory.fd.get();
    }
    uint64_t size() const { return memory.size; }
    const std::string& name() const { return memory.name; }
  };

  // Called with a segment's id when it is given back, so that clients can unmap it. Returns
  // whether some client may still map it: then the segment is held until Dropped(id).
  using RetireFn = std::function<bool(uint32_t segment)>;

  // Builds a pool over `source`; with prefault, reserves the whole budget now, failing when the
  // source cannot give it.
  static Result<std::unique_ptr<SegmentedPool>> Create(std::unique_ptr<SegmentSource> source,
                                                       SegmentedPoolOptions options,
                                                       RetireFn on_retire);

  // Gives every segment back to its source, and their bytes back to the budget.
  ~SegmentedPool();

  SegmentedPool(const SegmentedPool&) = delete;
  SegmentedPool& operator=(const SegmentedPool&) = delete;

  // Reserves `size` (> 0) bytes, aligned, in a segment of `owner` (a uid). StoreFull, with the
  // sizes in the message, when neither a segment nor the budget left can hold it, or when the
  // source has no room for a new segment.
  Result<Location> Allocate(uint64_t size, uint32_t owner);

  // Returns a block from Allocate. A segment left empty may be given back (see class comment).
  void Free(const Location& location);

  // Gives back the empty shared segments kept as spares (not with prefault), so that another pool
  // on the same budget can use their bytes. Returns how many bytes went back (not those held).
  uint64_t ReleaseSpares();

  // Every client that mapped retired segment `id` has dropped it: its memory goes back to the
  // source and its bytes to the budget. Nothing for an id that is not held.
  void Dropped(uint32_t id);

  // nullptr for an unknown or retired id.
  const Segment* segment(uint32_t id) const;

  // The daemon's read-write mapping of a segment, made on first use: the daemon writes only the
  // bytes of small host objects that arrive inside a create request (device memory does not map).
  Result<uint8_t*> Map(uint32_t id);

  PoolStats stats() const;

 private:
  SegmentedPool(std::unique_ptr<SegmentSource> source, SegmentedPoolOptions options,
                RetireFn on_retire);
  Result<Segment*> AddSegment(uint64_t size, bool dedicated, uint32_t owner);
  // Gives a segment back, or holds it while clients map it; returns the bytes given back.
  uint64_t Retire(std::map<uint32_t, Segment>::iterator it);
  static void Unmap(Segment& seg);

  std::unique_ptr<SegmentSource> source_;
  SegmentedPoolOptions options_;
  PoolBudget* budget_;
  uint64_t granularity_;  // of segment sizes: the source's, at least the alignment
  RetireFn on_retire_;
  std::map<uint32_t, Segment> segments_;
  std::map<uint32_t, SegmentMemory> held_;  // retired, still mapped by clients
  uint64_t held_bytes_ = 0;
  uint32_t next_id_ = 1;
  uint64_t reserved_ = 0;  // by this pool
};

}  // namespace depot

#endif  // DEPOT_DAEMON_SEGMENTED_POOL_H_
