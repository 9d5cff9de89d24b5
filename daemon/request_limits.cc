#include "daemon/request_limits.h"

#include <fmt/format.h>

#include "depot/units.h"

namespace depot {

Status CheckCreate(const wire::CreateRequest& req, const RequestLimits& limits) {
  size_t nframes = req.frame_sizes() ? req.frame_sizes()->size() : 0;
  auto invalid = [](std::string msg) { return Status::InvalidArgument(std::move(msg)); };
  if (Status shape = proto::CheckObjectShape(nframes, req.metadata() ? req.metadata()->size() : 0,
                                             req.name() ? req.name()->size() : 0, limits.object);
      !shape.ok()) {
    return shape;
  }
  bool device_frames = false;
  if (req.frame_pools()) {
    if (req.frame_pools()->size() != nframes) {
      return invalid(
          fmt::format("{} frame pools given for {} frames", req.frame_pools()->size(), nframes));
    }
    for (uint32_t p : *req.frame_pools()) {
      device_frames |= p != 0;
      if (p == 0 || p <= limits.device_pools) continue;
      if (limits.device_pools == 0) {
        return Status::Unavailable(
            fmt::format("device pools: unavailable ({})", limits.devices_unavailable));
      }
      return invalid(
          fmt::format("there is no device pool {} (this depotd has {})", p, limits.device_pools));
    }
  }
  uint64_t total = 0;       // every frame's bytes
  uint64_t host_total = 0;  // those on the host
  uint64_t capacity = limits.host_capacity;
  for (size_t i = 0; i < nframes; ++i) {
    uint64_t size = req.frame_sizes()->Get(i);
    bool host = !req.frame_pools() || req.frame_pools()->Get(i) == 0;
    // A device frame is held to its GPU's capacity, by its pool.
    if (host && size > capacity) {
      return Status::StoreFull(
          fmt::format("a frame of {} is larger than the store's capacity of {}", FormatBytes(size),
                      FormatBytes(capacity)));
    }
    total += size;
    if (host) host_total += size;
  }
  // Refused before anything is evicted to make room that could never be enough.
  if (host_total > capacity) {
    return Status::StoreFull(
        fmt::format("the host frames' {} are more than the store's capacity of {}",
                    FormatBytes(host_total), FormatBytes(capacity)));
  }
  bool inline_data = req.inline_data() != nullptr;
  if (inline_data && device_frames) return invalid("device frames cannot travel inside a request");
  if (inline_data && (req.inline_data()->size() != total || !req.seal())) {
    return invalid(
        fmt::format("inline data of {} bytes must match the frames' {} bytes and come with seal",
                    req.inline_data()->size(), total));
  }
  if (req.seal() && !inline_data) return invalid("seal on create needs the inline data");
  return Status::OK();
}

Status CheckLease(const wire::LeaseRequest& req) {
  if (req.size() == 0 || req.size() > proto::kMaxLease) {
    return Status::InvalidArgument(fmt::format("a lease of {} bytes: leases are 1 byte to {} bytes",
                                               req.size(), proto::kMaxLease));
  }
  return Status::OK();
}

Status CheckPut(const wire::PutRequest& req, const proto::ObjectLimits& limits) {
  if (req.guid() == nullptr || (req.guid()->hi() == 0 && req.guid()->lo() == 0)) {
    return Status::ProtocolError("put without a GUID");
  }
  if (Status shape = proto::CheckObjectShape(req.frames() ? req.frames()->size() : 0,
                                             req.metadata() ? req.metadata()->size() : 0,
                                             req.name() ? req.name()->size() : 0, limits);
      !shape.ok()) {
    return Status::ProtocolError("put refused: " + shape.message());
  }
  return Status::OK();
}

Status CheckGuidCount(const flatbuffers::Vector<const wire::Guid*>* guids) {
  size_t n = guids ? guids->size() : 0;
  if (n == 0 || n > proto::kMaxGuidsPerRequest) {
    return Status::InvalidArgument(
        fmt::format("a request names 1 to {} GUIDs, not {}", proto::kMaxGuidsPerRequest, n));
  }
  return Status::OK();
}

}  // namespace depot
