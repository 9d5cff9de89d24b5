// Requests that name GUIDs (get, delete, contains, hold): the wire vector of a list, and lists
// longer than one request may carry, sent in batches.
#ifndef DEPOT_CLIENT_SRC_GUID_REQUESTS_H_
#define DEPOT_CLIENT_SRC_GUID_REQUESTS_H_

#include <flatbuffers/flatbuffers.h>

#include <algorithm>
#include <span>
#include <vector>

#include "depot/guid.h"
#include "proto/wire.h"

namespace depot::internal {

// The GUIDs of a request.
inline flatbuffers::Offset<flatbuffers::Vector<const wire::Guid*>> GuidVector(
    flatbuffers::FlatBufferBuilder& fbb, std::span<const Guid> guids) {
  std::vector<wire::Guid> ids;
  ids.reserve(guids.size());
  for (const Guid& g : guids) ids.push_back(proto::ToWire(g));
  return fbb.CreateVectorOfStructs(ids);
}

// A request names at most proto::kMaxGuidsPerRequest GUIDs: longer lists go in batches, one
// request each, and their results are joined in order. `batch` handles one part.
template <typename Batch>
auto InBatches(std::span<const Guid> guids, Batch batch) {
  decltype(batch(guids)) out;
  out.reserve(guids.size());
  for (size_t start = 0; start < guids.size(); start += proto::kMaxGuidsPerRequest) {
    size_t n = std::min<size_t>(proto::kMaxGuidsPerRequest, guids.size() - start);
    for (auto&& result : batch(guids.subspan(start, n))) out.push_back(std::move(result));
  }
  return out;
}

}  // namespace depot::internal

#endif  // DEPOT_CLIENT_SRC_GUID_REQUESTS_H_
