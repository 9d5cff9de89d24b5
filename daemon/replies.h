// The FlatBuffers pieces that several replies share: frame locations, object descriptions,
// segment lists, device pool lists. Each builds into the caller's builder and returns its
// offset; none sends anything.
#ifndef DEPOT_DAEMON_REPLIES_H_
#define DEPOT_DAEMON_REPLIES_H_

#include <cstdint>
#include <span>
#include <vector>

#include "daemon/get_waits.h"
#include "daemon/namespace.h"
#include "depot/device_pool_info.h"
#include "proto/wire.h"

namespace depot::replies {

template <typename T>
using Offsets = flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<T>>>;

flatbuffers::Offset<flatbuffers::Vector<const wire::FrameLocation*>> Frames(
    flatbuffers::FlatBufferBuilder& fbb, std::span<const Location> frames);

// What stat adds to an object's info: who holds it and who creates it, already in the buffer.
struct Holders {
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::HolderInfo>>> holders;
  flatbuffers::Offset<flatbuffers::String> creator_process;
  uint64_t creator_session = 0;  // 0: the creator is not connected
  uint32_t slot_holders = 0;     // sessions that hold it through a reference slot only
};

// What `depotctl ls` and `stat` show of an object; metadata and holders only for stat.
flatbuffers::Offset<wire::ObjectInfo> ObjectInfo(flatbuffers::FlatBufferBuilder& fbb,
                                                 const StoredObject& o, bool with_metadata,
                                                 const Holders* holders = nullptr);

// The results of get `w`, one per GUID asked for. A GUID named again shares the first result's
// frames and metadata (FlatBuffers lets tables share vectors), so that repeating one GUID cannot
// multiply the reply's size.
Offsets<wire::GetResult> GetResults(flatbuffers::FlatBufferBuilder& fbb, const GetWait& w);

// The segments named by `keys` (SegmentTracker::Key), whose fds ride with the reply in order.
Offsets<wire::SegmentInfo> Segments(flatbuffers::FlatBufferBuilder& fbb, const Namespace& ns,
                                    const std::vector<uint64_t>& keys);

// The device pools, as hello and status list them (NamespaceSet::DevicePools).
Offsets<wire::DevicePoolInfo> DevicePools(flatbuffers::FlatBufferBuilder& fbb,
                                          const std::vector<DevicePoolInfo>& pools);

// The notice that segment `id` of `pool` is gone (sent unasked, request id 0).
std::vector<uint8_t> SegmentRetired(uint32_t pool, uint32_t id);

// An empty reply to a request of `type` (seal, abort, ping, subscribe).
std::vector<uint8_t> Empty(proto::MsgType type, uint64_t request_id);

}  // namespace depot::replies

#endif  // DEPOT_DAEMON_REPLIES_H_
