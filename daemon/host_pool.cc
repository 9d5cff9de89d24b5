#include "daemon/host_pool.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstring>

#include <fmt/format.h>

#include "depot/units.h"

namespace depot {
namespace bip = boost::interprocess;

namespace {

constexpr uint64_t kPage = 4096;
constexpr const char* kShmDir = "/dev/shm";

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

}  // namespace

HostPool::HostPool(HostPoolOptions options, RetireFn on_retire)
    : options_(std::move(options)),
      on_retire_(std::move(on_retire)),
      own_budget_{options_.capacity, 0},
      budget_(options_.budget ? options_.budget : &own_budget_) {}

Result<std::unique_ptr<HostPool>> HostPool::Create(HostPoolOptions options, RetireFn on_retire) {
  if (options.capacity < kPage) {
    return Status::InvalidArgument(fmt::format("capacity {} is too small", options.capacity));
  }
  if (options.segment_size < kPage) {
    return Status::InvalidArgument(fmt::format("segment size {} is too small", options.segment_size));
  }
  options.capacity = UsableCapacity(options.capacity);
  options.segment_size = RoundUp(options.segment_size, kPage);
  std::unique_ptr<HostPool> pool(new HostPool(std::move(options), std::move(on_retire)));
  if (pool->options_.prefault) {
    // One segment holds the whole capacity, so any object up to the capacity fits in it.
    auto seg = pool->AddSegment(pool->options_.capacity, false);
    if (!seg.ok()) return seg.status();
  }
  return pool;
}

HostPool::~HostPool() {
  budget_->reserved -= reserved_;
  for (auto& [id, seg] : segments_) {
    Unmap(seg);
    bip::shared_memory_object::remove(seg.name.c_str());
  }
}

Result<uint8_t*> HostPool::Map(uint32_t id) {
  auto it = segments_.find(id);
  if (it == segments_.end()) return Status::NotFound(fmt::format("no segment {}", id));
  Segment& seg = it->second;
  if (seg.map == nullptr) {
    void* p = ::mmap(nullptr, seg.size, PROT_READ | PROT_WRITE, MAP_SHARED, seg.fd(), 0);
    if (p == MAP_FAILED) {
      return Status::Unavailable(fmt::format("cannot map {} ({}): {}", seg.name,
                                             FormatBytes(seg.size), std::strerror(errno)));
    }
    seg.map = static_cast<uint8_t*>(p);
  }
  return seg.map;
}

void HostPool::Unmap(Segment& seg) {
  if (seg.map != nullptr) ::munmap(seg.map, seg.size);
  seg.map = nullptr;
}

Result<HostPool::Segment*> HostPool::AddSegment(uint64_t size, bool dedicated) {
  uint32_t id = next_id_++;
  std::string name = options_.name_prefix + std::to_string(id);
  bip::shared_memory_object shm;
  try {
    shm = bip::shared_memory_object(bip::create_only, name.c_str(), bip::read_write,
                                    bip::permissions(0600));
    shm.truncate(static_cast<bip::offset_t>(size));
  } catch (const bip::interprocess_exception& e) {
    bip::shared_memory_object::remove(name.c_str());
    return Status::StoreFull(fmt::format("cannot create shared-memory segment {}/{} of {}: {}",
                                         kShmDir, name, FormatBytes(size), e.what()));
  }
  // Reserve every page now: a tmpfs that runs out later would SIGBUS the client that touches it.
  int err = ::posix_fallocate(shm.get_mapping_handle().handle, 0, static_cast<off_t>(size));
  if (err != 0) {
    bip::shared_memory_object::remove(name.c_str());
    return Status::StoreFull(fmt::format(
        "cannot reserve {} in {} for a new segment: {} ({} free there); enlarge {} "
        "(mount -o remount,size=... {}) or lower the capacity",
        FormatBytes(size), kShmDir, std::strerror(err), FormatBytes(ShmAvailable()), kShmDir,
        kShmDir));
  }
  reserved_ += size;
  budget_->reserved += size;
  auto [it, inserted] = segments_.emplace(
      id, Segment{id, std::move(name), std::move(shm), size, dedicated, Allocator(size)});
  return &it->second;
}

Result<Location> HostPool::Allocate(uint64_t size) {
  auto full = [&](std::string_view why) {
    HostPoolStats s = stats();
    return Status::StoreFull(fmt::format(
        "cannot allocate {}: {} ({} of {} in use, largest free block {})", FormatBytes(size), why,
        FormatBytes(s.used), FormatBytes(s.capacity), FormatBytes(s.largest_free)));
  };
  if (size == 0) return Status::InvalidArgument("cannot allocate 0 bytes");
  if (size > options_.capacity) return full("larger than the whole capacity");

  for (auto& [id, seg] : segments_) {
    if (seg.dedicated) continue;
    if (auto offset = seg.allocator.Allocate(size)) return Location{.segment = id, .offset = *offset, .size = size};
  }
  if (options_.prefault) return full("no free block is large enough");

  bool dedicated = size > options_.segment_size;
  uint64_t left = budget_->capacity - budget_->reserved;
  uint64_t seg_size = dedicated ? RoundUp(size, kPage) : std::min(options_.segment_size, left);
  if (seg_size > left || seg_size < size) return full("no free block is large enough");
  auto seg = AddSegment(seg_size, dedicated);
  if (!seg.ok()) return seg.status();
  // A fresh segment of at least `size` whole pages always has room.
  auto offset = (*seg)->allocator.Allocate(size);
  return Location{.segment = (*seg)->id, .offset = *offset, .size = size};
}

void HostPool::Free(const Location& location) {
  auto it = segments_.find(location.segment);
  if (it == segments_.end() || !it->second.allocator.Free(location.offset, location.size)) return;
  Segment& seg = it->second;
  if (!seg.allocator.empty() || options_.prefault) return;
  if (!seg.dedicated) {
    // Keep one empty shared segment so that a put/delete cycle does not create one each time.
    for (auto& [id, other] : segments_) {
      if (id != seg.id && !other.dedicated && other.allocator.empty()) {
        Retire(it);
        return;
      }
    }
    return;
  }
  Retire(it);
}

uint64_t HostPool::ReleaseSpares() {
  if (options_.prefault) return 0;
  uint64_t released = 0;
  for (auto it = segments_.begin(); it != segments_.end();) {
    auto next = std::next(it);
    if (!it->second.dedicated && it->second.allocator.empty()) {
      released += it->second.size;
      Retire(it);
    }
    it = next;
  }
  return released;
}

void HostPool::Retire(std::map<uint32_t, Segment>::iterator it) {
  uint32_t id = it->first;
  reserved_ -= it->second.size;
  budget_->reserved -= it->second.size;
  Unmap(it->second);
  bip::shared_memory_object::remove(it->second.name.c_str());
  segments_.erase(it);
  if (on_retire_) on_retire_(id);
}

const HostPool::Segment* HostPool::segment(uint32_t id) const {
  auto it = segments_.find(id);
  return it == segments_.end() ? nullptr : &it->second;
}

HostPoolStats HostPool::stats() const {
  HostPoolStats s;
  s.capacity = options_.capacity;
  s.reserved = reserved_;
  s.segments = static_cast<uint32_t>(segments_.size());
  for (const auto& [id, seg] : segments_) {
    s.used += seg.allocator.used();
    s.free_in_segments += seg.allocator.free();
    s.largest_block = std::max(s.largest_block, seg.allocator.largest_free());
    if (!seg.dedicated) s.largest_free = std::max(s.largest_free, seg.allocator.largest_free());
  }
  if (!options_.prefault) {
    s.largest_free = std::max(s.largest_free, budget_->capacity - budget_->reserved);
  }
  return s;
}

std::string HostPool::NamePrefix(const std::string& socket_path) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : socket_path) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return fmt::format("depot-{}-{:012x}-", ::getuid(), h & 0xffffffffffffull);
}

int HostPool::RemoveStale(const std::string& prefix) {
  DIR* dir = ::opendir(kShmDir);
  if (dir == nullptr) return 0;
  int removed = 0;
  while (dirent* e = ::readdir(dir)) {
    std::string_view name(e->d_name);
    if (name.starts_with(prefix) && bip::shared_memory_object::remove(e->d_name)) ++removed;
  }
  ::closedir(dir);
  return removed;
}

uint64_t HostPool::UsableCapacity(uint64_t capacity) { return capacity / kPage * kPage; }

uint64_t HostPool::ShmAvailable() {
  struct statvfs st {};
  if (::statvfs(kShmDir, &st) != 0) return 0;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

}  // namespace depot
