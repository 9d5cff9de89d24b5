#include "client/src/segment_map.h"

#include <fcntl.h>

#include <algorithm>

#include <fmt/format.h>

namespace depot::internal {
namespace {

constexpr uint64_t kPopulateGranule = 2 << 20;

uint64_t SegmentKey(uint32_t pool, uint32_t id) { return uint64_t{pool} << 32 | id; }

}  // namespace

SegmentMap::~SegmentMap() {
  for (auto& [key, s] : segments_) Unmap(s);
}

void SegmentMap::AddShared(SegmentFd segment) {
  std::lock_guard lk(mu_);
  auto [it, inserted] = segments_.try_emplace(SegmentKey(segment.pool, segment.id));
  if (inserted) {
    it->second.size = segment.size;
    it->second.pool = segment.pool;
  }
  Keep(it->second, std::move(segment.fd));
}

void SegmentMap::Keep(Segment& s, UniqueFd fd) {
  int mode = ::fcntl(fd.get(), F_GETFL);
  UniqueFd& slot = mode >= 0 && (mode & O_ACCMODE) == O_RDONLY ? s.ro_fd : s.rw_fd;
  if (!slot.valid()) slot = std::move(fd);
}

void SegmentMap::Retire(const wire::SegmentsRetired& notice) {
  std::lock_guard lk(mu_);
  if (notice.ids() == nullptr) return;
  for (uint32_t id : *notice.ids()) {
    auto it = segments_.find(SegmentKey(notice.pool(), id));
    if (it == segments_.end()) continue;
    it->second.retired = true;
    if (it->second.uses == 0) {
      Unmap(it->second);
      segments_.erase(it);
    }
  }
}

Result<std::vector<std::span<std::byte>>> SegmentMap::MapFrames(
    const flatbuffers::Vector<const wire::FrameLocation*>* frames, bool writable,
    std::vector<SegmentFd>& dedicated, std::vector<uint64_t>& uses,
    std::vector<std::span<std::byte>>* unpopulated) {
  std::vector<std::span<std::byte>> out;
  if (frames == nullptr) return out;
  std::lock_guard lk(mu_);
  for (auto& d : dedicated) {
    if (!d.fd.valid()) continue;
    auto [it, inserted] = segments_.try_emplace(SegmentKey(d.pool, d.id));
    if (inserted) {
      it->second.size = d.size;
      it->second.dedicated = true;
      it->second.pool = d.pool;
    }
    Keep(it->second, std::move(d.fd));
  }
  Status failed;
  for (const wire::FrameLocation* f : *frames) {
    if (f->size() == 0) {
      out.emplace_back();
      continue;
    }
    uint64_t key = SegmentKey(f->pool(), f->segment());
    auto it = segments_.find(key);
    if (it == segments_.end() || f->offset() + f->size() > it->second.size ||
        f->offset() + f->size() < f->offset()) {
      failed = Status::ProtocolError(
          fmt::format("depotd named bytes {}+{} of segment {} that this process cannot map",
                      f->offset(), f->size(), f->segment()));
      break;
    }
    Segment& s = it->second;
    void*& base = writable ? s.rw : s.ro;
    if (base == nullptr) {
      if (failed = Map(s, writable, base); !failed.ok()) break;
      if (writable) {
        s.rw_populated.assign((s.size + kPopulateGranule - 1) / kPopulateGranule, false);
      }
    }
    ++s.uses;
    uses.push_back(key);
    out.emplace_back(static_cast<std::byte*>(base) + f->offset(), f->size());
    if (writable && unpopulated != nullptr && !s.cuda) {
      for (uint64_t g = f->offset() / kPopulateGranule;
           g * kPopulateGranule < f->offset() + f->size(); ++g) {
        if (s.rw_populated[g]) continue;
        s.rw_populated[g] = true;
        uint64_t start = g * kPopulateGranule;
        uint64_t len = std::min(kPopulateGranule, s.size - start);
        unpopulated->emplace_back(static_cast<std::byte*>(base) + start, len);
      }
    }
  }
  if (!failed.ok()) {
    // Give back what this call took, under the lock we hold.
    for (uint64_t key : uses) --segments_[key].uses;
    uses.clear();
    return failed;
  }
  return out;
}

void SegmentMap::DropUses(const std::vector<uint64_t>& uses) {
  std::lock_guard lk(mu_);
  for (uint64_t id : uses) {
    auto it = segments_.find(id);
    if (it == segments_.end() || --it->second.uses > 0) continue;
    if (it->second.dedicated || it->second.retired) {
      Unmap(it->second);
      segments_.erase(it);
    }
  }
}

void SegmentMap::DropIdle(const std::vector<SegmentFd>& dedicated) {
  std::lock_guard lk(mu_);
  for (const SegmentFd& d : dedicated) {
    auto it = segments_.find(SegmentKey(d.pool, d.id));
    if (it == segments_.end() || !it->second.dedicated || it->second.uses > 0) continue;
    Unmap(it->second);
    segments_.erase(it);
  }
}

Status SegmentMap::PinHostMemory() {
  if (Status loaded = cuda_.Load(); !loaded.ok()) return loaded;
  std::lock_guard lk(mu_);
  pin_host_ = true;
  for (auto& [key, s] : segments_) {
    if (s.pool != 0) continue;
    if (Status st = Pin(s, s.ro ? s.ro : s.rw); !st.ok()) return st;
  }
  return Status::OK();
}

Status SegmentMap::Map(Segment& s, bool writable, void*& base) {
  bool cuda = s.pool != 0 && pools_.IsCuda(s.pool);
  // A read-only mapping comes from the read-only fd; only a device chunk without one (CUDA) is
  // read through the one fd the daemon has for it.
  const UniqueFd& fd = writable || (s.pool != 0 && !s.ro_fd.valid()) ? s.rw_fd : s.ro_fd;
  if (!fd.valid()) {
    return Status::ProtocolError(fmt::format("depotd sent no {} fd for segment of pool {}",
                                             writable ? "read-write" : "read-only", s.pool));
  }
  auto mapped = MapperFor(cuda).Map(fd.get(), s.size, s.pool, writable);
  if (!mapped.ok()) return mapped.status();
  s.cuda = cuda;
  base = *mapped;
  return s.pool == 0 ? Pin(s, base) : Status::OK();
}

Status SegmentMap::Pin(Segment& s, void* base) {
  if (!pin_host_ || s.pinned || base == nullptr) return Status::OK();
  // One registration per segment: the read-only mapping when there is one.
  if (Status st = cuda_.Pin(base, s.size, base == s.ro); !st.ok()) return st;
  s.pinned = true;
  return Status::OK();
}

void SegmentMap::Unmap(Segment& s) {
  if (s.pinned) cuda_.Unpin(s.ro ? s.ro : s.rw);
  for (void* base : {s.ro, s.rw}) {
    if (base != nullptr) MapperFor(s.cuda).Unmap(base, s.size);
  }
  s.ro = s.rw = nullptr;
  s.pinned = false;
}

}  // namespace depot::internal
