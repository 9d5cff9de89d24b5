#include "client/src/lease.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "client/src/checksum.h"

namespace depot::internal {
namespace {

// Frames start at the daemon's block alignment on the host (and take their size rounded up to
// it), since each becomes a block of its own.
constexpr uint64_t kAlign = 64;
uint64_t RoundUp(uint64_t n) { return (n + kAlign - 1) & ~(kAlign - 1); }

}  // namespace

std::optional<Result<Guid>> Lease::Put(std::span<const std::span<const std::byte>> frames,
                                       const CreateOptions& options) {
  if (!offered_ || options.guid || !options.places.empty() || frames.empty() ||
      frames.size() > proto::kMaxFrames) {
    return std::nullopt;
  }
  uint64_t need = 0;
  for (auto f : frames) need += RoundUp(f.size());
  // Larger puts go to blocks of their own: see kLargestPut.
  if (need == 0 || need > std::min(kLargestPut, largest_ / 4)) return std::nullopt;
  std::lock_guard lk(mu_);
  if (size_ - cursor_ < need && !Renew(std::clamp(16 * need, kMinLease, kMaxLease), need)) {
    return std::nullopt;
  }
  flatbuffers::FlatBufferBuilder fbb(256 + options.metadata.size() + 32 * frames.size());
  std::vector<wire::FrameLocation> locations;
  locations.reserve(frames.size());
  for (auto f : frames) {
    if (!f.empty()) std::memcpy(base_ + cursor_, f.data(), f.size());
    locations.emplace_back(offset_ + cursor_, f.size(), segment_, 0);
    cursor_ += RoundUp(f.size());
  }
  Guid guid = Guid::Random();
  wire::Guid g = proto::ToWire(guid);
  auto frame_vec = fbb.CreateVectorOfStructs(locations);
  auto metadata = fbb.CreateVector(reinterpret_cast<const uint8_t*>(options.metadata.data()),
                                   options.metadata.size());
  flatbuffers::Offset<flatbuffers::String> name;
  if (!options.name.empty()) name = fbb.CreateString(options.name);
  wire::PutRequestBuilder b(fbb);
  b.add_guid(&g);
  b.add_frames(frame_vec);
  b.add_metadata(metadata);
  if (!options.name.empty()) b.add_name(name);
  b.add_evictable(options.evictable);
  if (options.owner_scoped) b.add_owner_scoped(true);
  if (options.checksum) b.add_checksum(Checksum(frames));
  fbb.Finish(b.Finish());
  std::vector<uint8_t> bytes = releases_.Take();
  std::vector<uint8_t> put = proto::Encode(static_cast<uint16_t>(proto::MsgType::kPut), 0, fbb);
  bytes.insert(bytes.end(), put.begin(), put.end());
  if (Status sent = channel_.Send(bytes); !sent.ok()) return Result<Guid>(sent);
  recent_[next_recent_++ % kRecentPuts] = guid;
  return Result<Guid>(guid);
}

bool Lease::RecentlyPut(const Guid& guid) {
  std::lock_guard lk(mu_);
  return std::find(recent_.begin(), recent_.end(), guid) != recent_.end();
}

bool Lease::Renew(uint64_t want, uint64_t need) {
  if (std::chrono::steady_clock::now() < refused_until_) return false;
  flatbuffers::FlatBufferBuilder fbb(64);
  fbb.Finish(wire::CreateLeaseRequest(fbb, want, need));
  auto reply = channel_.Call(proto::MsgType::kLease, fbb, releases_.Take());
  // The old lease's rest went back to the daemon as it granted the new one (or refused it).
  base_ = nullptr;
  size_ = cursor_ = 0;
  if (auto dropped = segments_.DropUses(uses_); !dropped.empty()) channel_.Send(dropped);
  uses_.clear();
  if (!reply.ok()) {
    refused_until_ = std::chrono::steady_clock::now() + kRetryAfter;
    return false;
  }
  const auto* lease = proto::Body<wire::CreateReply>(reply->body);
  const auto* frames = lease->frames();
  if (frames == nullptr || frames->size() != 1 || frames->Get(0)->pool() != 0 ||
      frames->Get(0)->size() < need || frames->Get(0)->size() > want) {
    channel_.Break(Status::ProtocolError("depotd answered a lease with another range"));
    return false;
  }
  std::vector<std::span<std::byte>> unpopulated;
  auto mapped = segments_.MapFrames(frames, true, reply->dedicated, uses_, &unpopulated);
  segments_.DropIdle(reply->dedicated);
  if (!mapped.ok()) {
    refused_until_ = std::chrono::steady_clock::now() + kRetryAfter;
    return false;
  }
  // Every byte of the lease will be written: fill its page tables now, in one call each, rather
  // than take a fault per page inside the puts.
  for (auto r : unpopulated) ::madvise(r.data(), r.size(), MADV_POPULATE_WRITE);
  // The daemon grants at most a share of its pool: puts that would need more than a quarter
  // of what it grants take the create path from now on, not a new lease each.
  if (frames->Get(0)->size() < want) largest_ = frames->Get(0)->size();
  base_ = mapped->front().data();
  segment_ = frames->Get(0)->segment();
  offset_ = frames->Get(0)->offset();
  size_ = frames->Get(0)->size();
  return true;
}

}  // namespace depot::internal
