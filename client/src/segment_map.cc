#include "client/src/segment_map.h"

#include <fcntl.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <mutex>

namespace depot::internal {
namespace {

constexpr uint64_t kPopulateGranule = 2 << 20;

uint64_t SegmentKey(uint32_t pool, uint32_t id) { return uint64_t{pool} << 32 | id; }

// A mapping that could not be undone stays as it is, its address range never reused, and no
// caller waits for the answer: the library has no log, so the first such failure of the process
// is written to stderr, the one sign of memory that stays mapped. None is expected but in a
// child forked since the driver was loaded, where nothing is undone on purpose.
void Report(const Status& st) {
  static std::once_flag once;
  std::call_once(once, [&] {
    std::fprintf(stderr, "depot: a mapping stays in place: %s (later failures are not reported)\n",
                 st.message().c_str());
  });
}

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

std::vector<uint8_t> SegmentMap::Retire(const wire::SegmentsRetired& notice) {
  std::vector<uint64_t> dropped;
  {
    std::lock_guard lk(mu_);
    if (notice.ids() == nullptr) return {};
    for (uint32_t id : *notice.ids()) {
      uint64_t key = SegmentKey(notice.pool(), id);
      auto it = segments_.find(key);
      if (it != segments_.end()) {
        it->second.retired = true;
        if (it->second.uses > 0) continue;  // dropped with its last use
        Unmap(it->second);
        segments_.erase(it);
      }
      dropped.push_back(key);
    }
  }
  return DroppedMessage(std::move(dropped));
}

void SegmentMap::RetireAll() {
  std::lock_guard lk(mu_);
  for (auto it = segments_.begin(); it != segments_.end();) {
    it->second.retired = true;
    if (it->second.uses > 0) {
      ++it;  // unmapped with its last use
      continue;
    }
    Unmap(it->second);
    it = segments_.erase(it);
  }
}

std::vector<uint8_t> SegmentMap::DroppedMessage(std::vector<uint64_t> keys) {
  if (keys.empty()) return {};  // the common case, each time an object is let go: no atomic
  retired_drops_.fetch_add(keys.size(), std::memory_order_relaxed);
  std::sort(keys.begin(), keys.end());
  std::vector<uint8_t> out;
  for (auto first = keys.begin(); first != keys.end();) {
    auto pool = static_cast<uint32_t>(*first >> 32);
    auto last = std::find_if(first, keys.end(), [&](uint64_t k) { return k >> 32 != pool; });
    std::vector<uint32_t> ids;
    for (auto it = first; it != last; ++it) ids.push_back(static_cast<uint32_t>(*it));
    flatbuffers::FlatBufferBuilder fbb(64 + 4 * ids.size());
    fbb.Finish(wire::CreateSegmentsRetired(fbb, fbb.CreateVector(ids), pool));
    auto msg = proto::Encode(static_cast<uint16_t>(proto::MsgType::kSegmentsDropped), 0, fbb);
    out.insert(out.end(), msg.begin(), msg.end());
    first = last;
  }
  return out;
}

Result<std::vector<std::span<std::byte>>> SegmentMap::MapFrames(
    const flatbuffers::Vector<const wire::FrameLocation*>* frames, bool writable,
    std::vector<SegmentFd>& dedicated, SegmentUses& uses,
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

bool SegmentMap::MapIndexed(std::span<const wire::FrameLocation> frames, SegmentUses& uses,
                            FrameViews& views) {
  std::lock_guard lk(mu_);
  return MapIndexedLocked(frames, uses, views);
}

void SegmentMap::MapIndexedMany(std::span<IndexedFrames> objects) {
  std::lock_guard lk(mu_);
  for (IndexedFrames& o : objects) o.mapped = MapIndexedLocked(o.frames, *o.uses, *o.views);
}

bool SegmentMap::MapIndexedLocked(std::span<const wire::FrameLocation> frames, SegmentUses& uses,
                                  FrameViews& views) {
  size_t first = uses.size(), first_view = views.size();
  for (const wire::FrameLocation& f : frames) {
    if (f.size() == 0) {
      views.emplace_back();
      continue;
    }
    uint64_t key = SegmentKey(f.pool(), f.segment());
    auto it = segments_.find(key);
    // A host segment this connection writes in (its own uid's) is read through that mapping when
    // it has no read-only one: the views are const either way. A device chunk's read-write
    // mapping would let the GPU write, so only its read-only one serves.
    void* base = nullptr;
    if (it != segments_.end()) {
      base = it->second.ro != nullptr || it->second.cuda ? it->second.ro : it->second.rw;
    }
    if (base == nullptr || it->second.retired || it->second.dedicated ||
        f.offset() + f.size() > it->second.size || f.offset() + f.size() < f.offset()) {
      for (size_t i = first; i < uses.size(); ++i) --segments_[uses[i]].uses;
      uses.resize(first);
      views.resize(first_view);
      return false;
    }
    ++it->second.uses;
    uses.push_back(key);
    views.emplace_back(static_cast<const std::byte*>(base) + f.offset(), f.size());
  }
  return true;
}

std::vector<uint8_t> SegmentMap::DropUses(std::span<const uint64_t> uses) {
  std::vector<uint64_t> dropped;
  {
    std::lock_guard lk(mu_);
    for (uint64_t key : uses) {
      auto it = segments_.find(key);
      if (it == segments_.end() || --it->second.uses > 0) continue;
      if (!it->second.dedicated && !it->second.retired) continue;
      // A dedicated segment gets no notice: the daemon frees it only after this process's
      // release (or seal, or abort), which is sent after this.
      if (it->second.retired) dropped.push_back(key);
      Unmap(it->second);
      segments_.erase(it);
    }
  }
  return DroppedMessage(std::move(dropped));
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
  auto pinned = cuda_.Pin(base, s.size, base == s.ro);
  if (!pinned.ok()) return pinned.status();
  if (*pinned) s.pinned = base;
  return Status::OK();
}

void SegmentMap::Unmap(Segment& s) {
  // In a child forked since the map was made, CUDA's pins and mappings are the parent's: only
  // the host mappings are undone.
  bool forked = made_.forked();
  if (forked && s.cuda) return;
  if (s.pinned != nullptr && !forked) {
    if (Status st = cuda_.Unpin(s.pinned); !st.ok()) Report(st);
  }
  for (void* base : {s.ro, s.rw}) {
    if (base == nullptr) continue;
    if (Status st = MapperFor(s.cuda).Unmap(base, s.size); !st.ok()) Report(st);
  }
  s.ro = s.rw = nullptr;
  s.pinned = nullptr;
}

}  // namespace depot::internal
