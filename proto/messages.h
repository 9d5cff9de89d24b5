// The message types of the depot protocol, one row each: everything else about a type is made from
// this table or checked against it at compile time.
//
//   X(Name, number, "name", RequestTable, ReplyTable, sender)
//
// - `MsgType::kName` is `number` on the wire (proto/wire.h); a reply carries it with kReplyBit.
// - "name" is the type's name in logs, errors and the `type` label of the request metrics.
// - RequestTable is the FlatBuffers table (proto/depot.fbs) its body holds, checked by
//   VerifyBody; ReplyTable the table of its reply, or NoReply when none is sent (an error then
//   closes the connection instead).
// - sender: kClient for a request a client sends and the daemon dispatches (daemon/store.cc,
//   a switch with no default: -Werror=switch makes a row without a case fail to compile);
//   kDaemon for a message only the daemon sends (request id 0), which it refuses from a client.
//
// A new type is one row here, one case in Store::Dispatch, and its tables in depot.fbs; framing,
// verification, names and metrics follow from the row.
#ifndef DEPOT_PROTO_MESSAGES_H_
#define DEPOT_PROTO_MESSAGES_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#define DEPOT_MESSAGES(X)                                                       \
  X(Hello, 1, "hello", HelloRequest, HelloReply, kClient)                       \
  X(Create, 2, "create", CreateRequest, CreateReply, kClient)                   \
  X(Seal, 3, "seal", GuidRequest, EmptyReply, kClient)                          \
  X(Abort, 4, "abort", GuidRequest, EmptyReply, kClient)                        \
  X(Get, 5, "get", GetRequest, GetReply, kClient)                               \
  X(Release, 6, "release", ReleaseRequest, NoReply, kClient)                    \
  X(Delete, 7, "delete", GuidsRequest, GuidsReply, kClient)                     \
  X(Contains, 8, "contains", GuidsRequest, GuidsReply, kClient)                 \
  X(List, 9, "list", ListRequest, ListReply, kClient)                           \
  X(Stat, 10, "stat", GuidRequest, StatReply, kClient)                          \
  X(Status, 11, "status", EmptyReply, StatusReply, kClient)                     \
  X(Ping, 12, "ping", EmptyReply, EmptyReply, kClient)                          \
  X(Clients, 13, "clients", EmptyReply, ClientsReply, kClient)                  \
  /* then Events on this connection */                                          \
  X(Subscribe, 14, "subscribe", EmptyReply, EmptyReply, kClient)                \
  X(Metrics, 15, "metrics", EmptyReply, MetricsReply, kClient)                  \
  /* the segment ids this client unmapped after a SegmentsRetired notice */     \
  X(SegmentsDropped, 16, "segments-dropped", SegmentsRetired, NoReply, kClient) \
  /* the reply has no GUID; its one frame is the lease */                       \
  X(Lease, 18, "lease", LeaseRequest, CreateReply, kClient)                     \
  X(Put, 19, "put", PutRequest, NoReply, kClient)                               \
  /* puts wait in the put ring, and it is not polled */                         \
  X(PutsWritten, 20, "puts-written", EmptyReply, NoReply, kClient)              \
  /* more reference slots, or the index that replaced this session's */         \
  X(Index, 21, "index", IndexRequest, IndexReply, kClient)                      \
  /* after a reconnect: objects still mapped from the last connection */        \
  X(Hold, 22, "hold", GuidsRequest, GuidsReply, kClient)                        \
  /* after a reconnect: done with a session of the last daemon */               \
  X(Resume, 23, "resume", ResumeRequest, EmptyReply, kClient)                   \
  X(SegmentsRetired, 64, "segments-retired", SegmentsRetired, NoReply, kDaemon) \
  X(Event, 65, "event", Event, NoReply, kDaemon)                                \
  /* in answer to any request */                                                \
  X(Error, 0x7fff, "error", ErrorReply, NoReply, kDaemon)

namespace depot::proto {

enum class MsgType : uint16_t {
#define DEPOT_MESSAGE_ENUM(name, number, text, request, reply, sender) k##name = number,
  DEPOT_MESSAGES(DEPOT_MESSAGE_ENUM)
#undef DEPOT_MESSAGE_ENUM
};

enum class Sender : uint8_t { kClient, kDaemon };

struct MessageRow {
  MsgType type;
  std::string_view name;
  bool replied;  // a reply is sent (false: NoReply)
  Sender sender;
};

// The rows, in table order.
inline constexpr std::array kMessages = {
#define DEPOT_MESSAGE_ROW(name, number, text, request, reply, sender)                \
  MessageRow{MsgType::k##name, text, !std::string_view(#reply).ends_with("NoReply"), \
             Sender::sender},
    DEPOT_MESSAGES(DEPOT_MESSAGE_ROW)
#undef DEPOT_MESSAGE_ROW
};

// The row of a wire type without kReplyBit, or nullptr when no row has it.
constexpr const MessageRow* FindMessage(uint16_t type) {
  for (const MessageRow& row : kMessages) {
    if (static_cast<uint16_t>(row.type) == type) return &row;
  }
  return nullptr;
}

// The requests a client may send, numbered 1..kRequestCount-1 densely by table position, for
// arrays indexed by request (metrics). 0 stands for any other type.
constexpr size_t RequestIndex(uint16_t type) {
  size_t index = 1;
  for (const MessageRow& row : kMessages) {
    if (row.sender != Sender::kClient) continue;
    if (static_cast<uint16_t>(row.type) == type) return index;
    ++index;
  }
  return 0;
}
inline constexpr size_t kRequestCount = [] {
  size_t n = 1;
  for (const MessageRow& row : kMessages) n += row.sender == Sender::kClient;
  return n;
}();

// Every number is used once, and every name once.
static_assert([] {
  for (size_t i = 0; i < kMessages.size(); ++i) {
    for (size_t j = i + 1; j < kMessages.size(); ++j) {
      if (kMessages[i].type == kMessages[j].type || kMessages[i].name == kMessages[j].name) {
        return false;
      }
    }
  }
  return true;
}());
// Numbers fit below kReplyBit (proto/wire.h), and 0 is no type.
static_assert([] {
  for (const MessageRow& row : kMessages) {
    auto n = static_cast<uint16_t>(row.type);
    if (n == 0 || n >= 0x8000) return false;
  }
  return true;
}());

}  // namespace depot::proto

#endif  // DEPOT_PROTO_MESSAGES_H_
