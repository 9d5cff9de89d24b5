#include "proto/wire.h"

#include <cstring>

#include <fmt/format.h>

namespace depot::proto {
namespace {

template <typename T>
bool Verify(std::span<const uint8_t> body) {
  flatbuffers::Verifier v(body.data(), body.size());
  return v.VerifyBuffer<T>(nullptr);
}

// The verifier checks that a vector's length is aligned, not its elements: a vector of 8-byte
// scalars or structs may sit 4 bytes off, and reading one is then undefined behaviour. (An empty
// one may sit anywhere: builders do not align it.)
template <typename T>
constexpr size_t kElementAlign = sizeof(T);
template <typename T>
constexpr size_t kElementAlign<const T*> = alignof(T);
template <typename T>
bool Aligned(const flatbuffers::Vector<T>* v) {
  return v == nullptr || v->size() == 0 ||
         reinterpret_cast<uintptr_t>(v->Data()) % kElementAlign<T> == 0;
}
template <typename T, typename F>
bool AllAligned(const flatbuffers::Vector<flatbuffers::Offset<T>>* v, F field) {
  if (v == nullptr) return true;
  for (const T* t : *v) {
    if (!Aligned((t->*field)())) return false;
  }
  return true;
}
template <typename T>
const T* Root(std::span<const uint8_t> body) {
  return flatbuffers::GetRoot<T>(body.data());
}

}  // namespace

std::string CheckHeader(const Header& h, uint32_t max_body) {
  if (h.magic != kMagic) {
    return fmt::format("bad magic 0x{:08x} (expected 0x{:08x}): not a depot peer", h.magic, kMagic);
  }
  if (h.version != kProtocolVersion) {
    return fmt::format("protocol version {} is not supported (this side speaks version {})",
                       h.version, kProtocolVersion);
  }
  if (h.reserved != 0) return "reserved header field is not zero";
  if (h.length % 8 != 0) return fmt::format("body length {} is not a multiple of 8", h.length);
  if (h.length > max_body) {
    return fmt::format("message of {} bytes exceeds the limit of {} bytes", h.length, max_body);
  }
  return "";
}

bool VerifyBody(uint16_t type, std::span<const uint8_t> body) {
  using namespace wire;
  bool reply = type & kReplyBit;
  switch (static_cast<MsgType>(type & ~kReplyBit)) {
    case MsgType::kHello:
      return reply ? Verify<HelloReply>(body) : Verify<HelloRequest>(body);
    case MsgType::kCreate:
      return reply ? Verify<CreateReply>(body) && Aligned(Root<CreateReply>(body)->frames())
                   : Verify<CreateRequest>(body) &&
                         Aligned(Root<CreateRequest>(body)->frame_sizes());
    case MsgType::kSeal:
    case MsgType::kAbort:
      return reply ? Verify<EmptyReply>(body) : Verify<GuidRequest>(body);
    case MsgType::kGet:
      return reply ? Verify<GetReply>(body) &&
                         AllAligned(Root<GetReply>(body)->results(), &GetResult::frames)
                   : Verify<GetRequest>(body) && Aligned(Root<GetRequest>(body)->guids());
    case MsgType::kRelease:
      return !reply && Verify<ReleaseRequest>(body) &&
             Aligned(Root<ReleaseRequest>(body)->handles()) &&
             Aligned(Root<ReleaseRequest>(body)->guids());
    case MsgType::kDelete:
    case MsgType::kContains:
      return reply ? Verify<GuidsReply>(body)
                   : Verify<GuidsRequest>(body) && Aligned(Root<GuidsRequest>(body)->guids());
    case MsgType::kList:
      return reply ? Verify<ListReply>(body) &&
                         AllAligned(Root<ListReply>(body)->objects(), &ObjectInfo::frames)
                   : Verify<ListRequest>(body);
    case MsgType::kStat:
      return reply ? Verify<StatReply>(body) && (Root<StatReply>(body)->info() == nullptr ||
                                                  Aligned(Root<StatReply>(body)->info()->frames()))
                   : Verify<GuidRequest>(body);
    case MsgType::kStatus:
      return reply ? Verify<StatusReply>(body) && Aligned(Root<StatusReply>(body)->errors()) &&
                         Aligned(Root<StatusReply>(body)->users())
                   : Verify<EmptyReply>(body);
    case MsgType::kPing:
    case MsgType::kSubscribe:
      return Verify<EmptyReply>(body);
    case MsgType::kClients:
      return reply ? Verify<ClientsReply>(body) : Verify<EmptyReply>(body);
    case MsgType::kMetrics:
      return reply ? Verify<MetricsReply>(body) : Verify<EmptyReply>(body);
    case MsgType::kSegmentsRetired:
    case MsgType::kSegmentsDropped:
      return !reply && Verify<SegmentsRetired>(body);
    case MsgType::kLease:
      return reply ? Verify<CreateReply>(body) && Aligned(Root<CreateReply>(body)->frames())
                   : Verify<LeaseRequest>(body);
    case MsgType::kPut:
      return !reply && Verify<PutRequest>(body) && Aligned(Root<PutRequest>(body)->frames());
    case MsgType::kPutsWritten:
      return !reply && Verify<EmptyReply>(body);
    case MsgType::kEvent:
      return !reply && Verify<Event>(body);
    case MsgType::kError:
      return !reply && Verify<ErrorReply>(body);
  }
  return false;
}

std::vector<uint8_t> Encode(uint16_t type, uint64_t request_id,
                            flatbuffers::FlatBufferBuilder& fbb) {
  uint32_t size = fbb.GetSize();
  uint32_t padded = (size + 7) & ~7u;
  std::vector<uint8_t> out(sizeof(Header) + padded, 0);
  Header h{kMagic, kProtocolVersion, type, request_id, padded, 0};
  std::memcpy(out.data(), &h, sizeof h);
  std::memcpy(out.data() + sizeof h, fbb.GetBufferPointer(), size);
  return out;
}

std::vector<uint8_t> EncodeError(uint64_t request_id, wire::Code code, std::string_view message) {
  flatbuffers::FlatBufferBuilder fbb(64 + message.size());
  auto msg = fbb.CreateString(message.data(), message.size());
  fbb.Finish(wire::CreateErrorReply(fbb, code, msg));
  return Encode(static_cast<uint16_t>(MsgType::kError), request_id, fbb);
}

std::string TypeName(uint16_t type) {
  static constexpr const char* kNames[] = {
      "?",    "hello", "create", "seal",   "abort", "get",     "release", "delete",
      "contains", "list", "stat", "status", "ping", "clients", "subscribe", "metrics",
      "segments-dropped"};
  bool reply = type & kReplyBit;
  uint16_t base = type & ~kReplyBit;
  std::string name;
  if (base == static_cast<uint16_t>(MsgType::kError)) {
    name = "error";
  } else if (base == static_cast<uint16_t>(MsgType::kSegmentsRetired)) {
    name = "segments-retired";
  } else if (base == static_cast<uint16_t>(MsgType::kEvent)) {
    name = "event";
  } else if (base == static_cast<uint16_t>(MsgType::kLease)) {
    name = "lease";
  } else if (base == static_cast<uint16_t>(MsgType::kPut)) {
    name = "put";
  } else if (base == static_cast<uint16_t>(MsgType::kPutsWritten)) {
    name = "puts-written";
  } else if (base > 0 && base < std::size(kNames)) {
    name = kNames[base];
  } else {
    return fmt::format("unknown type {}", type);
  }
  return reply ? name + " reply" : name;
}

}  // namespace depot::proto
