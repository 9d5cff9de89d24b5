// The frame that carries every depot message, and the limits both sides enforce.
//
// A message is a Header followed by `length` bytes of body: one FlatBuffers table of the type the
// header names (proto/depot.fbs). A reply carries the request's id and its type with kReplyBit
// set, or kError. Bodies are padded to 8 bytes so each header and body stays aligned.
#ifndef DEPOT_PROTO_WIRE_H_
#define DEPOT_PROTO_WIRE_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "depot/guid.h"
#include "depot/status.h"
#include "depot_generated.h"
#include "proto/messages.h"

namespace depot::proto {

inline constexpr uint32_t kMagic = 0x544f5044;  // "DPOT" read as little-endian bytes
inline constexpr uint16_t kProtocolVersion = 1;

inline constexpr uint16_t kReplyBit = 0x8000;

inline constexpr uint16_t ReplyType(MsgType t) { return static_cast<uint16_t>(t) | kReplyBit; }

struct Header {
  uint32_t magic;
  uint16_t version;
  uint16_t type;
  uint64_t request_id;
  uint32_t length;    // body bytes that follow, a multiple of 8
  uint32_t reserved;  // zero
};
static_assert(sizeof(Header) == 24);

// Limits, answered with InvalidArgument or ProtocolError, never asserted.
inline constexpr uint32_t kMaxMessageSize = 64u << 20;  // body bytes
inline constexpr uint32_t kMaxFrames = 64;              // per object
inline constexpr uint32_t kMaxGuidsPerRequest = 2048;
inline constexpr uint32_t kMaxMetadataSize = 16u << 10;
inline constexpr uint32_t kMaxNameSize = 256;
inline constexpr uint32_t kMaxInlineSize = 64u << 10;  // create-and-seal payload in the message
inline constexpr uint32_t kMaxListLimit = 4096;
inline constexpr int kMaxFdsPerSend = 250;  // the kernel takes at most 253 per sendmsg

// The largest get reply must fit in one message.
static_assert(uint64_t{kMaxGuidsPerRequest} *
                  (kMaxMetadataSize + kMaxFrames * sizeof(wire::FrameLocation) + 256) <
              kMaxMessageSize);

// Each wire code is the depot::Status code of the same value.
static_assert(static_cast<int>(wire::Code::Ok) == static_cast<int>(Status::Code::kOk));
static_assert(static_cast<int>(wire::Code::NotFound) == static_cast<int>(Status::Code::kNotFound));
static_assert(static_cast<int>(wire::Code::Timeout) == static_cast<int>(Status::Code::kTimeout));
static_assert(static_cast<int>(wire::Code::StoreFull) ==
              static_cast<int>(Status::Code::kStoreFull));
static_assert(static_cast<int>(wire::Code::AlreadyExists) ==
              static_cast<int>(Status::Code::kAlreadyExists));
static_assert(static_cast<int>(wire::Code::InvalidArgument) ==
              static_cast<int>(Status::Code::kInvalidArgument));
static_assert(static_cast<int>(wire::Code::ProtocolError) ==
              static_cast<int>(Status::Code::kProtocolError));
static_assert(static_cast<int>(wire::Code::Disconnected) ==
              static_cast<int>(Status::Code::kDisconnected));
static_assert(static_cast<int>(wire::Code::PermissionDenied) ==
              static_cast<int>(Status::Code::kPermissionDenied));
static_assert(static_cast<int>(wire::Code::Unavailable) ==
              static_cast<int>(Status::Code::kUnavailable));
static_assert(static_cast<int>(wire::Code::QuotaExceeded) ==
              static_cast<int>(Status::Code::kQuotaExceeded));
static_assert(static_cast<int>(wire::Code::DataLoss) == static_cast<int>(Status::Code::kDataLoss));
static_assert(wire::Code::MAX == wire::Code::DataLoss, "a new code needs a Status code");

inline wire::Code ToWire(Status::Code c) { return static_cast<wire::Code>(c); }
inline Status ToStatus(wire::Code c, const flatbuffers::String* message) {
  return Status(static_cast<Status::Code>(c), message ? message->str() : "");
}
inline wire::Guid ToWire(const Guid& g) { return wire::Guid(g.hi, g.lo); }
inline Guid FromWire(const wire::Guid& g) { return Guid{g.hi(), g.lo()}; }

// Checks a received header: magic, version, reserved bits and size. Returns "" when it is
// acceptable, else a message saying what is wrong.
std::string CheckHeader(const Header& h, uint32_t max_body = kMaxMessageSize);

// Runs the FlatBuffers verifier over a body of the table that `type` names in the message table
// (proto/messages.h), and checks the alignment of its vectors. False for an unknown type, a reply
// to a type that has none, or a body that does not verify.
bool VerifyBody(uint16_t type, std::span<const uint8_t> body);

// Returns header + body for a finished builder, the body padded to 8 bytes.
std::vector<uint8_t> Encode(uint16_t type, uint64_t request_id,
                            flatbuffers::FlatBufferBuilder& fbb);

// Returns an encoded ErrorReply.
std::vector<uint8_t> EncodeError(uint64_t request_id, wire::Code code, std::string_view message);

// Human name of a message type, for logs and errors ("create", "get reply", ...).
std::string TypeName(uint16_t type);

// Reads the table a verified body holds.
template <typename T>
const T* Body(std::span<const uint8_t> body) {
  return flatbuffers::GetRoot<T>(body.data());
}

}  // namespace depot::proto

#endif  // DEPOT_PROTO_WIRE_H_
