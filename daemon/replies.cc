#include "daemon/replies.h"

#include <fmt/format.h>

#include <optional>
#include <unordered_map>

namespace depot::replies {

flatbuffers::Offset<flatbuffers::Vector<const wire::FrameLocation*>> Frames(
    flatbuffers::FlatBufferBuilder& fbb, std::span<const Location> frames) {
  std::vector<wire::FrameLocation> out;
  out.reserve(frames.size());
  for (const Location& l : frames) out.emplace_back(l.offset, l.size, l.segment, l.pool);
  return fbb.CreateVectorOfStructs(out);
}

static_assert(static_cast<int>(Residence::kLost) == static_cast<int>(wire::Residence::Lost) &&
              wire::Residence::MAX == wire::Residence::Lost);

flatbuffers::Offset<wire::ObjectInfo> ObjectInfo(flatbuffers::FlatBufferBuilder& fbb,
                                                 const StoredObject& o, bool with_metadata,
                                                 const Holders* holders) {
  auto name = fbb.CreateString(o.name().data(), o.name().size());
  auto frames = Frames(fbb, o.frames());
  flatbuffers::Offset<flatbuffers::Vector<uint8_t>> metadata;
  if (with_metadata) metadata = fbb.CreateVector(o.metadata().data(), o.metadata().size());
  wire::ObjectInfoBuilder b(fbb);
  wire::Guid guid = proto::ToWire(o.guid);
  b.add_guid(&guid);
  b.add_name(name);
  b.add_state(o.deleted                         ? wire::State::Deleted
              : o.state == ObjectState::kSealed ? wire::State::Sealed
                                                : wire::State::Creating);
  b.add_size(o.size());
  b.add_frames(frames);
  b.add_refcount(o.refcount + (holders != nullptr ? holders->slot_holders : 0));
  b.add_evictable(o.evictable);
  b.add_created_unix_ns(o.created_ns);
  b.add_sealed_unix_ns(o.sealed_ns);
  b.add_creator_pid(o.creator_pid);
  b.add_creator_uid(o.creator_uid);
  b.add_metadata_size(static_cast<uint32_t>(o.metadata().size()));
  if (with_metadata) b.add_metadata(metadata);
  if (holders != nullptr) {
    b.add_holders(holders->holders);
    b.add_creator_session(holders->creator_session);
    b.add_creator_process(holders->creator_process);
  }
  if (o.has_checksum) b.add_checksum(o.checksum);
  b.add_residence(static_cast<wire::Residence>(o.residence));
  return b.Finish();
}

Offsets<wire::SegmentInfo> Segments(flatbuffers::FlatBufferBuilder& fbb, const Namespace& ns,
                                    const std::vector<uint64_t>& keys) {
  std::vector<flatbuffers::Offset<wire::SegmentInfo>> infos;
  for (uint64_t key : keys) {
    auto pool = static_cast<uint32_t>(key >> 32);
    auto id = static_cast<uint32_t>(key);
    SegmentRef seg = ns.SegmentOf(pool, id);
    infos.push_back(wire::CreateSegmentInfo(fbb, id, seg.size, seg.dedicated, pool));
  }
  return fbb.CreateVector(infos);
}

Offsets<wire::DevicePoolInfo> DevicePools(flatbuffers::FlatBufferBuilder& fbb,
                                          const std::vector<DevicePoolInfo>& pools) {
  std::vector<flatbuffers::Offset<wire::DevicePoolInfo>> infos;
  for (const DevicePoolInfo& p : pools) {
    auto uuid = fbb.CreateString(p.uuid);
    auto name = fbb.CreateString(p.name);
    auto kind = fbb.CreateString(p.kind);
    infos.push_back(wire::CreateDevicePoolInfo(fbb, p.pool, uuid, name, kind, p.capacity,
                                               p.chunk_size, p.reserved, p.used, p.chunks,
                                               p.retired_held));
  }
  return fbb.CreateVector(infos);
}

std::vector<uint8_t> SegmentRetired(uint32_t pool, uint32_t id) {
  flatbuffers::FlatBufferBuilder fbb(64);
  std::vector<uint32_t> ids{id};
  fbb.Finish(wire::CreateSegmentsRetired(fbb, fbb.CreateVector(ids), pool));
  return proto::Encode(static_cast<uint16_t>(proto::MsgType::kSegmentsRetired), 0, fbb);
}

Offsets<wire::GetResult> GetResults(flatbuffers::FlatBufferBuilder& fbb, const GetWait& w) {
  std::vector<flatbuffers::Offset<wire::GetResult>> results;
  struct Built {
    flatbuffers::Offset<flatbuffers::Vector<const wire::FrameLocation*>> frames;
    flatbuffers::Offset<flatbuffers::Vector<uint8_t>> metadata;
  };
  // A get that names an object several times carries its frames and metadata once; a get of one
  // object (the common case) needs no map for that.
  std::unordered_map<ObjectId, Built> built;
  Built only;
  results.reserve(w.guids.size());
  for (size_t i = 0; i < w.guids.size(); ++i) {
    wire::Guid g = proto::ToWire(w.guids[i]);
    const StoredObject* o = w.acquired[i];
    if (o == nullptr) {
      Status err = w.errors[i];
      if (err.ok()) {
        err = Status::Timeout(fmt::format("object {} was not {} before the timeout",
                                          w.guids[i].ToString(),
                                          w.table->Find(w.guids[i]) ? "sealed" : "created"));
      }
      auto msg = fbb.CreateString(err.message());
      results.push_back(wire::CreateGetResult(fbb, &g, proto::ToWire(err.code()), msg));
      continue;
    }
    bool first = true;
    Built* b = &only;
    if (w.guids.size() > 1) {
      auto [it, inserted] = built.try_emplace(o->id);
      b = &it->second;
      first = inserted;
    }
    if (first) {
      b->frames = Frames(fbb, o->frames());
      b->metadata = fbb.CreateVector(o->metadata().data(), o->metadata().size());
    }
    std::optional<uint64_t> checksum;
    if (o->has_checksum) checksum = o->checksum;
    results.push_back(wire::CreateGetResult(fbb, &g, wire::Code::Ok, 0, o->id, b->frames,
                                            b->metadata, checksum, o->creator_uid, o->creator_pid));
  }
  return fbb.CreateVector(results);
}

std::vector<uint8_t> Empty(proto::MsgType type, uint64_t request_id) {
  flatbuffers::FlatBufferBuilder fbb(64);
  fbb.Finish(wire::CreateEmptyReply(fbb));
  return proto::Encode(proto::ReplyType(type), request_id, fbb);
}

}  // namespace depot::replies
