#include "client/src/lease.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "client/src/checksum.h"
#include "proto/object_rules.h"
#include "proto/put_ring_layout.h"

namespace depot::internal {
namespace {

// Any put's record fits in the ring (an empty one at worst: see Put).
static_assert(put_ring::kRecordBytes >=
              2 * (proto::kMaxMetadataSize + proto::kMaxNameSize +
                   proto::kMaxFrames * sizeof(wire::FrameLocation) + 1024));

}  // namespace

std::optional<Result<Guid>> Lease::Put(std::span<const std::span<const std::byte>> frames,
                                       const CreateOptions& options, const Guid& guid) {
  if (!offered_ || options.guid || !options.places.empty() || frames.empty() ||
      frames.size() > proto::kMaxFrames) {
    return std::nullopt;
  }
  std::lock_guard lk(mu_);
  if (closed_) {
    return Result<Guid>(Status::Disconnected(
        fmt::format("depotd at {} went away before this put was written", channel_.path())));
  }
  // Kept across puts, as are offsets_, locations_ and fbb_: a put allocates nothing.
  sizes_.clear();
  uint64_t need = 0;
  for (auto f : frames) need += sizes_.emplace_back(proto::RoundUpToBlock(f.size()));
  // Larger puts go to blocks of their own: see kLargestPut.
  if (need == 0 || need > std::min(kLargestPut, largest_ / 4)) return std::nullopt;
  // The lease is written only between Begin and End (see PutRing::BeginWrite), never while asking
  // for a new one.
  struct Ending {
    Lease* lease;
    ~Ending() { lease->End(); }
  } ending{this};
  if (!Begin() || !Place(sizes_, offsets_)) {
    End();
    if (!Renew(std::clamp(16 * need, kMinLease, kMaxLease), need) || !Begin() ||
        !Place(sizes_, offsets_)) {
      return std::nullopt;
    }
  }
  flatbuffers::FlatBufferBuilder& fbb = fbb_;
  fbb.Clear();
  std::vector<wire::FrameLocation>& locations = locations_;
  locations.clear();
  for (size_t i = 0; i < frames.size(); ++i) {
    auto f = frames[i];
    if (!f.empty()) std::memcpy(base_ + (offsets_[i] - offset_), f.data(), f.size());
    locations.emplace_back(offsets_[i], f.size(), segment_, 0);
  }
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
  std::optional<uint64_t> checksum;
  if (options.checksum) checksum = Checksum(frames);
  if (checksum) b.add_checksum(*checksum);
  fbb.Finish(b.Finish());
  // Into the ring, with no message while the daemon polls it; else the put's own message.
  std::vector<uint8_t> message;
  std::optional<uint64_t> position;
  if (ring_) {
    position = ring_->Append(fbb.GetBufferSpan());
    if (!position) {
      // Full: the daemon takes the ring before it answers any request. (Not this put's own
      // message: the daemon could take later puts from the ring before it read it.)
      flatbuffers::FlatBufferBuilder ping(16);
      ping.Finish(wire::CreateEmptyReply(ping));
      auto pong = channel_.Call(proto::MsgType::kPing, ping, releases_.Take());
      if (!pong.ok()) return Result<Guid>(pong.status());
      position = ring_->Append(fbb.GetBufferSpan());
      if (!position) {
        return Result<Guid>(channel_.Break(
            Status::ProtocolError("depotd did not take the put ring before it answered")));
      }
    }
  }
  if (position) {
    RingPut& r = ring_puts_[next_ring_put_++ % kRecentPuts];
    r.guid = guid;
    r.position = *position;
    r.length = fbb.GetSize();
    r.put.frames.assign(locations.begin(), locations.end());
    r.put.metadata.assign(options.metadata.begin(), options.metadata.end());
    r.put.checksum = checksum;
    if (!ring_->NeedsDoorbell()) return Result<Guid>(guid);
    flatbuffers::FlatBufferBuilder empty(16);
    empty.Finish(wire::CreateEmptyReply(empty));
    message = proto::Encode(static_cast<uint16_t>(proto::MsgType::kPutsWritten), 0, empty);
  } else {
    message = proto::Encode(static_cast<uint16_t>(proto::MsgType::kPut), 0, fbb);
  }
  std::vector<uint8_t> bytes = releases_.Take();
  bytes.insert(bytes.end(), message.begin(), message.end());
  if (Status sent = channel_.Send(bytes); !sent.ok()) return Result<Guid>(sent);
  recent_[next_recent_++ % kRecentPuts] = guid;
  return Result<Guid>(guid);
}

std::optional<Lease::OwnPut> Lease::HoldOwn(const Guid& guid) {
  std::lock_guard lk(mu_);
  for (RingPut& r : ring_puts_) {
    if (r.guid == guid && !guid.is_nil() && ring_->Hold(r.position, r.length)) {
      r.guid = Guid{};  // held once: a later get finds the Object, or asks the daemon
      return std::move(r.put);
    }
  }
  return std::nullopt;
}

bool Lease::Begin() {
  if (base_ == nullptr) return false;
  if (ring_ && !ring_->BeginWrite()) {
    Forget();  // the daemon took it back: memory ran short while it was idle
    return false;
  }
  writing_ = true;
  return true;
}

void Lease::End() {
  if (writing_ && ring_) ring_->EndWrite();
  writing_ = false;
}

void Lease::Forget() {
  base_ = nullptr;
  size_ = cursor_ = 0;
  returned_.clear();  // the daemon frees them with the lease's rest
  if (ring_) ring_->SkipReturns();
  // A send that fails finds the connection gone, and every hold with it.
  if (auto dropped = segments_.DropUses(AsSpan(uses_)); !dropped.empty())
    (void)channel_.Send(dropped);
  uses_.clear();
}

bool Lease::Place(std::span<const uint64_t> sizes, std::vector<uint64_t>& offsets) {
  if (ring_) {
    size_t before = returned_.size();
    ring_->TakeReturns(returned_);
    // Only whole blocks inside this lease: anything else is not this lease's to write.
    auto foreign = [this](const PutRing::Block& r) {
      return r.segment != segment_ || r.size == 0 || r.size % proto::kBlockAlign != 0 ||
             r.offset < offset_ || r.offset - offset_ > size_ ||
             r.size > size_ - (r.offset - offset_);
    };
    returned_.erase(std::remove_if(returned_.begin() + static_cast<ptrdiff_t>(before),
                                   returned_.end(), foreign),
                    returned_.end());
    // The daemon hands back a few at a time; more would be a broken daemon's.
    if (returned_.size() > put_ring::kReturnSlots) {
      returned_.erase(returned_.begin(),
                      returned_.end() - static_cast<ptrdiff_t>(put_ring::kReturnSlots));
    }
  }
  offsets.assign(sizes.size(), 0);
  uint64_t cursor = cursor_;
  std::vector<size_t>& used = used_;
  used.clear();
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) {
      offsets[i] = offset_ + cursor;
      continue;
    }
    // The most recent block handed back of about this size (not more than twice): still in
    // cache, where the cursor's part is not.
    bool reused = false;
    for (size_t r = returned_.size(); r-- > 0;) {
      if (returned_[r].size >= sizes[i] && returned_[r].size / 2 <= sizes[i] &&
          std::find(used.begin(), used.end(), r) == used.end()) {
        offsets[i] = returned_[r].offset;
        used.push_back(r);
        reused = true;
        break;
      }
    }
    if (reused) continue;
    if (size_ - cursor < sizes[i]) return false;
    offsets[i] = offset_ + cursor;
    cursor += sizes[i];
  }
  cursor_ = cursor;
  std::sort(used.rbegin(), used.rend());
  for (size_t r : used) returned_.erase(returned_.begin() + static_cast<ptrdiff_t>(r));
  return true;
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
  // The old lease's rest went back to the daemon as it granted the new one (or refused it), and
  // every return written before this reply was of the old one.
  Forget();
  if (!reply.ok()) {
    refused_until_ = std::chrono::steady_clock::now() + kRetryAfter;
    return false;
  }
  const auto* lease = proto::Body<wire::CreateReply>(reply->body);
  const auto* frames = lease->frames();
  if (frames == nullptr || frames->size() != 1 || frames->Get(0)->pool() != 0 ||
      frames->Get(0)->size() < need || frames->Get(0)->size() > want) {
    // Broken for good: the next call on the connection returns this error.
    (void)channel_.Break(Status::ProtocolError("depotd answered a lease with another range"));
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
