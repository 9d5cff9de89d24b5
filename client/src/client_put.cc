// The Client's puts and creates (see include/depot/client.h), and how a put cut off by the loss
// of depotd is finished on the next one, exactly once. Kept apart from the other requests
// (client.cc).
#include <fmt/format.h>
#include <unistd.h>

#include <cstring>

#include "client/src/checksum.h"
#include "client/src/connection.h"
#include "client/src/retry.h"
#include "depot/client.h"

namespace depot {
namespace {

// A create request, proposing `guid` when given.
flatbuffers::Offset<wire::CreateRequest> BuildCreate(
    flatbuffers::FlatBufferBuilder& fbb, std::span<const uint64_t> sizes,
    std::span<const uint32_t> pools, const CreateOptions& o, const std::optional<Guid>& guid,
    std::span<const std::span<const std::byte>> inline_frames) {
  auto frame_sizes = fbb.CreateVector(sizes.data(), sizes.size());
  flatbuffers::Offset<flatbuffers::Vector<uint32_t>> frame_pools;
  if (!pools.empty()) frame_pools = fbb.CreateVector(pools.data(), pools.size());
  auto metadata =
      fbb.CreateVector(reinterpret_cast<const uint8_t*>(o.metadata.data()), o.metadata.size());
  flatbuffers::Offset<flatbuffers::String> name;
  if (!o.name.empty()) name = fbb.CreateString(o.name);
  flatbuffers::Offset<flatbuffers::Vector<uint8_t>> data;
  if (!inline_frames.empty()) {
    uint64_t total = 0;
    for (auto f : inline_frames) total += f.size();
    uint8_t* dst;
    data = fbb.CreateUninitializedVector(total, &dst);
    for (auto f : inline_frames) {
      if (!f.empty()) std::memcpy(dst, f.data(), f.size());
      dst += f.size();
    }
  }
  wire::CreateRequestBuilder b(fbb);
  b.add_frame_sizes(frame_sizes);
  if (!pools.empty()) b.add_frame_pools(frame_pools);
  b.add_metadata(metadata);
  if (!o.name.empty()) b.add_name(name);
  wire::Guid g;
  if (guid) {
    g = proto::ToWire(*guid);
    b.add_guid(&g);
  }
  b.add_evictable(o.evictable);
  if (o.owner_scoped) b.add_owner_scoped(true);
  if (!inline_frames.empty()) {
    b.add_inline_data(data);
    b.add_seal(true);
    if (o.checksum) b.add_checksum(internal::Checksum(inline_frames));
  }
  return b.Finish();
}

// A create on `conn`, proposing `guid` when given.
Result<Draft> CreateOn(internal::Connection& conn, std::span<const uint64_t> sizes,
                       const CreateOptions& options, const std::optional<Guid>& guid) {
  std::vector<uint32_t> pools;
  if (!options.places.empty()) {
    if (options.places.size() != sizes.size()) {
      return Status::InvalidArgument(
          fmt::format("{} places given for {} frames", options.places.size(), sizes.size()));
    }
    for (const Place& p : options.places) {
      auto pool = conn.PoolOf(p);
      if (!pool.ok()) return pool.status();
      if (*pool != 0 && options.checksum) {
        return Status::InvalidArgument(
            "checksums cover host frames only; this object has a "
            "frame on a GPU");
      }
      pools.push_back(*pool);
    }
  }
  flatbuffers::FlatBufferBuilder fbb(256);
  fbb.Finish(BuildCreate(fbb, sizes, pools, options, guid, {}));
  auto reply = conn.CallCreate(fbb);
  if (!reply.ok()) return reply.status();
  return conn.MakeDraft(*proto::Body<wire::CreateReply>(reply->body), *reply, sizes, pools,
                        options.checksum);
}

// A put on `conn` as `guid`: into the lease when the caller proposed no GUID, else created (inline
// when small) and sealed.
Result<Guid> PutOn(internal::Connection& conn, std::span<const std::span<const std::byte>> frames,
                   const CreateOptions& options, const Guid& guid) {
  if (!options.guid) {
    if (auto put = conn.PutInLease(frames, options, guid)) return std::move(*put);
  }
  std::vector<uint64_t> sizes;
  uint64_t total = 0;
  for (auto f : frames) {
    sizes.push_back(f.size());
    total += f.size();
  }
  if (total <= proto::kMaxInlineSize && !frames.empty() && options.places.empty()) {
    // Create, fill and seal in one round trip.
    flatbuffers::FlatBufferBuilder fbb(total + 256);
    fbb.Finish(BuildCreate(fbb, sizes, {}, options, guid, frames));
    auto reply = conn.CallCreate(fbb);
    if (!reply.ok()) return reply.status();
    return guid;
  }
  auto draft = CreateOn(conn, sizes, options, guid);
  if (!draft.ok()) return draft.status();
  for (size_t i = 0; i < frames.size(); ++i) {
    if (Status copied = conn.CopyIn(draft->frame(i), frames[i], draft->place(i)); !copied.ok()) {
      return copied;  // the draft's destruction aborts the object
    }
  }
  Status sealed = draft->Seal();
  if (!sealed.ok()) return sealed;
  return guid;
}

}  // namespace

Result<Guid> Client::Put(std::span<const std::byte> data, const CreateOptions& options) {
  std::span<const std::byte> frames[] = {data};
  return Put(frames, options);
}

Result<Guid> Client::Put(std::span<const std::span<const std::byte>> frames,
                         const CreateOptions& options) {
  internal::Connection& conn = link_->now();
  // Every rule the daemon keeps, before anything is written: a put it would refuse in its ring
  // must not return a GUID.
  if (Status shape = proto::CheckObjectShape(frames.size(), options.metadata.size(),
                                             options.name.size(), conn.object_limits());
      !shape.ok()) {
    return shape;
  }
  // Chosen here unless the caller proposed one: a put cut off by the loss of depotd is then
  // looked for by it, and sent again as it.
  Guid guid = options.guid.value_or(Guid::Random());
  auto put = PutOn(conn, frames, options, guid);
  if (!put.status().IsDisconnected()) return put;
  auto next = link_->Recover(conn, put.status());
  if (!next.ok()) return next.status();
  // The last daemon may have made the object before it went: its catalog, or the put ring it
  // left, gave it to the next one, which took both before it answered anyone.
  flatbuffers::FlatBufferBuilder fbb(64);
  wire::Guid g = proto::ToWire(guid);
  fbb.Finish(wire::CreateGuidRequest(fbb, &g));
  auto stat = (*next)->Call(proto::MsgType::kStat, fbb);
  if (stat.ok()) {
    const auto* info = proto::Body<wire::StatReply>(stat->body)->info();
    bool ours = info != nullptr && info->state() == wire::State::Sealed &&
                info->creator_uid() == ::getuid();
    return ours ? Result<Guid>(guid) : put;
  }
  if (!stat.status().IsNotFound()) return stat.status();
  return PutOn(**next, frames, options, guid);
}

Result<Draft> Client::Create(std::span<const uint64_t> sizes, const CreateOptions& options) {
  return internal::Retry(*link_, [&](internal::Connection& conn) {
    return CreateOn(conn, sizes, options, options.guid);
  });
}

}  // namespace depot
