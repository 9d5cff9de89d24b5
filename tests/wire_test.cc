// Tests for the message frame (proto/wire.h) and the generated FlatBuffers tables it carries.
#include "proto/wire.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "depot/status.h"

namespace depot::proto {
namespace {

using Catch::Matchers::Contains;

constexpr uint16_t Type(MsgType t) { return static_cast<uint16_t>(t); }

Header HeaderOf(const std::vector<uint8_t>& message) {
  REQUIRE(message.size() >= sizeof(Header));
  Header h;
  std::memcpy(&h, message.data(), sizeof h);
  return h;
}

// A copy of the body alone, so that any read past its end is a read past an allocation.
std::vector<uint8_t> BodyOf(const std::vector<uint8_t>& message) {
  return std::vector<uint8_t>(message.begin() + sizeof(Header), message.end());
}

std::vector<uint8_t> HelloRequestMessage(uint64_t request_id) {
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateHelloRequestDirect(fbb, kProtocolVersion, "wire_test client"));
  return Encode(Type(MsgType::kHello), request_id, fbb);
}

std::vector<uint8_t> CreateRequestMessage() {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<uint64_t> sizes = {4096, 100, 1 << 20};
  std::vector<uint8_t> metadata(300, 0xab);
  wire::Guid guid(0x0123456789abcdefull, 0xfedcba9876543210ull);
  fbb.Finish(wire::CreateCreateRequestDirect(fbb, &sizes, &metadata, "tensor-7", &guid, true));
  return Encode(Type(MsgType::kCreate), 2, fbb);
}

std::vector<uint8_t> GetReplyMessage() {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<wire::FrameLocation> frames = {{0, 4096, 1, 0}, {4096, 64, 1, 0}};
  std::vector<flatbuffers::Offset<wire::GetResult>> results;
  for (uint64_t i = 0; i < 3; ++i) {
    wire::Guid guid(i, i + 1);
    std::vector<uint8_t> metadata(20, static_cast<uint8_t>(i));
    results.push_back(wire::CreateGetResultDirect(fbb, &guid, wire::Code::Ok, nullptr, 100 + i,
                                                  &frames, &metadata));
  }
  std::vector<flatbuffers::Offset<wire::SegmentInfo>> segments = {
      wire::CreateSegmentInfo(fbb, 1, 1 << 20, false)};
  fbb.Finish(wire::CreateGetReplyDirect(fbb, &results, &segments));
  return Encode(ReplyType(MsgType::kGet), 3, fbb);
}

std::vector<uint8_t> ReleaseRequestMessage() {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<uint64_t> handles = {1, 2, 3, 4, 5, 6, 7, 8};
  fbb.Finish(wire::CreateReleaseRequestDirect(fbb, &handles));
  return Encode(Type(MsgType::kRelease), 4, fbb);
}

Header GoodHeader() { return Header{kMagic, kProtocolVersion, Type(MsgType::kHello), 1, 64, 0}; }

TEST_CASE("Encode writes a header that describes the body", "[wire]") {
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateHelloRequestDirect(fbb, kProtocolVersion, "abc"));
  std::vector<uint8_t> out = Encode(Type(MsgType::kHello), 0x1122334455667788ull, fbb);
  Header h = HeaderOf(out);
  CHECK(h.magic == kMagic);
  CHECK(std::memcmp(out.data(), "DPOT", 4) == 0);
  CHECK(h.version == kProtocolVersion);
  CHECK(h.type == Type(MsgType::kHello));
  CHECK(h.request_id == 0x1122334455667788ull);
  CHECK(h.reserved == 0);
  CHECK(h.length % 8 == 0);
  CHECK(h.length >= fbb.GetSize());
  CHECK(h.length < fbb.GetSize() + 8);
  CHECK(out.size() == sizeof(Header) + h.length);
  CHECK(std::memcmp(out.data() + sizeof(Header), fbb.GetBufferPointer(), fbb.GetSize()) == 0);
  for (size_t i = sizeof(Header) + fbb.GetSize(); i < out.size(); ++i) CHECK(out[i] == 0);
  CHECK(CheckHeader(h).empty());
}

TEST_CASE("Encoded messages verify as their own type and read back", "[wire]") {
  auto hello = HelloRequestMessage(1);
  auto create = CreateRequestMessage();
  auto get = GetReplyMessage();
  auto release = ReleaseRequestMessage();
  for (const auto* m : {&hello, &create, &get, &release}) {
    Header h = HeaderOf(*m);
    CAPTURE(TypeName(h.type));
    CHECK(CheckHeader(h).empty());
    CHECK(h.length % 8 == 0);
    CHECK(VerifyBody(h.type, BodyOf(*m)));
  }
  auto body = BodyOf(create);
  const auto* req = Body<wire::CreateRequest>(body);
  REQUIRE(req->frame_sizes()->size() == 3);
  CHECK(req->frame_sizes()->Get(2) == (1u << 20));
  CHECK(req->metadata()->size() == 300);
  CHECK(req->name()->str() == "tensor-7");
  CHECK(req->guid()->lo() == 0xfedcba9876543210ull);
  CHECK(req->evictable());
  CHECK_FALSE(req->seal());
  CHECK(HeaderOf(get).type == (Type(MsgType::kGet) | kReplyBit));
  CHECK(HeaderOf(get).request_id == 3);
}

TEST_CASE("VerifyBody rejects a body of a structurally different type", "[wire]") {
  // Bodies carry no type tag, so not every pair of tables can be told apart; in these, a field
  // read as the other table's offset or vector points out of the body or out of alignment.
  auto hello = BodyOf(HelloRequestMessage(1));
  auto create = BodyOf(CreateRequestMessage());
  auto error = BodyOf(EncodeError(9, wire::Code::StoreFull, std::string(200, 'x')));
  CHECK_FALSE(VerifyBody(Type(MsgType::kRelease), hello));
  CHECK_FALSE(VerifyBody(ReplyType(MsgType::kGet), error));
  CHECK_FALSE(VerifyBody(ReplyType(MsgType::kGet), create));
  CHECK_FALSE(VerifyBody(ReplyType(MsgType::kStatus), create));
}

TEST_CASE("CheckHeader rejects what is not a depot header", "[wire]") {
  CHECK(CheckHeader(GoodHeader()).empty());

  Header h = GoodHeader();
  h.magic = 0x50545448;  // "HTTP"
  CHECK_THAT(CheckHeader(h), Contains("magic"));

  h = GoodHeader();
  h.version = 42;
  std::string why = CheckHeader(h);
  CHECK_THAT(why, Contains("42"));
  CHECK_THAT(why, Contains("version " + std::to_string(kProtocolVersion)));

  h = GoodHeader();
  h.reserved = 1;
  CHECK_THAT(CheckHeader(h), Contains("reserved"));

  h = GoodHeader();
  h.length = 12;
  CHECK_THAT(CheckHeader(h), Contains("12"));

  h = GoodHeader();
  h.length = kMaxMessageSize;
  CHECK(CheckHeader(h).empty());
  h.length = kMaxMessageSize + 8;
  CHECK_THAT(CheckHeader(h), Contains(std::to_string(kMaxMessageSize)));
  h.length = 0xfffffff8u;
  CHECK_FALSE(CheckHeader(h).empty());

  h = GoodHeader();
  h.length = 512;
  CHECK(CheckHeader(h, 512).empty());
  CHECK_FALSE(CheckHeader(h, 504).empty());
}

TEST_CASE("VerifyBody rejects truncated bodies", "[wire]") {
  for (const auto& message : {HelloRequestMessage(1), CreateRequestMessage(), GetReplyMessage(),
                              ReleaseRequestMessage()}) {
    Header h = HeaderOf(message);
    std::vector<uint8_t> body = BodyOf(message);
    CAPTURE(TypeName(h.type), body.size());
    for (size_t len = 0; len < body.size(); ++len) {
      CAPTURE(len);
      std::vector<uint8_t> prefix(body.begin(), body.begin() + static_cast<long>(len));
      bool ok = VerifyBody(h.type, prefix);  // must not crash whatever the answer
      if (len <= body.size() / 2) CHECK_FALSE(ok);
    }
  }
}

TEST_CASE("VerifyBody survives random garbage", "[wire]") {
  const uint16_t types[] = {Type(MsgType::kHello),       ReplyType(MsgType::kHello),
                            Type(MsgType::kCreate),      ReplyType(MsgType::kCreate),
                            Type(MsgType::kGet),         ReplyType(MsgType::kGet),
                            Type(MsgType::kList),        ReplyType(MsgType::kList),
                            ReplyType(MsgType::kStatus), Type(MsgType::kError)};
  std::mt19937 rng(4242);
  constexpr int kIterations = 20000;
  int accepted = 0;
  for (int i = 0; i < kIterations; ++i) {
    std::vector<uint8_t> body(rng() % 257);
    for (auto& b : body) b = static_cast<uint8_t>(rng());
    // Half the time, a plausible root offset so the verifier gets past the first check.
    if (i % 2 == 0 && body.size() >= 8) {
      uint32_t root = 4 + 4 * (rng() % 8);
      std::memcpy(body.data(), &root, sizeof root);
    }
    uint16_t type = types[rng() % std::size(types)];
    if (VerifyBody(type, body)) ++accepted;
  }
  CHECK(accepted < kIterations / 10);
}

TEST_CASE("VerifyBody rejects unknown types and replies that do not exist", "[wire]") {
  auto hello = BodyOf(HelloRequestMessage(1));
  REQUIRE(VerifyBody(Type(MsgType::kHello), hello));
  for (uint16_t type : {0, 40, 63, 66, 0x7ffe, 0x8000}) {
    CAPTURE(type);
    CHECK_FALSE(VerifyBody(type, hello));
  }
  CHECK_FALSE(VerifyBody(Type(MsgType::kHello), {}));

  auto release = BodyOf(ReleaseRequestMessage());
  REQUIRE(VerifyBody(Type(MsgType::kRelease), release));
  CHECK_FALSE(VerifyBody(ReplyType(MsgType::kRelease), release));

  auto error = BodyOf(EncodeError(1, wire::Code::NotFound, "gone"));
  REQUIRE(VerifyBody(Type(MsgType::kError), error));
  CHECK_FALSE(VerifyBody(ReplyType(MsgType::kError), error));

  flatbuffers::FlatBufferBuilder fbb;
  std::vector<uint32_t> ids = {3, 4};
  fbb.Finish(wire::CreateSegmentsRetiredDirect(fbb, &ids));
  auto retired = BodyOf(Encode(Type(MsgType::kSegmentsRetired), 0, fbb));
  REQUIRE(VerifyBody(Type(MsgType::kSegmentsRetired), retired));
  CHECK_FALSE(VerifyBody(ReplyType(MsgType::kSegmentsRetired), retired));
}

// A release naming two GUIDs whose vector is moved to an offset 4 bytes off the 8 its elements
// need: the FlatBuffers verifier checks only the length word's alignment.
std::vector<uint8_t> ReleaseWithMisalignedGuids() {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<wire::Guid> guids = {wire::Guid(1, 2), wire::Guid(3, 4)};
  fbb.Finish(wire::CreateReleaseRequestDirect(fbb, nullptr, &guids));
  std::vector<uint8_t> body(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  auto u32 = [&](size_t at) {
    uint32_t v;
    std::memcpy(&v, body.data() + at, 4);
    return v;
  };
  uint32_t table = u32(0);
  uint32_t vtable = table - u32(table);  // the soffset, as unsigned: the vtable lies before it
  uint16_t field;
  std::memcpy(&field, body.data() + vtable + 4 + 2 * 1, 2);  // field 1: guids
  REQUIRE(field != 0);
  size_t slot = table + field;
  size_t at = (body.size() + 7) & ~size_t{7};  // the length 8-aligned: the elements 4 off
  body.resize(at + 4 + sizeof(wire::Guid) * guids.size() + 4, 0);
  uint32_t n = 2;
  std::memcpy(body.data() + at, &n, 4);
  std::memcpy(body.data() + at + 4, guids.data(), sizeof(wire::Guid) * guids.size());
  uint32_t rel = static_cast<uint32_t>(at - slot);
  std::memcpy(body.data() + slot, &rel, 4);
  return body;
}

TEST_CASE("VerifyBody rejects a release whose GUIDs lie misaligned", "[wire]") {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<wire::Guid> guids = {wire::Guid(1, 2), wire::Guid(3, 4)};
  fbb.Finish(wire::CreateReleaseRequestDirect(fbb, nullptr, &guids));
  std::vector<uint8_t> good(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  REQUIRE(VerifyBody(Type(MsgType::kRelease), good));
  std::vector<uint8_t> bad = ReleaseWithMisalignedGuids();
  // The same body as far as FlatBuffers' own verifier is concerned...
  flatbuffers::Verifier v(bad.data(), bad.size());
  REQUIRE(v.VerifyBuffer<wire::ReleaseRequest>(nullptr));
  REQUIRE(flatbuffers::GetRoot<wire::ReleaseRequest>(bad.data())->guids()->size() == 2);
  // ...which depot refuses, as it refuses misaligned handles.
  CHECK_FALSE(VerifyBody(Type(MsgType::kRelease), bad));
}

TEST_CASE("EncodeError round-trips code and message", "[wire]") {
  for (const std::string& text :
       {std::string(), std::string("object 5f0c does not exist"), std::string(5000, 'm')}) {
    std::vector<uint8_t> out = EncodeError(77, wire::Code::PermissionDenied, text);
    Header h = HeaderOf(out);
    CHECK(CheckHeader(h).empty());
    CHECK(h.type == Type(MsgType::kError));
    CHECK(h.request_id == 77);
    auto body = BodyOf(out);
    REQUIRE(VerifyBody(h.type, body));
    const auto* e = Body<wire::ErrorReply>(body);
    CHECK(e->code() == wire::Code::PermissionDenied);
    REQUIRE(e->message() != nullptr);
    CHECK(e->message()->str() == text);
  }
  // The codes are the same numbers as depot::Status::Code.
  auto out = EncodeError(1, wire::Code::Unavailable, "later");
  auto body = BodyOf(out);
  CHECK(static_cast<int>(Body<wire::ErrorReply>(body)->code()) ==
        static_cast<int>(Status::Code::kUnavailable));
}

TEST_CASE("TypeName names requests, replies and unknown types", "[wire]") {
  CHECK(TypeName(Type(MsgType::kHello)) == "hello");
  CHECK(TypeName(Type(MsgType::kCreate)) == "create");
  CHECK(TypeName(ReplyType(MsgType::kGet)) == "get reply");
  CHECK(TypeName(Type(MsgType::kStatus)) == "status");
  CHECK(TypeName(Type(MsgType::kError)) == "error");
  CHECK(TypeName(Type(MsgType::kSegmentsRetired)) == "segments-retired");
  CHECK_THAT(TypeName(0), Contains("unknown"));
  CHECK(TypeName(Type(MsgType::kPing)) == "ping");
  CHECK(TypeName(Type(MsgType::kSubscribe)) == "subscribe");
  CHECK(TypeName(Type(MsgType::kEvent)) == "event");
  CHECK_THAT(TypeName(40), Contains("unknown"));
  CHECK_THAT(TypeName(kReplyBit), Contains("unknown"));
}

}  // namespace
}  // namespace depot::proto
