#include "proto/wire.h"

#include <fmt/format.h>

#include <cstring>
#include <type_traits>

namespace depot::wire {
// The body of a message whose row says NoReply in that direction (named in wire's namespace, as
// the tables are: another Event or the like cannot be taken for one of them).
struct NoReply {};
}  // namespace depot::wire

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

// The vectors of 8-byte elements each table holds, checked after the verifier. A table not named
// here has none.
template <typename T>
bool FieldsAligned(const T&) {
  return true;
}
bool FieldsAligned(const wire::CreateRequest& t) { return Aligned(t.frame_sizes()); }
bool FieldsAligned(const wire::CreateReply& t) { return Aligned(t.frames()); }
bool FieldsAligned(const wire::GetRequest& t) { return Aligned(t.guids()); }
bool FieldsAligned(const wire::GetReply& t) {
  return AllAligned(t.results(), &wire::GetResult::frames);
}
bool FieldsAligned(const wire::ReleaseRequest& t) {
  return Aligned(t.handles()) && Aligned(t.guids());
}
bool FieldsAligned(const wire::GuidsRequest& t) { return Aligned(t.guids()); }
bool FieldsAligned(const wire::ListReply& t) {
  return AllAligned(t.objects(), &wire::ObjectInfo::frames);
}
bool FieldsAligned(const wire::StatReply& t) {
  return t.info() == nullptr || Aligned(t.info()->frames());
}
bool FieldsAligned(const wire::StatusReply& t) { return Aligned(t.errors()) && Aligned(t.users()); }
bool FieldsAligned(const wire::PutRequest& t) { return Aligned(t.frames()); }

template <typename T>
bool VerifyTable(std::span<const uint8_t> body) {
  if constexpr (std::is_same_v<T, wire::NoReply>) {
    return false;
  } else {
    return Verify<T>(body) && FieldsAligned(*Root<T>(body));
  }
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
  bool reply = type & kReplyBit;
  switch (static_cast<MsgType>(type & ~kReplyBit)) {
#define DEPOT_MESSAGE_VERIFY(name, number, text, request, reply_table, sender) \
  case MsgType::k##name:                                                       \
    return reply ? VerifyTable<wire::reply_table>(body) : VerifyTable<wire::request>(body);
    DEPOT_MESSAGES(DEPOT_MESSAGE_VERIFY)  // NOLINT(bugprone-branch-clone): rows share tables
#undef DEPOT_MESSAGE_VERIFY
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
  const MessageRow* row = FindMessage(type & ~kReplyBit);
  if (row == nullptr) return fmt::format("unknown type {}", type);
  std::string name(row->name);
  return type & kReplyBit ? name + " reply" : name;
}

}  // namespace depot::proto
