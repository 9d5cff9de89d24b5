// What a Connection does for drafts (see connection.h): the create reply made into a Draft, the
// bytes copied into its frames and the devices waited for at its seal, and the count of drafts
// still open, which a reconnect's resume waits for (Link::TryResume).
#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "client/src/connection.h"
#include "client/src/link.h"

namespace depot::internal {

Status Connection::CopyIn(std::span<std::byte> dst, std::span<const std::byte> src,
                          const Place& place) {
  if (dst.empty()) return Status::OK();
  auto pool = PoolOf(place);
  if (!pool.ok()) return pool.status();
  if (*pool == 0 || !pools_.IsCuda(*pool)) {
    std::memcpy(dst.data(), src.data(), dst.size());
    return Status::OK();
  }
  return cuda_.CopyIn(dst, src, *pool);
}

Status Connection::SyncDevices(const std::vector<Place>& places, void* cuda_stream) {
  std::vector<uint32_t> gpus;  // the CUDA pools of the frames, each once
  for (const Place& p : places) {
    auto pool = PoolOf(p);
    if (pool.ok() && pools_.IsCuda(*pool) &&
        std::find(gpus.begin(), gpus.end(), *pool) == gpus.end()) {
      gpus.push_back(*pool);
    }
  }
  if (gpus.empty()) return Status::OK();
  return cuda_.Sync(cuda_stream, gpus);
}

Result<Draft> Connection::MakeDraft(const wire::CreateReply& reply, Message& msg,
                                    std::span<const uint64_t> sizes,
                                    std::span<const uint32_t> pools, bool checksum) {
  if (reply.guid() == nullptr) {
    return channel_.Break(Status::ProtocolError("depotd sent a create reply without a GUID"));
  }
  const auto* got = reply.frames();
  bool same = got != nullptr && got->size() == sizes.size();
  for (size_t i = 0; same && i < sizes.size(); ++i) {
    same = got->Get(i)->size() == sizes[i] && got->Get(i)->pool() == (pools.empty() ? 0 : pools[i]);
  }
  if (!same) {
    // The caller writes every byte of the frames it asked for: frames of other sizes, or in
    // other memory, would have it write outside them.
    return channel_.Break(Status::ProtocolError(
        fmt::format("depotd answered a create of {} frames with frames of other sizes or places",
                    sizes.size())));
  }
  SegmentUses uses;
  std::vector<std::span<std::byte>> unpopulated;
  auto frames = segments_.MapFrames(reply.frames(), true, msg.dedicated, uses, &unpopulated);
  // The caller is about to write every frame: fill the page tables first, in one call per
  // granule, outside the segment lock (a fault per page costs more).
  for (auto r : unpopulated) ::madvise(r.data(), r.size(), MADV_POPULATE_WRITE);
  Guid guid = proto::FromWire(*reply.guid());
  segments_.DropIdle(msg.dedicated);
  if (!frames.ok()) {
    flatbuffers::FlatBufferBuilder fbb(64);
    wire::Guid g = proto::ToWire(guid);
    fbb.Finish(wire::CreateGuidRequest(fbb, &g));
    // The caller hears why the frames could not be mapped; an abort that fails finds the
    // connection gone, and the daemon aborts the object at the disconnect.
    (void)Call(proto::MsgType::kAbort, fbb);
    return frames.status();
  }
  drafts_.fetch_add(1, std::memory_order_seq_cst);  // DraftEnded takes it back
  Draft draft(shared_from_this(), guid, std::move(*frames), {uses.begin(), uses.end()},
              pools_.Places(reply.frames()));
  draft.checksum_ = checksum;
  if (leaving_.load(std::memory_order_seq_cst)) {
    // Made by a daemon that went away, after a reconnect counted the drafts still open.
    (void)draft.Abort();
    return Status::Disconnected("depotd went away as it answered this create");
  }
  return draft;
}

void Connection::DraftEnded() {
  // Against Link::Carry, which supersedes this connection and then counts its open drafts: one
  // of the two sees the other.
  if (drafts_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
      superseded_.load(std::memory_order_seq_cst)) {
    if (auto link = link_.lock()) link->TryResume();
  }
}

}  // namespace depot::internal
