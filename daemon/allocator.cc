#include "daemon/allocator.h"

#include <cassert>

namespace depot {

Allocator::Allocator(uint64_t size, uint64_t alignment)
    : size_(size & ~(alignment - 1)), alignment_(alignment) {
  assert(alignment != 0 && (alignment & (alignment - 1)) == 0);
  if (size_ > 0) InsertFree(0, size_);
}

std::optional<uint64_t> Allocator::Allocate(uint64_t bytes) {
  if (bytes == 0 || bytes > size_) return std::nullopt;
  uint64_t need = BlockSize(bytes);
  auto fit = free_by_size_.lower_bound({need, 0});
  if (fit == free_by_size_.end()) return std::nullopt;
  auto [block_size, offset] = *fit;
  EraseFree(free_by_offset_.find(offset));
  if (block_size > need) InsertFree(offset + need, block_size - need);
  ++allocated_blocks_;
  used_ += need;
  return offset;
}

bool Allocator::Free(uint64_t offset, uint64_t bytes) {
  if (!InRegion(offset, bytes)) return false;
  uint64_t size = BlockSize(bytes);
  // The block must not overlap free space: the free blocks around it end before it and start
  // after it.
  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.end() && next->first < offset + size) return false;
  if (next != free_by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second > offset) return false;
  }
  uint64_t start = offset;
  --allocated_blocks_;
  used_ -= size;

  if (next != free_by_offset_.end() && next->first == start + size) {
    size += next->second;
    next = std::next(next);
    EraseFree(std::prev(next));
  }
  if (next != free_by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      EraseFree(prev);
    }
  }
  InsertFree(start, size);
  return true;
}

bool Allocator::Reserve(uint64_t offset, uint64_t bytes) {
  if (!InRegion(offset, bytes)) return false;
  uint64_t size = BlockSize(bytes);
  // The free block that holds it starts at or before it and ends at or after its end.
  auto it = free_by_offset_.upper_bound(offset);
  if (it == free_by_offset_.begin()) return false;
  --it;
  auto [start, length] = *it;
  if (start + length < offset + size) return false;
  EraseFree(it);
  if (offset > start) InsertFree(start, offset - start);
  if (start + length > offset + size) InsertFree(offset + size, start + length - offset - size);
  ++allocated_blocks_;
  used_ += size;
  return true;
}

bool Allocator::Split(uint64_t offset, uint64_t bytes, uint64_t head) {
  if (!InRegion(offset, bytes) || head == 0 || head % alignment_ != 0 || head >= BlockSize(bytes)) {
    return false;
  }
  // Only the count of blocks changes: the allocator keeps free space, not the blocks themselves.
  ++allocated_blocks_;
  return true;
}

uint64_t Allocator::largest_free() const {
  return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

void Allocator::InsertFree(uint64_t offset, uint64_t size) {
  free_by_offset_.emplace(offset, size);
  free_by_size_.emplace(size, offset);
}

void Allocator::EraseFree(std::map<uint64_t, uint64_t>::iterator it) {
  free_by_size_.erase({it->second, it->first});
  free_by_offset_.erase(it);
}

}  // namespace depot
