#include "daemon/segmented_pool.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "depot/units.h"

namespace depot {
namespace {

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

}  // namespace

SegmentedPool::SegmentedPool(std::unique_ptr<SegmentSource> source, SegmentedPoolOptions options,
                             RetireFn on_retire)
    : source_(std::move(source)),
      options_(options),
      budget_(options.budget),
      granularity_(std::max(source_->granularity(), options.alignment)),
      on_retire_(std::move(on_retire)) {
  options_.segment_size = RoundUp(options_.segment_size, granularity_);
}

Result<std::unique_ptr<SegmentedPool>> SegmentedPool::Create(std::unique_ptr<SegmentSource> source,
                                                             SegmentedPoolOptions options,
                                                             RetireFn on_retire) {
  std::unique_ptr<SegmentedPool> pool(
      new SegmentedPool(std::move(source), options, std::move(on_retire)));
  if (pool->options_.prefault) {
    // One segment holds the whole budget, so any object up to the capacity fits in it.
    const PoolBudget& b = *pool->budget_;
    auto seg = pool->AddSegment(b.capacity - b.reserved, false, kAnyOwner);
    if (!seg.ok()) return seg.status();
  }
  return pool;
}

SegmentedPool::~SegmentedPool() {
  budget_->reserved -= reserved_;
  for (auto& [id, seg] : segments_) {
    if (Warm(seg)) budget_->warm -= seg.size();
    Unmap(seg);
    source_->Release(seg.memory);
    if (options_.keeper != nullptr) options_.keeper->Forget(id);
  }
  for (auto& [id, memory] : held_) {
    source_->Release(memory);
    if (options_.keeper != nullptr) options_.keeper->Forget(id);
  }
}

Result<uint8_t*> SegmentedPool::Map(uint32_t id) {
  auto it = segments_.find(id);
  if (it == segments_.end()) return Status::NotFound(fmt::format("no segment {}", id));
  Segment& seg = it->second;
  if (seg.map == nullptr) {
    void* p = ::mmap(nullptr, seg.size(), PROT_READ | PROT_WRITE, MAP_SHARED, seg.fd(), 0);
    if (p == MAP_FAILED) {
      return Status::Unavailable(fmt::format("cannot map {} ({}): {}", seg.name(),
                                             FormatBytes(seg.size()), std::strerror(errno)));
    }
    seg.map = static_cast<uint8_t*>(p);
  }
  return seg.map;
}

void SegmentedPool::Unmap(Segment& seg) {
  if (seg.map != nullptr) ::munmap(seg.map, seg.size());
  seg.map = nullptr;
}

Result<SegmentedPool::Segment*> SegmentedPool::AddSegment(uint64_t size, bool large,
                                                          uint32_t owner) {
  uint32_t id = next_id_++;
  auto memory = source_->Create(id, size);
  if (!memory.ok()) return memory.status();
  uint64_t bytes = memory->size;
  reserved_ += bytes;
  budget_->reserved += bytes;
  bool dedicated = large && !options_.reuse_large;
  auto [it, inserted] = segments_.emplace(id, Segment{id, std::move(*memory), dedicated, owner,
                                                      Allocator(bytes, options_.alignment), large});
  if (options_.keeper != nullptr)
    options_.keeper->Keep(id, it->second.fd(), owner, large, it->second.size());
  return &it->second;
}

SegmentedPool::Segment* SegmentedPool::Fit(uint64_t size, bool large, uint32_t owner) {
  Segment* emptiest = nullptr;
  for (auto& [id, seg] : segments_) {
    if (seg.dedicated || seg.closed || (seg.owner != owner && seg.owner != kAnyOwner)) continue;
    // A large object may take room in a shared segment (a GPU's chunk is large), never a small
    // object in a large one: it would pin memory made for one large object.
    if (seg.large && !large) continue;
    if (seg.allocator.largest_free() < seg.allocator.BlockSize(size)) continue;
    if (!seg.allocator.empty()) return &seg;
    // Of the empty ones, the smallest that holds it leaves the larger ones for larger objects.
    if (emptiest == nullptr || seg.size() < emptiest->size()) emptiest = &seg;
  }
  return emptiest;
}

Result<Location> SegmentedPool::Allocate(uint64_t size, uint32_t owner) {
  auto full = [&](std::string_view why) {
    PoolStats s = stats();
    std::string_view where = source_->describe();
    std::string held =
        s.retired_held == 0
            ? ""
            : fmt::format(", {} in retired segments that clients have not unmapped yet",
                          FormatBytes(s.retired_held));
    return Status::StoreFull(
        fmt::format("cannot allocate {}{}{}: {} ({} of {} in use{}, largest free block {})",
                    FormatBytes(size), where.empty() ? "" : " ", where, why, FormatBytes(s.used),
                    FormatBytes(s.capacity), held, FormatBytes(s.largest_free)));
  };
  if (size == 0) return Status::InvalidArgument("cannot allocate 0 bytes");
  if (size > budget_->capacity) return full("larger than the whole capacity");

  bool large = size > options_.segment_size / options_.dedicated_divisor;
  if (Segment* seg = Fit(size, large, owner)) {
    if (Warm(*seg)) budget_->warm -= seg->size();
    // Fit found a free block of at least the size.
    auto offset = seg->allocator.Allocate(size);
    budget_->Use(seg->allocator.BlockSize(size));
    if (!large) GrowAhead(owner);
    return Location{.segment = seg->id, .offset = *offset, .size = size};
  }
  if (options_.prefault) return full("no free block is large enough");

  uint64_t left = (budget_->capacity - budget_->reserved) / granularity_ * granularity_;
  uint64_t seg_size = large ? RoundUp(size, granularity_) : std::min(options_.segment_size, left);
  if (seg_size > left || seg_size < size) return full("no free block is large enough");
  auto seg = AddSegment(seg_size, large, owner);
  if (!seg.ok()) return seg.status();
  // A fresh segment of at least `size` bytes, in whole granules, always has room.
  auto offset = (*seg)->allocator.Allocate(size);
  budget_->Use((*seg)->allocator.BlockSize(size));
  Location made{.segment = (*seg)->id, .offset = *offset, .size = size};
  if (!large) GrowAhead(owner);
  return made;
}

void SegmentedPool::GrowAhead(uint32_t owner) {
  const uint64_t size = options_.segment_size;
  if (ahead_in_flight_ || options_.prefault || budget_->capacity - budget_->reserved < 2 * size ||
      budget_->warm + size > budget_->warm_limit) {
    return;
  }
  uint64_t free = 0;
  for (const auto& [id, seg] : segments_) {
    if (seg.large || seg.closed || seg.owner != owner) continue;
    if (seg.allocator.empty()) return;  // one is ready already
    free += seg.allocator.free();
  }
  if (free >= size / 2) return;
  uint32_t id = next_id_++;
  std::weak_ptr<SegmentedPool*> alive = alive_;
  ahead_in_flight_ = source_->CreateAhead(id, size, [alive, id, owner](Result<SegmentMemory> m) {
    if (auto pool = alive.lock()) (*pool)->Adopt(id, owner, std::move(m));
  });
}

void SegmentedPool::Adopt(uint32_t id, uint32_t owner, Result<SegmentMemory> memory) {
  ahead_in_flight_ = false;
  if (!memory.ok()) return;  // the put that needs a segment will make one, or say why not
  uint64_t bytes = memory->size;
  // The budget was not held while the segment was made, so that it never refused an object.
  if (budget_->reserved + bytes > budget_->capacity ||
      budget_->warm + bytes > budget_->warm_limit) {
    source_->Release(*memory);
    return;
  }
  reserved_ += bytes;
  budget_->reserved += bytes;
  budget_->warm += bytes;
  ++made_ahead_;
  auto [it, inserted] = segments_.emplace(id, Segment{id, std::move(*memory), false, owner,
                                                      Allocator(bytes, options_.alignment), false});
  if (options_.keeper != nullptr)
    options_.keeper->Keep(id, it->second.fd(), owner, false, it->second.size());
}

void SegmentedPool::Free(const Location& location) {
  auto it = segments_.find(location.segment);
  if (it == segments_.end() || !it->second.allocator.Free(location.offset, location.size)) return;
  Segment& seg = it->second;
  budget_->used -= seg.allocator.BlockSize(location.size);
  if (!seg.allocator.empty() || options_.prefault) return;
  if (seg.closed) {
    Retire(it);  // kept memory that nothing holds any more: never reused, never kept warm
    return;
  }
  // Kept, the segment's next object is written into pages its clients have mapped and faulted in
  // already, rather than into a new segment that is reserved, zeroed and faulted in anew; but
  // every byte kept is memory held for nobody, hence the limit.
  if (!seg.dedicated && budget_->warm + seg.size() <= budget_->warm_limit) {
    budget_->warm += seg.size();
    return;
  }
  Retire(it);
}

Result<Location> SegmentedPool::Split(Location& block, uint64_t head) {
  auto it = segments_.find(block.segment);
  if (it == segments_.end() || !it->second.allocator.Split(block.offset, block.size, head)) {
    return Status::InvalidArgument(fmt::format("cannot cut the block of {} bytes at {} in {}",
                                               block.size, head, block.offset));
  }
  Location rest{.segment = block.segment,
                .pool = block.pool,
                .offset = block.offset + head,
                .size = it->second.allocator.BlockSize(block.size) - head};
  block.size = head;
  return rest;
}

uint64_t SegmentedPool::ReleaseSpares() {
  if (options_.prefault) return 0;
  uint64_t released = 0;
  for (auto it = segments_.begin(); it != segments_.end();) {
    auto next = std::next(it);
    if (Warm(it->second)) {
      budget_->warm -= it->second.size();
      released += Retire(it);
    }
    it = next;
  }
  return released;
}

uint64_t SegmentedPool::Retire(std::map<uint32_t, Segment>::iterator it) {
  uint32_t id = it->first;
  Unmap(it->second);
  SegmentMemory memory = std::move(it->second.memory);
  segments_.erase(it);
  uint64_t size = memory.size;
  if (on_retire_ && on_retire_(id)) {
    // A client's mapping keeps these pages (or this chunk) in memory: they stay counted.
    held_bytes_ += size;
    held_.emplace(id, std::move(memory));
    return 0;
  }
  reserved_ -= size;
  budget_->reserved -= size;
  source_->Release(memory);
  if (options_.keeper != nullptr) options_.keeper->Forget(id);
  return size;
}

void SegmentedPool::Dropped(uint32_t id) {
  auto it = held_.find(id);
  if (it == held_.end()) return;
  uint64_t size = it->second.size;
  held_bytes_ -= size;
  reserved_ -= size;
  budget_->reserved -= size;
  source_->Release(it->second);
  held_.erase(it);
  if (options_.keeper != nullptr) options_.keeper->Forget(id);
}

Status SegmentedPool::AdoptKept(uint32_t id, uint32_t owner, bool large, UniqueFd fd, uint64_t size,
                                std::string name) {
  if (id == 0 || segments_.contains(id) || held_.contains(id)) {
    return Status::InvalidArgument(fmt::format("segment {} is there already", id));
  }
  auto adopted = source_->Adopt(std::move(fd), size, std::move(name));
  if (!adopted.ok()) return adopted.status();
  SegmentMemory memory = std::move(*adopted);
  uint64_t bytes = memory.size;
  reserved_ += bytes;
  budget_->reserved += bytes;
  next_id_ = std::max(next_id_, id + 1);
  auto [it, inserted] = segments_.emplace(id, Segment{id, std::move(memory), false, owner,
                                                      Allocator(bytes, options_.alignment), large});
  it->second.closed = true;
  if (options_.keeper != nullptr)
    options_.keeper->Keep(id, it->second.fd(), owner, large, it->second.size());
  return Status::OK();
}

bool SegmentedPool::ReserveKept(const Location& frame, uint32_t owner) {
  auto it = segments_.find(frame.segment);
  if (it == segments_.end() || !it->second.closed || it->second.owner != owner || frame.size == 0 ||
      !it->second.allocator.Reserve(frame.offset, frame.size)) {
    return false;
  }
  budget_->Use(it->second.allocator.BlockSize(frame.size));
  return true;
}

void SegmentedPool::UnreserveKept(const Location& frame) {
  auto it = segments_.find(frame.segment);
  if (it == segments_.end() || !it->second.allocator.Free(frame.offset, frame.size)) return;
  budget_->used -= it->second.allocator.BlockSize(frame.size);
}

void SegmentedPool::ReleaseEmptyKept() {
  for (auto it = segments_.begin(); it != segments_.end();) {
    auto next = std::next(it);
    if (it->second.closed && it->second.allocator.empty()) Retire(it);
    it = next;
  }
}

void SegmentedPool::OpenKept() {
  for (auto& [id, seg] : segments_) seg.closed = false;
}

std::pair<uint32_t, uint64_t> SegmentedPool::closed() const {
  std::pair<uint32_t, uint64_t> out{0, 0};
  for (const auto& [id, seg] : segments_) {
    if (seg.closed) {
      ++out.first;
      out.second += seg.size();
    }
  }
  return out;
}

const SegmentedPool::Segment* SegmentedPool::segment(uint32_t id) const {
  auto it = segments_.find(id);
  return it == segments_.end() ? nullptr : &it->second;
}

PoolStats SegmentedPool::stats() const {
  PoolStats s;
  s.capacity = budget_->capacity;
  s.reserved = reserved_;
  s.segments = static_cast<uint32_t>(segments_.size());
  s.retired_held = held_bytes_;
  for (const auto& [id, seg] : segments_) {
    s.used += seg.allocator.used();
    s.free_in_segments += seg.allocator.free();
    s.largest_block = std::max(s.largest_block, seg.allocator.largest_free());
    // A large segment's free block takes only large objects: none when it is no larger than that.
    uint64_t block = seg.allocator.largest_free();
    bool usable = !seg.dedicated &&
                  (!seg.large || block > options_.segment_size / options_.dedicated_divisor);
    if (usable) s.largest_free = std::max(s.largest_free, block);
  }
  if (!options_.prefault) {
    s.largest_free = std::max(s.largest_free, budget_->capacity - budget_->reserved);
  }
  return s;
}

}  // namespace depot
