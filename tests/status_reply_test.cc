// Tests that the status's one description (include/depot/store_status.h) reaches both ends of
// the wire: the daemon's BuildStatusReply (daemon/status_reply.h) and the client's
// StoreStatusFromReply (client/src/status_reply.h).
#include "daemon/status_reply.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <utility>

#include "client/src/status_reply.h"
#include "depot/store_status.h"

namespace depot {
namespace {

// Converts to any member type: T{AnyMember{}, ...} compiles for as many initialisers as T has
// members, which counts the members of an aggregate.
struct AnyMember {
  template <typename T>
  operator T() const;
};

template <typename T, typename... Members>
constexpr size_t MemberCount(Members... members) {
  if constexpr (requires { T{members..., AnyMember{}}; }) {
    return MemberCount<T>(members..., AnyMember{});
  } else {
    return sizeof...(Members);
  }
}

#define DEPOT_COUNT(name, type, group, key, meaning) +1
constexpr size_t kScalars = 0 DEPOT_STORE_STATUS_SCALARS(DEPOT_COUNT);
#undef DEPOT_COUNT
// The members declared by hand: daemon_version, socket_path, errors, users, device_pools and
// devices_unavailable. A member added to StoreStatus outside the list fails here until the
// conversions and EveryFieldSet below carry it too.
static_assert(MemberCount<StoreStatus>() == kScalars + 6,
              "StoreStatus has a member this test does not know about");

// A status whose every field holds a value of its own, none zero or empty.
StoreStatus EveryFieldSet() {
  StoreStatus s;
  s.daemon_version = "1.2.3-test";
  s.socket_path = "/run/depot/test.sock";
  uint64_t next = 1;
#define DEPOT_SET(name, type, group, key, meaning) s.name = static_cast<type>(next++);
  DEPOT_STORE_STATUS_SCALARS(DEPOT_SET)
#undef DEPOT_SET
  s.errors = {101, 102, 103, 104};
  s.users = {{.uid = 1000, .objects = 105, .bytes = 106},
             {.uid = 1001, .objects = 107, .bytes = 108}};
  s.device_pools = {{.pool = 1,
                     .uuid = "GPU-00000000-0000-0000-0000-000000000001",
                     .name = "Test GPU",
                     .kind = "memfd-test",
                     .capacity = 109,
                     .chunk_size = 110,
                     .reserved = 111,
                     .used = 112,
                     .chunks = 113}};
  s.devices_unavailable = "a reason";
  return s;
}

TEST_CASE("a status survives the daemon's reply and the client's reading of it") {
  const StoreStatus sent = EveryFieldSet();
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(BuildStatusReply(fbb, sent));
  std::span<const uint8_t> body(fbb.GetBufferPointer(), fbb.GetSize());
  REQUIRE(proto::VerifyBody(proto::ReplyType(proto::MsgType::kStatus), body));
  StoreStatus received = internal::StoreStatusFromReply(*proto::Body<wire::StatusReply>(body));
  CHECK(received == sent);
  received.ForEachScalar([](const StoreStatusField& field, auto value) {
    INFO(field.name);
    CHECK(value != 0);
  });
}

TEST_CASE("an empty status reads back as the default StoreStatus") {
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(BuildStatusReply(fbb, StoreStatus{}));
  CHECK(internal::StoreStatusFromReply(*proto::Body<wire::StatusReply>(
            std::span<const uint8_t>(fbb.GetBufferPointer(), fbb.GetSize()))) == StoreStatus{});
}

TEST_CASE("each status field has a name and a place of its own") {
  std::set<std::string_view> names;
  std::set<std::pair<std::string_view, std::string_view>> places;
  StoreStatus{}.ForEachScalar([&](const StoreStatusField& field, auto) {
    INFO(field.name);
    CHECK(names.insert(field.name).second);
    CHECK(places.insert({field.group, field.key}).second);
    CHECK_FALSE(field.meaning.empty());
  });
  CHECK(names.size() == kScalars);
}

}  // namespace
}  // namespace depot
