#include "client/src/connection.h"

#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#ifdef DEPOT_HAVE_CUDA
#include "common/cuda_driver.h"
#include "common/unix_socket.h"
#endif

namespace depot::internal {
namespace {

constexpr size_t kReadChunk = 64 << 10;
constexpr uint64_t kPopulateGranule = 2 << 20;
constexpr auto kSpin = std::chrono::microseconds(50);
constexpr auto kReleaseDelay = std::chrono::milliseconds(1);
constexpr size_t kMaxWaitingReleases = 256;

Status FromError(const wire::ErrorReply& e) { return proto::ToStatus(e.code(), e.message()); }

}  // namespace

Holding::~Holding() { conn->Forget(*this); }

Connection::Connection(UniqueFd fd, std::string path)
    : fd_(std::move(fd)), path_(std::move(path)), in_(kReadChunk) {}

Connection::~Connection() {
  {
    std::lock_guard lk(release_mu_);
    stopping_ = true;
  }
  release_cv_.notify_all();
  if (flusher_.joinable()) flusher_.join();
  for (auto& [id, s] : segments_) Unmap(s);
}

Result<std::shared_ptr<Connection>> Connection::Open(const std::string& path,
                                                     const std::string& name) {
  UniqueFd fd = ConnectUnix(path);
  if (!fd.valid() && errno == ENAMETOOLONG) {
    return Status::InvalidArgument(fmt::format("socket path {} is too long", path));
  }
  if (!fd.valid()) {
    return Status::Unavailable(fmt::format(
        "no depotd is listening at {} ({}): is the service running (`systemctl status depotd`)? "
        "Or start one with `depotd --socket {}`, or point DEPOT_SOCKET at the right socket",
        path, std::strerror(errno), path));
  }
  std::shared_ptr<Connection> conn(new Connection(std::move(fd), path));
  flatbuffers::FlatBufferBuilder fbb(128);
  auto client_name = fbb.CreateString(name);
  fbb.Finish(wire::CreateHelloRequest(fbb, proto::kProtocolVersion, client_name));
  auto reply = conn->Call(proto::MsgType::kHello, fbb);
  if (!reply.ok()) return reply.status();
  const auto* hello = proto::Body<wire::HelloReply>(reply->body);
  conn->hugepages_ = hello->hugepages();
  if (hello->devices_unavailable()) conn->devices_unavailable_ = hello->devices_unavailable()->str();
  conn->device_pools_ = DevicePoolsFromWire(hello->device_pools());
  return conn;
}

Status Connection::Send(const std::vector<uint8_t>& bytes, bool* peer_closed) {
  std::lock_guard lk(send_mu_);
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd_.get(), bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (peer_closed) *peer_closed = errno == EPIPE || errno == ECONNRESET;
      return Status::Disconnected(
          fmt::format("lost the connection to depotd at {}: {}", path_, std::strerror(errno)));
    }
    sent += static_cast<size_t>(n);
  }
  return Status::OK();
}

Result<Message> Connection::Call(proto::MsgType type, flatbuffers::FlatBufferBuilder& fbb) {
  uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
  Slot slot;
  {
    std::lock_guard lk(mu_);
    if (!broken_.ok()) return broken_;
    pending_[id] = &slot;
  }
  std::vector<uint8_t> bytes;
  {
    std::lock_guard lk(release_mu_);
    bytes = TakeReleases();
  }
  std::vector<uint8_t> request = proto::Encode(static_cast<uint16_t>(type), id, fbb);
  bytes.insert(bytes.end(), request.begin(), request.end());
  bool peer_closed = false;
  Status sent = Send(bytes, &peer_closed);
  if (!sent.ok() && !peer_closed) {
    std::lock_guard lk(mu_);
    Fail(sent);
  }
  // When the daemon closed the connection, what it said before closing (an error saying why)
  // is still there to read: the wait below reads it, or the end of the stream.
  Status st = Wait(id, slot);
  if (!st.ok()) return st;
  if (slot.message.type() == static_cast<uint16_t>(proto::MsgType::kError)) {
    return FromError(*proto::Body<wire::ErrorReply>(slot.message.body));
  }
  if (slot.message.type() != proto::ReplyType(type)) {
    return Status::ProtocolError(fmt::format("depotd answered a {} with a {}",
                                             proto::TypeName(static_cast<uint16_t>(type)),
                                             proto::TypeName(slot.message.type())));
  }
  return std::move(slot.message);
}

Status Connection::Wait(uint64_t id, Slot& slot) {
  std::unique_lock lk(mu_);
  while (!slot.done) {
    if (reading_) {
      cv_.wait(lk);
      continue;
    }
    reading_ = true;
    lk.unlock();
    Status st = ReadSome();
    lk.lock();
    reading_ = false;
    if (!st.ok()) Fail(st);
    cv_.notify_all();  // replies for others, or the reader role for the next waiter
  }
  pending_.erase(id);
  return slot.status;
}

Result<Message> Connection::NextEvent(std::chrono::milliseconds timeout) {
  std::optional<std::chrono::steady_clock::time_point> deadline;
  if (timeout.count() >= 0) deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock lk(mu_);
  while (events_.empty()) {
    if (!broken_.ok()) return broken_;
    if (reading_) {
      if (!deadline) {
        cv_.wait(lk);
      } else if (cv_.wait_until(lk, *deadline) == std::cv_status::timeout && events_.empty()) {
        return Status::Timeout("no event before the timeout");
      }
      continue;
    }
    reading_ = true;
    lk.unlock();
    Status st = ReadSome(deadline);
    lk.lock();
    reading_ = false;
    cv_.notify_all();
    if (st.IsTimeout()) return st;
    if (!st.ok()) Fail(st);
  }
  Message m = std::move(events_.front());
  events_.pop_front();
  return m;
}

void Connection::Fail(const Status& st) {
  if (broken_.ok()) broken_ = st;
  for (auto& [id, slot] : pending_) {
    if (!slot->done) {
      slot->done = true;
      slot->status = broken_;
    }
  }
  cv_.notify_all();
}

Status Connection::ReadSome(std::optional<std::chrono::steady_clock::time_point> deadline) {
  while (true) {
    bool dispatched = false;
    while (in_end_ - in_begin_ >= sizeof(proto::Header)) {
      proto::Header h;
      std::memcpy(&h, in_.data() + in_begin_, sizeof h);
      if (std::string err = proto::CheckHeader(h); !err.empty()) {
        return Status::ProtocolError(fmt::format("from depotd at {}: {}", path_, err));
      }
      size_t total = sizeof h + h.length;
      if (in_end_ - in_begin_ < total) {
        if (in_.size() - in_begin_ < total) in_.resize(in_begin_ + total + kReadChunk);
        break;
      }
      Status st = Dispatch(h, {in_.data() + in_begin_ + sizeof h, h.length});
      in_begin_ += total;
      if (!st.ok()) return st;
      dispatched = true;
    }
    if (dispatched) return Status::OK();
    if (in_begin_ == in_end_) in_begin_ = in_end_ = 0;
    if (in_.size() - in_end_ < kReadChunk / 2) {
      std::memmove(in_.data(), in_.data() + in_begin_, in_end_ - in_begin_);
      in_end_ -= in_begin_;
      in_begin_ = 0;
      if (in_.size() - in_end_ < kReadChunk / 2) in_.resize(in_end_ + kReadChunk);
    }
    if (deadline) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline -
                                                               std::chrono::steady_clock::now());
      pollfd p{fd_.get(), POLLIN, 0};
      int ready = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
      if (ready == 0) return Status::Timeout("no event before the timeout");
      if (ready < 0 && errno != EINTR) {
        return Status::Disconnected(fmt::format("poll on {}: {}", path_, std::strerror(errno)));
      }
      if (ready < 0) continue;
    }
    std::vector<UniqueFd> fds;
    std::span<uint8_t> space(in_.data() + in_end_, in_.size() - in_end_);
    // A reply usually comes within a few microseconds. Going to sleep and being woken costs far
    // more than that when the daemon runs on another CPU (the wake of a halted vCPU), so look
    // for it a little while first, yielding so that a daemon sharing this CPU can run.
    ssize_t n = -1;
    auto spin_until = std::chrono::steady_clock::now() + kSpin;
    do {
      n = proto::RecvWithFds(fd_.get(), space, fds, MSG_DONTWAIT);
      if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) break;
      ::sched_yield();
    } while (std::chrono::steady_clock::now() < spin_until);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      n = proto::RecvWithFds(fd_.get(), space, fds, 0);
    }
    for (auto& fd : fds) fds_.push_back(std::move(fd));
    if (n == 0) {
      return Status::Disconnected(fmt::format("depotd at {} closed the connection", path_));
    }
    if (n < 0) {
      return Status::Disconnected(
          fmt::format("lost the connection to depotd at {}: {}", path_, std::strerror(errno)));
    }
    in_end_ += static_cast<size_t>(n);
  }
}

Status Connection::Dispatch(const proto::Header& h, std::span<const uint8_t> body) {
  if (!proto::VerifyBody(h.type, body)) {
    return Status::ProtocolError(
        fmt::format("depotd sent a malformed {}", proto::TypeName(h.type)));
  }
  if (h.type == static_cast<uint16_t>(proto::MsgType::kError) && h.request_id == 0) {
    // An error about the connection itself (too many clients, for one): it ends the connection.
    return FromError(*proto::Body<wire::ErrorReply>(body));
  }
  if (h.type == static_cast<uint16_t>(proto::MsgType::kEvent)) {
    Message event;
    event.header = h;
    event.body.assign(body.begin(), body.end());
    std::lock_guard lk(mu_);
    events_.push_back(std::move(event));
    return Status::OK();
  }
  if (h.type == static_cast<uint16_t>(proto::MsgType::kSegmentsRetired)) {
    std::lock_guard lk(seg_mu_);
    const auto* retired = proto::Body<wire::SegmentsRetired>(body);
    if (retired->ids() == nullptr) return Status::OK();
    for (uint32_t id : *retired->ids()) {
      auto it = segments_.find(uint64_t{retired->pool()} << 32 | id);
      if (it == segments_.end()) continue;
      it->second.retired = true;
      if (it->second.uses == 0) {
        Unmap(it->second);
        segments_.erase(it);
      }
    }
    return Status::OK();
  }
  Message msg;
  msg.header = h;
  const flatbuffers::Vector<flatbuffers::Offset<wire::SegmentInfo>>* infos = nullptr;
  if (h.type == proto::ReplyType(proto::MsgType::kCreate)) {
    infos = proto::Body<wire::CreateReply>(body)->segments();
  } else if (h.type == proto::ReplyType(proto::MsgType::kGet)) {
    infos = proto::Body<wire::GetReply>(body)->segments();
  }
  if (infos != nullptr) {
    std::lock_guard lk(seg_mu_);
    for (const wire::SegmentInfo* info : *infos) {
      if (fds_.empty()) return Status::ProtocolError("depotd named a segment but sent no fd");
      UniqueFd fd = std::move(fds_.front());
      fds_.pop_front();
      uint64_t key = uint64_t{info->pool()} << 32 | info->id();
      if (info->dedicated()) {
        msg.dedicated.push_back({info->pool(), info->id(), info->size(), std::move(fd)});
      } else if (!segments_.contains(key)) {
        Segment& s = segments_[key];
        s.fd = std::move(fd);
        s.size = info->size();
        s.pool = info->pool();
      }
    }
  }
  msg.body.assign(body.begin(), body.end());
  std::lock_guard lk(mu_);
  auto it = pending_.find(h.request_id);
  if (it != pending_.end() && !it->second->done) {
    it->second->message = std::move(msg);
    it->second->done = true;
  }
  return Status::OK();
}

Result<std::vector<std::span<std::byte>>> Connection::MapFrames(
    const flatbuffers::Vector<const wire::FrameLocation*>* frames, bool writable, Message& reply,
    std::vector<uint64_t>& uses, std::vector<std::span<std::byte>>* unpopulated) {
  std::vector<std::span<std::byte>> out;
  if (frames == nullptr) return out;
  std::lock_guard lk(seg_mu_);
  for (auto& d : reply.dedicated) {
    if (!d.fd.valid()) continue;
    auto [it, inserted] = segments_.try_emplace(uint64_t{d.pool} << 32 | d.id);
    if (inserted) {
      it->second.fd = std::move(d.fd);
      it->second.size = d.size;
      it->second.dedicated = true;
      it->second.pool = d.pool;
    }
    d.fd.reset();
  }
  Status failed;
  for (const wire::FrameLocation* f : *frames) {
    if (f->size() == 0) {
      out.emplace_back();
      continue;
    }
    uint64_t key = uint64_t{f->pool()} << 32 | f->segment();
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
      if (failed = Map(s, writable, &base); !failed.ok()) break;
      if (writable) s.rw_populated.assign((s.size + kPopulateGranule - 1) / kPopulateGranule, false);
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

void Connection::DropUses(const std::vector<uint64_t>& uses) {
  std::lock_guard lk(seg_mu_);
  for (uint64_t id : uses) {
    auto it = segments_.find(id);
    if (it == segments_.end() || --it->second.uses > 0) continue;
    if (it->second.dedicated || it->second.retired) {
      Unmap(it->second);
      segments_.erase(it);
    }
  }
}

Result<uint32_t> Connection::PoolOf(const Place& place) const {
  if (place.host()) return 0u;
  for (const DevicePoolInfo& p : device_pools_) {
    if (p.uuid == place.gpu) return p.pool;
  }
  if (auto pools = DevicePools(); !pools.ok()) return pools.status();
  return Status::InvalidArgument(fmt::format("depotd has no device pool on {}", place.gpu));
}

std::vector<Place> Connection::Places(
    const flatbuffers::Vector<const wire::FrameLocation*>* frames) const {
  std::vector<Place> places;
  if (frames == nullptr) return places;
  bool device = std::any_of(frames->begin(), frames->end(),
                            [](const wire::FrameLocation* f) { return f->pool() != 0; });
  if (!device) return places;  // empty: every frame on the host
  for (const wire::FrameLocation* f : *frames) places.push_back(PlaceOf(f->pool()));
  return places;
}

std::vector<DevicePoolInfo> DevicePoolsFromWire(
    const flatbuffers::Vector<flatbuffers::Offset<wire::DevicePoolInfo>>* pools) {
  std::vector<DevicePoolInfo> out;
  if (pools == nullptr) return out;
  auto str = [](const flatbuffers::String* s) { return s ? s->str() : std::string(); };
  for (const wire::DevicePoolInfo* p : *pools) {
    out.push_back({p->pool(), str(p->uuid()), str(p->name()), str(p->kind()), p->capacity(),
                   p->chunk_size(), p->reserved(), p->used(), p->chunks()});
  }
  return out;
}

Result<std::vector<DevicePoolInfo>> Connection::DevicePools() const {
  if (device_pools_.empty()) {
    return Status::Unavailable(fmt::format("device pools: unavailable ({})", devices_unavailable_));
  }
  return device_pools_;
}

Place Connection::PlaceOf(uint32_t pool) const {
  for (const DevicePoolInfo& p : device_pools_) {
    if (p.pool == pool) return Place::Gpu(p.uuid);
  }
  return Place::Host();
}

namespace {
bool IsCudaPool(const std::vector<DevicePoolInfo>& pools, uint32_t pool) {
  for (const DevicePoolInfo& p : pools) {
    if (p.pool == pool) return p.kind == "cuda";
  }
  return false;
}
}  // namespace

Status Connection::Map(Segment& s, bool writable, void** base) {
  if (s.pool != 0 && IsCudaPool(device_pools_, s.pool)) {
#ifdef DEPOT_HAVE_CUDA
    auto cu = LoadCudaDriver();
    if (!cu.ok()) return cu.status();
    auto device = LocalDevice(s.pool);
    if (!device.ok()) return device.status();
    // Chunks are imported per mapping; the mapping keeps the memory alive after the handle goes.
    CUmemGenericAllocationHandle handle;
    CUresult r = (*cu)->MemImportFromShareableHandle(
        &handle, reinterpret_cast<void*>(static_cast<intptr_t>(s.fd.get())),
        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS) return Status::Unavailable((*cu)->Error(r, "cuMemImportFromShareableHandle"));
    CUdeviceptr ptr = 0;
    r = (*cu)->MemAddressReserve(&ptr, s.size, 0, 0, 0);
    if (r == CUDA_SUCCESS) r = (*cu)->MemMap(ptr, s.size, 0, handle, 0);
    (*cu)->MemRelease(handle);
    if (r != CUDA_SUCCESS) {
      if (ptr != 0) (*cu)->MemAddressFree(ptr, s.size);
      return Status::Unavailable((*cu)->Error(r, "cuMemMap"));
    }
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = *device;
    access.flags = writable ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_READ;
    if (r = (*cu)->MemSetAccess(ptr, s.size, &access, 1); r != CUDA_SUCCESS) {
      (*cu)->MemUnmap(ptr, s.size);
      (*cu)->MemAddressFree(ptr, s.size);
      return Status::Unavailable((*cu)->Error(r, "cuMemSetAccess"));
    }
    s.cuda = true;
    *base = reinterpret_cast<void*>(ptr);
    return Status::OK();
#else
    return Status::Unavailable("this libdepot is built without CUDA support");
#endif
  }
  // Host segments, and the test stand-in for device chunks (memfd), are plain mappings.
  void* p = ::mmap(nullptr, s.size, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED,
                   s.fd.get(), 0);
  if (p == MAP_FAILED) {
    return Status::Unavailable(
        fmt::format("cannot map a segment of {} bytes: {}", s.size, std::strerror(errno)));
  }
  if (hugepages_ && s.pool == 0) ::madvise(p, s.size, MADV_HUGEPAGE);
  *base = p;
  return s.pool == 0 ? Pin(s, p) : Status::OK();
}

Status Connection::Pin(Segment& s, void* base) {
  if (!pin_host_ || s.pinned || base == nullptr) return Status::OK();
#ifdef DEPOT_HAVE_CUDA
  auto cu = LoadCudaDriver();
  if (!cu.ok()) return cu.status();
  // One registration per segment: the read-only mapping when there is one.
  unsigned flags = base == s.ro ? CU_MEMHOSTREGISTER_READ_ONLY : 0;
  if (CUresult r = (*cu)->MemHostRegister(base, s.size, flags); r != CUDA_SUCCESS) {
    return Status::Unavailable((*cu)->Error(r, "cuMemHostRegister"));
  }
  s.pinned = true;
  return Status::OK();
#else
  return Status::Unavailable("this libdepot is built without CUDA support");
#endif
}

Status Connection::PinHostMemory() {
#ifdef DEPOT_HAVE_CUDA
  if (auto cu = LoadCudaDriver(); !cu.ok()) return cu.status();
  std::lock_guard lk(seg_mu_);
  pin_host_ = true;
  for (auto& [key, s] : segments_) {
    if (s.pool != 0) continue;
    if (Status st = Pin(s, s.ro ? s.ro : s.rw); !st.ok()) return st;
  }
  return Status::OK();
#else
  return Status::Unavailable("this libdepot is built without CUDA support");
#endif
}

Result<int> Connection::LocalDevice(uint32_t pool) const {
#ifdef DEPOT_HAVE_CUDA
  auto cu = LoadCudaDriver();
  if (!cu.ok()) return cu.status();
  Place place = PlaceOf(pool);
  int count = 0;
  (*cu)->DeviceGetCount(&count);
  for (int i = 0; i < count; ++i) {
    CUdevice dev;
    CUuuid uuid;
    if ((*cu)->DeviceGet(&dev, i) != CUDA_SUCCESS || (*cu)->DeviceGetUuid(&uuid, dev) != CUDA_SUCCESS) {
      continue;
    }
    if (FormatGpuUuid(uuid) != place.gpu) continue;
    // The runtime API works in the primary context: make sure it exists for this device.
    CUcontext ctx;
    (*cu)->DevicePrimaryCtxRetain(&ctx, dev);
    return static_cast<int>(dev);
  }
  return Status::Unavailable(fmt::format("{} is not visible to this process (CUDA_VISIBLE_DEVICES?)",
                                         place.gpu));
#else
  (void)pool;
  return Status::Unavailable("this libdepot is built without CUDA support");
#endif
}

Status Connection::CopyIn(std::span<std::byte> dst, std::span<const std::byte> src,
                          const Place& place) const {
  if (dst.empty()) return Status::OK();
  auto pool = PoolOf(place);
  if (!pool.ok()) return pool.status();
  if (*pool == 0 || !IsCudaPool(device_pools_, *pool)) {
    std::memcpy(dst.data(), src.data(), dst.size());
    return Status::OK();
  }
#ifdef DEPOT_HAVE_CUDA
  auto cu = LoadCudaDriver();
  if (!cu.ok()) return cu.status();
  CUresult r = (*cu)->MemcpyHtoD(reinterpret_cast<CUdeviceptr>(dst.data()), src.data(), dst.size());
  if (r != CUDA_SUCCESS) return Status::Unavailable((*cu)->Error(r, "cuMemcpyHtoD"));
  return Status::OK();
#else
  return Status::Unavailable("this libdepot is built without CUDA support");
#endif
}

Status Connection::SyncDevices(const std::vector<Place>& places, void* cuda_stream) const {
  bool cuda = false;
  for (const Place& p : places) {
    auto pool = PoolOf(p);
    cuda = cuda || (pool.ok() && IsCudaPool(device_pools_, *pool));
  }
  if (!cuda) return Status::OK();
#ifdef DEPOT_HAVE_CUDA
  auto cu = LoadCudaDriver();
  if (!cu.ok()) return cu.status();
  CUresult r = (*cu)->StreamSynchronize(static_cast<CUstream>(cuda_stream));
  if (r != CUDA_SUCCESS) return Status::Unavailable((*cu)->Error(r, "cuStreamSynchronize"));
  return Status::OK();
#else
  (void)cuda_stream;
  return Status::Unavailable("this libdepot is built without CUDA support");
#endif
}

void Connection::Unmap(Segment& s) {
  if (s.cuda) {
#ifdef DEPOT_HAVE_CUDA
    auto cu = LoadCudaDriver();
    for (void* base : {s.ro, s.rw}) {
      if (base == nullptr || !cu.ok()) continue;
      (*cu)->MemUnmap(reinterpret_cast<CUdeviceptr>(base), s.size);
      (*cu)->MemAddressFree(reinterpret_cast<CUdeviceptr>(base), s.size);
    }
#endif
  } else {
#ifdef DEPOT_HAVE_CUDA
    if (s.pinned) (*LoadCudaDriver())->MemHostUnregister(s.ro ? s.ro : s.rw);
#endif
    if (s.ro) ::munmap(s.ro, s.size);
    if (s.rw) ::munmap(s.rw, s.size);
  }
  s.ro = s.rw = nullptr;
  s.pinned = false;
}

std::optional<Object> Connection::Cached(const Guid& guid) {
  std::lock_guard lk(cache_mu_);
  auto it = cache_.find(guid);
  if (it == cache_.end()) return std::nullopt;
  std::shared_ptr<Holding> h = it->second.holding.lock();
  if (!h) return std::nullopt;
  return Object(std::move(h));
}

Result<Object> Connection::Adopt(const Guid& guid, const wire::GetResult& r, Message& reply) {
  auto h = std::make_shared<Holding>();
  h->conn = shared_from_this();
  h->guid = guid;
  h->handle = r.handle();
  auto frames = MapFrames(r.frames(), false, reply, h->segment_uses);
  if (!frames.ok()) return frames.status();  // h's destruction releases the reference
  for (auto& f : *frames) {
    h->frames.emplace_back(f.data(), f.size());
    h->size += f.size();
  }
  h->places = Places(r.frames());
  if (r.metadata()) {
    auto* m = reinterpret_cast<const std::byte*>(r.metadata()->data());
    h->metadata.assign(m, m + r.metadata()->size());
  }
  if (r.checksum()) h->checksum = *r.checksum();
  {
    std::lock_guard lk(cache_mu_);
    cache_[h->guid] = CacheEntry{h, h.get()};
  }
  return Object(std::move(h));
}

void Connection::Forget(Holding& h) {
  {
    std::lock_guard lk(cache_mu_);
    auto it = cache_.find(h.guid);
    if (it != cache_.end() && it->second.raw == &h) cache_.erase(it);
  }
  DropUses(h.segment_uses);
  if (h.handle != 0) QueueRelease(h.handle);
}

void Connection::QueueRelease(uint64_t handle) {
  std::vector<uint8_t> now;
  bool wake = false;
  {
    std::lock_guard lk(release_mu_);
    if (releases_.empty()) oldest_release_ = std::chrono::steady_clock::now();
    releases_.push_back(handle);
    if (releases_.size() >= kMaxWaitingReleases) now = TakeReleases();
    if (!flusher_.joinable()) flusher_ = std::thread([this] { FlushReleases(); });
    // Only an idle flusher needs waking: a busy one already waits for the oldest release's time.
    wake = flusher_idle_;
  }
  if (wake) release_cv_.notify_one();
  if (!now.empty()) Send(now);  // a broken connection released everything already
}

std::vector<uint8_t> Connection::TakeReleases() {
  if (releases_.empty()) return {};
  flatbuffers::FlatBufferBuilder fbb(64 + 8 * releases_.size());
  fbb.Finish(wire::CreateReleaseRequest(fbb, fbb.CreateVector(releases_)));
  releases_.clear();
  return proto::Encode(static_cast<uint16_t>(proto::MsgType::kRelease), 0, fbb);
}

void Connection::FlushReleases() {
  std::unique_lock lk(release_mu_);
  while (!stopping_) {
    if (releases_.empty()) {
      flusher_idle_ = true;
      release_cv_.wait(lk);
      flusher_idle_ = false;
      continue;
    }
    auto due = oldest_release_ + kReleaseDelay;
    if (std::chrono::steady_clock::now() < due) {
      release_cv_.wait_until(lk, due);
      continue;
    }
    std::vector<uint8_t> bytes = TakeReleases();
    lk.unlock();
    Send(bytes);
    lk.lock();
  }
}

Result<Draft> Connection::MakeDraft(const wire::CreateReply& reply, Message& msg) {
  if (reply.guid() == nullptr) return Status::ProtocolError("depotd sent a create reply without a GUID");
  std::vector<uint64_t> uses;
  std::vector<std::span<std::byte>> unpopulated;
  auto frames = MapFrames(reply.frames(), true, msg, uses, &unpopulated);
  // The caller is about to write every frame: fill the page tables first, in one call per
  // granule, outside the segment lock (a fault per page costs more).
  for (auto r : unpopulated) ::madvise(r.data(), r.size(), MADV_POPULATE_WRITE);
  Guid guid = proto::FromWire(*reply.guid());
  if (!frames.ok()) {
    flatbuffers::FlatBufferBuilder fbb(64);
    wire::Guid g = proto::ToWire(guid);
    fbb.Finish(wire::CreateGuidRequest(fbb, &g));
    Call(proto::MsgType::kAbort, fbb);
    return frames.status();
  }
  return Draft(shared_from_this(), guid, std::move(*frames), std::move(uses), Places(reply.frames()));
}

}  // namespace depot::internal
