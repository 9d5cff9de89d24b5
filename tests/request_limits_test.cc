// Tests for the limits on what a request may ask for (daemon/request_limits.h), each against the
// request as it arrives (a verified FlatBuffers body): a create's shape, sizes, pools and inline
// data; a lease's size; what a put must carry, the same for a put message and a put-ring record;
// how many GUIDs one request may name.
#include "daemon/request_limits.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace depot {
namespace {

using Catch::Matchers::Contains;

// A request's body, kept alive with its builder.
template <typename T>
class Body {
 public:
  template <typename Build>
  explicit Body(Build&& build) {
    fbb_.Finish(build(fbb_));
  }
  const T& operator*() const { return *flatbuffers::GetRoot<T>(fbb_.GetBufferPointer()); }

 private:
  flatbuffers::FlatBufferBuilder fbb_;
};

struct CreateArgs {
  std::vector<uint64_t> sizes{1024};
  std::optional<std::vector<uint32_t>> pools{};
  size_t metadata = 0;
  size_t name = 0;
  std::optional<size_t> inline_data{};
  bool seal = false;
};

Body<wire::CreateRequest> Create(const CreateArgs& a) {
  return Body<wire::CreateRequest>([&](flatbuffers::FlatBufferBuilder& fbb) {
    auto sizes = fbb.CreateVector(a.sizes);
    auto pools = a.pools ? fbb.CreateVector(*a.pools) : 0;
    auto metadata = fbb.CreateVector(std::vector<uint8_t>(a.metadata, 1));
    auto name = fbb.CreateString(std::string(a.name, 'n'));
    auto data = a.inline_data ? fbb.CreateVector(std::vector<uint8_t>(*a.inline_data, 2)) : 0;
    wire::CreateRequestBuilder b(fbb);
    b.add_frame_sizes(sizes);
    if (a.pools) b.add_frame_pools(pools);
    b.add_metadata(metadata);
    b.add_name(name);
    if (a.inline_data) b.add_inline_data(data);
    b.add_seal(a.seal);
    return b.Finish();
  });
}

const RequestLimits kLimits{.object = {.max_frames = 4, .max_metadata = 100},
                            .host_capacity = 1 << 20,
                            .device_pools = 1,
                            .devices_unavailable = ""};

TEST_CASE("CheckCreate: an object's shape, sizes, pools and inline data", "[request_limits]") {
  CHECK(CheckCreate(*Create({}), kLimits).ok());
  CHECK(CheckCreate(*Create({.sizes = {}}), kLimits).IsInvalidArgument());
  CHECK(CheckCreate(*Create({.sizes = {1, 2, 3, 4, 5}}), kLimits).IsInvalidArgument());
  CHECK_THAT(CheckCreate(*Create({.metadata = 101}), kLimits).message(), Contains("max_metadata"));
  CHECK(CheckCreate(*Create({.name = proto::kMaxNameSize + 1}), kLimits).IsInvalidArgument());
  // Larger than the capacity: StoreFull, a frame alone or the host frames together.
  CHECK(CheckCreate(*Create({.sizes = {(1 << 20) + 1}}), kLimits).IsStoreFull());
  CHECK(CheckCreate(*Create({.sizes = {600 << 10, 600 << 10}}), kLimits).IsStoreFull());
  // A device frame is held to its GPU's capacity, not the host's.
  CHECK(CheckCreate(*Create({.sizes = {2 << 20}, .pools = {{1}}}), kLimits).ok());
  CHECK_THAT(CheckCreate(*Create({.sizes = {1}, .pools = {{2}}}), kLimits).message(),
             Contains("no device pool 2"));
  CHECK(CheckCreate(*Create({.sizes = {1, 2}, .pools = {{0}}}), kLimits).IsInvalidArgument());
  RequestLimits none = kLimits;
  none.device_pools = 0;
  none.devices_unavailable = "no driver";
  Status st = CheckCreate(*Create({.sizes = {1}, .pools = {{1}}}), none);
  CHECK(st.IsUnavailable());
  CHECK_THAT(st.message(), Contains("no driver"));
  // Inline data: exactly the frames' bytes, with seal, on the host only.
  CHECK(CheckCreate(*Create({.sizes = {10, 20}, .inline_data = 30, .seal = true}), kLimits).ok());
  CHECK(CheckCreate(*Create({.sizes = {10, 20}, .inline_data = 29, .seal = true}), kLimits)
            .IsInvalidArgument());
  CHECK(CheckCreate(*Create({.sizes = {10}, .inline_data = 10}), kLimits).IsInvalidArgument());
  CHECK(CheckCreate(*Create({.sizes = {10}, .seal = true}), kLimits).IsInvalidArgument());
  CHECK(CheckCreate(*Create({.sizes = {10}, .pools = {{1}}, .inline_data = 10, .seal = true}),
                    kLimits)
            .IsInvalidArgument());
}

TEST_CASE("CheckLease: 1 byte to kMaxLease", "[request_limits]") {
  auto lease = [](uint64_t size) {
    return Body<wire::LeaseRequest>(
        [&](flatbuffers::FlatBufferBuilder& fbb) { return wire::CreateLeaseRequest(fbb, size); });
  };
  CHECK(CheckLease(*lease(1)).ok());
  CHECK(CheckLease(*lease(proto::kMaxLease)).ok());
  CHECK(CheckLease(*lease(0)).IsInvalidArgument());
  Status st = CheckLease(*lease(proto::kMaxLease + 1));
  CHECK(st.IsInvalidArgument());
  CHECK_THAT(st.message(), Contains("leases are 1 byte to"));
}

Body<wire::PutRequest> Put(std::optional<Guid> guid, size_t frames, size_t metadata = 0,
                           size_t name = 0) {
  return Body<wire::PutRequest>([&](flatbuffers::FlatBufferBuilder& fbb) {
    std::vector<wire::FrameLocation> f(frames, wire::FrameLocation(0, 64, 1, 0));
    auto locations = fbb.CreateVectorOfStructs(f);
    auto meta = fbb.CreateVector(std::vector<uint8_t>(metadata, 1));
    auto n = fbb.CreateString(std::string(name, 'n'));
    wire::Guid g = guid ? wire::Guid(guid->hi, guid->lo) : wire::Guid();
    wire::PutRequestBuilder b(fbb);
    if (guid) b.add_guid(&g);
    b.add_frames(locations);
    b.add_metadata(meta);
    b.add_name(n);
    return b.Finish();
  });
}

TEST_CASE("CheckPut: a GUID and an object's shape, or a protocol error", "[request_limits]") {
  const proto::ObjectLimits limits{.max_frames = 4, .max_metadata = 100};
  CHECK(CheckPut(*Put(Guid{1, 2}, 1), limits).ok());
  CHECK(CheckPut(*Put(Guid{1, 2}, 4, 100, proto::kMaxNameSize), limits).ok());
  Status st = CheckPut(*Put(std::nullopt, 1), limits);
  CHECK(st.IsProtocolError());
  CHECK(st.message() == "put without a GUID");
  CHECK(CheckPut(*Put(Guid{0, 0}, 1), limits).message() == "put without a GUID");
  st = CheckPut(*Put(Guid{1, 2}, 5), limits);
  CHECK(st.IsProtocolError());
  CHECK(st.message() == "put refused: an object has 1 to 4 frames, not 5");
  CHECK(CheckPut(*Put(Guid{1, 2}, 0), limits).IsProtocolError());
  CHECK_THAT(CheckPut(*Put(Guid{1, 2}, 1, 101), limits).message(),
             Contains("put refused") && Contains("max_metadata"));
  CHECK(CheckPut(*Put(Guid{1, 2}, 1, 0, proto::kMaxNameSize + 1), limits).IsProtocolError());
}

TEST_CASE("CheckGuidCount: 1 to kMaxGuidsPerRequest", "[request_limits]") {
  auto guids = [](size_t n) {
    return Body<wire::GuidsRequest>([&](flatbuffers::FlatBufferBuilder& fbb) {
      std::vector<wire::Guid> g(n, wire::Guid(1, 1));
      return wire::CreateGuidsRequest(fbb, fbb.CreateVectorOfStructs(g));
    });
  };
  CHECK(CheckGuidCount((*guids(1)).guids()).ok());
  CHECK(CheckGuidCount((*guids(proto::kMaxGuidsPerRequest)).guids()).ok());
  CHECK(CheckGuidCount((*guids(0)).guids()).IsInvalidArgument());
  CHECK(CheckGuidCount(nullptr).IsInvalidArgument());
  CHECK(CheckGuidCount((*guids(proto::kMaxGuidsPerRequest + 1)).guids()).IsInvalidArgument());
}

}  // namespace
}  // namespace depot
