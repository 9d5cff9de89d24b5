// Allocator hands out aligned byte ranges of one region (a shared-memory segment) by offset.
//
// Its bookkeeping lives in the daemon's heap, never in the region itself, so a client that writes
// out of bounds can damage object bytes but never the store. It records only the free space
// (best fit by size, free neighbours coalesce on Free); an allocated block is named by its offset
// and the size it was asked for, which its owner keeps anyway, so a store of millions of objects
// pays nothing here per object. Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_ALLOCATOR_H_
#define DEPOT_DAEMON_ALLOCATOR_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>

namespace depot {

class Allocator {
 public:
  // Manages [0, size). `alignment` is a power of two; size is rounded down to it.
  explicit Allocator(uint64_t size, uint64_t alignment = 64);

  // Returns the offset of a block of at least `bytes` (rounded up to the alignment), aligned, or
  // nullopt when no free block is large enough. `bytes` must be > 0.
  std::optional<uint64_t> Allocate(uint64_t bytes);

  // Returns a block from Allocate(bytes) at `offset` to the free space. Returns false (and
  // changes nothing) when the block is misaligned, leaves the region, or overlaps free space (a
  // double free, for one). A range inside other allocated blocks is not detected: callers pass
  // what Allocate gave them.
  bool Free(uint64_t offset, uint64_t bytes);

  // Cuts the allocated block [offset, offset + BlockSize(bytes)) in two at offset + `head`: from
  // now on each part is freed on its own, as if each had come from Allocate (a lease handed out
  // in pieces). False (and nothing changes) unless `head` is aligned and leaves both parts
  // non-empty; as with Free, the caller vouches that the block is allocated.
  bool Split(uint64_t offset, uint64_t bytes, uint64_t head);

  // Allocates exactly the block [offset, offset + BlockSize(bytes)), as if Allocate had given it:
  // a block a previous daemon allocated, adopted from the memory it left (see KeptMemory). False
  // (and nothing changes) when it is misaligned, leaves the region or is not all free.
  bool Reserve(uint64_t offset, uint64_t bytes);
  // The bytes Allocate(bytes) reserves: for `bytes` up to size(), which is all a block can be.
  uint64_t BlockSize(uint64_t bytes) const { return (bytes + alignment_ - 1) & ~(alignment_ - 1); }

  uint64_t size() const { return size_; }
  uint64_t used() const { return used_; }
  uint64_t free() const { return size_ - used_; }
  uint64_t largest_free() const;
  size_t allocated_blocks() const { return allocated_blocks_; }
  size_t free_blocks() const { return free_by_offset_.size(); }
  bool empty() const { return allocated_blocks_ == 0; }

 private:
  // Whether [offset, offset + BlockSize(bytes)) is an aligned, non-empty block of the region.
  // `bytes` is compared with the region before it is rounded: near 2^64 it would wrap to 0.
  bool InRegion(uint64_t offset, uint64_t bytes) const {
    return bytes != 0 && bytes <= size_ && offset % alignment_ == 0 && offset <= size_ &&
           BlockSize(bytes) <= size_ - offset;
  }
  void InsertFree(uint64_t offset, uint64_t size);
  void EraseFree(std::map<uint64_t, uint64_t>::iterator it);

  uint64_t size_;
  uint64_t alignment_;
  uint64_t used_ = 0;
  std::map<uint64_t, uint64_t> free_by_offset_;           // offset -> size
  std::set<std::pair<uint64_t, uint64_t>> free_by_size_;  // (size, offset)
  size_t allocated_blocks_ = 0;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_ALLOCATOR_H_
