// SegmentedPool is one pool of memory for frames, on the host or on one GPU: segments taken from a
// SegmentSource on demand up to a budget (shared with other pools), objects carved out of them by
// an Allocator per segment. Every segment has an owner, the uid whose objects it holds: whoever
// may write into a segment (its read-write descriptor) reaches only objects of that uid.
//
// Objects come in two classes: small ones (up to the segment size / dedicated_divisor) share
// segments of the segment size; a large one may take room there too, else goes into a large
// segment, made to its size when no segment of its owner has room. Small objects never go into
// large segments (they would pin memory made for large ones). An object goes first to a segment
// of its owner that is in use and has room, then to the smallest empty one that holds it, and
// only then to a new segment. Segments that fall empty are kept warm, still mapped and faulted in
// by the clients that used them, while the empty bytes over the whole budget stay within its
// warm_limit; the rest are given back. With reuse_large off (a GPU's chunks), a large object's
// segment is dedicated to it instead: its descriptor travels with each reply, its clients unmap
// it when they drop the object, and it is given back as soon as it falls empty. With prefault,
// one segment of the whole budget is made at start-up and kept, and every owner's objects share
// it (see docs/design.md).
//
// The pool grows ahead where its source can make segments off the loop: once an owner's shared
// segments are more than half full and it has no empty one, the next is asked for at once and
// adopted, empty and warm, when it arrives, so that the put that needs it does not wait for it.
//
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

// Told of every segment whose memory a pool holds, so that it can be kept across a restart of
// the daemon (KeptMemory). Not told when the pool goes with the daemon.
class SegmentKeeper {
 public:
  virtual ~SegmentKeeper() = default;
  // Segment `id` of `size` bytes (read-write descriptor `fd`) of `owner` now holds memory of the
  // pool.
  virtual void Keep(uint32_t id, int fd, uint32_t owner, bool large, uint64_t size) = 0;
  // Segment `id` went back to its source.
  virtual void Forget(uint32_t id) = 0;
};

struct SegmentedPoolOptions {
  PoolBudget* budget = nullptr;  // the capacity, shared with other pools; outlives this one
  uint64_t segment_size = 0;     // rounded up to the source's granularity
  uint64_t alignment = 64;       // of every block: 64 on the host, 256 on a GPU
  // An object larger than segment_size / dedicated_divisor is large: 1 on the host; 2 on a GPU,
  // whose chunks are large.
  uint64_t dedicated_divisor = 1;
  bool prefault = false;  // reserve the whole budget at start-up and keep it
  // Large objects go to large segments that are kept warm and reused (the host); off, each gets
  // a dedicated segment, given back when it is freed (a GPU).
  bool reuse_large = false;
  SegmentKeeper* keeper = nullptr;  // outlives the pool; null: segments are not kept
};

struct PoolStats {
  uint64_t capacity = 0;
  uint64_t reserved = 0;          // bytes in segments
  uint64_t used = 0;              // bytes in allocated blocks
  uint64_t largest_free = 0;      // largest object that fits now, counting segments not yet created
  uint64_t free_in_segments = 0;  // free bytes inside the segments that exist
  uint64_t largest_block = 0;     // largest free block inside them (fragmentation: 1 - this/that)
  uint32_t segments = 0;
  uint64_t retired_held = 0;  // bytes of retired segments that clients still map (in reserved)
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

  struct Segment {
    uint32_t id;
    SegmentMemory memory;
    bool dedicated;  // holds one large object, given back when it goes (reuse_large off)
    uint32_t owner;  // the uid whose objects it holds, or kAnyOwner
    Allocator allocator;
    bool large = false;  // holds large objects only (dedicated ones are large too)
    // Adopted from a previous daemon (AdoptKept) and not opened since: takes no new block, since
    // a client of that daemon may still write into what was free there (see KeptMemory).
    bool closed = false;
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

  // Returns a block from Allocate. A segment left empty is kept warm or given back (see class
  // comment).
  void Free(const Location& location);

  // Cuts a block from Allocate in two at `head` bytes (aligned, less than the block): returns the
  // second part, freed on its own from now on (see Allocator::Split); `block` keeps the first.
  // InvalidArgument for a block or cut it cannot be.
  Result<Location> Split(Location& block, uint64_t head);

  // Gives back the empty segments kept warm (not with prefault), so that another pool on the
  // same budget can use their bytes. Returns how many bytes went back (not those held).
  uint64_t ReleaseSpares();

  // Every client that mapped retired segment `id` has dropped it: its memory goes back to the
  // source and its bytes to the budget. Nothing for an id that is not held.
  void Dropped(uint32_t id);

  // Segments made ahead of need and adopted so far.
  uint64_t made_ahead() const { return made_ahead_; }

  // nullptr for an unknown or retired id.
  const Segment* segment(uint32_t id) const;

  // The daemon's read-write mapping of a segment, made on first use: the daemon writes only the
  // bytes of small host objects that arrive inside a create request (device memory does not map).
  Result<uint8_t*> Map(uint32_t id);

  PoolStats stats() const;

  // Adoption from a previous daemon's kept memory (see KeptMemory). Takes the segment of kept
  // descriptor `fd` (of `size` bytes where its name says, else 0; its source checks it is one of
  // its own, SegmentSource::Adopt) as segment `id` of `owner`, closed: no block of it is handed
  // out until OpenKept. Its bytes count against the budget even past the capacity (a smaller
  // capacity than the last daemon's). InvalidArgument for an id taken or a descriptor refused.
  Status AdoptKept(uint32_t id, uint32_t owner, bool large, UniqueFd fd, uint64_t size,
                   std::string name);
  // Takes the block of `frame` in its closed segment of `owner`, as Allocate would have: false
  // when there is no such segment or the block is not free there.
  bool ReserveKept(const Location& frame, uint32_t owner);
  // Gives back a block ReserveKept took, leaving its segment there even when it is empty now:
  // another object being adopted may still be in it (ReleaseEmptyKept gives back the empty ones).
  void UnreserveKept(const Location& frame);
  // Gives back the closed segments that hold no block (nothing kept lives there).
  void ReleaseEmptyKept();
  // Opens every closed segment to new blocks.
  void OpenKept();
  // How many segments are closed, and their bytes.
  std::pair<uint32_t, uint64_t> closed() const;

 private:
  SegmentedPool(std::unique_ptr<SegmentSource> source, SegmentedPoolOptions options,
                RetireFn on_retire);
  Result<Segment*> AddSegment(uint64_t size, bool large, uint32_t owner);
  // The segment of `owner` where `size` bytes (`large` or not) go now without a new segment:
  // one in use with room first, else the smallest empty one that holds them; nullptr if none.
  Segment* Fit(uint64_t size, bool large, uint32_t owner);
  // Asks the source for `owner`'s next shared segment when its shared segments are more than half
  // full, it has no empty one, and the budget has room for two more with the warm limit allowing
  // one: at most one in flight per pool.
  void GrowAhead(uint32_t owner);
  // A segment made ahead arrived (on the loop): kept, empty and warm, if the budget still has
  // room for it; else given back.
  void Adopt(uint32_t id, uint32_t owner, Result<SegmentMemory> memory);
  // Whether the segment is kept warm while empty: counted in the budget's warm bytes.
  bool Warm(const Segment& seg) const {
    return !options_.prefault && !seg.dedicated && !seg.closed && seg.allocator.empty();
  }
  // Gives a segment back, or holds it while clients map it; returns the bytes given back.
  uint64_t Retire(std::map<uint32_t, Segment>::iterator it);
  static void Unmap(Segment& seg);

  std::unique_ptr<SegmentSource> source_;
  SegmentedPoolOptions options_;
  PoolBudget* budget_;
  uint64_t granularity_;  // of segment sizes: the source's, at least the alignment
  RetireFn on_retire_;
  std::map<uint32_t, Segment> segments_;
  uint32_t next_id_ = 1;
  uint64_t reserved_ = 0;  // by this pool
  bool ahead_in_flight_ = false;
  uint64_t made_ahead_ = 0;
  std::map<uint32_t, SegmentMemory> held_;  // retired, still mapped by clients
  uint64_t held_bytes_ = 0;
  // Results of CreateAhead hold it weakly: one that arrives after the pool is gone is dropped.
  std::shared_ptr<SegmentedPool*> alive_ = std::make_shared<SegmentedPool*>(this);
};

}  // namespace depot

#endif  // DEPOT_DAEMON_SEGMENTED_POOL_H_
