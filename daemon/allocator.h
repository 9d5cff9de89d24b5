// Allocator hands out aligned byte ranges of one region (a shared-memory segment) by offset.
//
// Its bookkeeping lives in the daemon's heap, never in the region itself, so a client that writes
// out of bounds can damage object bytes but never the store. Best fit by size, free neighbours
// coalesce on Free. Not thread-safe: the daemon's single loop owns it.
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

  // Returns a block from Allocate to the free space. Returns false (and changes nothing) when
  // `offset` is not the start of an allocated block.
  bool Free(uint64_t offset);

  // The size Allocate reserved for the block at `offset`, or 0 when none starts there.
  uint64_t BlockSize(uint64_t offset) const;

  uint64_t size() const { return size_; }
  uint64_t used() const { return used_; }
  uint64_t free() const { return size_ - used_; }
  uint64_t largest_free() const;
  size_t allocated_blocks() const { return allocated_.size(); }
  size_t free_blocks() const { return free_by_offset_.size(); }
  bool empty() const { return allocated_.empty(); }

 private:
  void InsertFree(uint64_t offset, uint64_t size);
  void EraseFree(std::map<uint64_t, uint64_t>::iterator it);

  uint64_t size_;
  uint64_t alignment_;
  uint64_t used_ = 0;
  std::map<uint64_t, uint64_t> free_by_offset_;          // offset -> size
  std::set<std::pair<uint64_t, uint64_t>> free_by_size_;  // (size, offset)
  std::map<uint64_t, uint64_t> allocated_;               // offset -> size
};

}  // namespace depot

#endif  // DEPOT_DAEMON_ALLOCATOR_H_
