// A Store driven without sockets, for unit tests of the daemon's request handling: requests go
// straight to Store::Handle as a Session would hand them over, and what the store sends lands in
// a FakePeer. Everything that knows the shape of StoreOptions or of the pools is in MakeOptions
// (store_fixture.cc), so that a change there is adapted in one place.
//
// Not thread-safe, like the Store: a test drives it from its one thread.
#ifndef DEPOT_TESTS_STORE_FIXTURE_H_
#define DEPOT_TESTS_STORE_FIXTURE_H_

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/store.h"
#include "proto/wire.h"

namespace depot::test {

using proto::MsgType;

// Who the daemon runs as, and the socket's group, in every test store.
inline constexpr uid_t kDaemonUid = 4242;
inline constexpr gid_t kSocketGid = 4343;
inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * kKiB;

// One message the store sent.
struct Message {
  uint16_t type = 0;
  uint64_t request_id = 0;
  std::vector<uint8_t> body;
  std::vector<UniqueFd> fds;

  bool IsError() const { return type == static_cast<uint16_t>(MsgType::kError); }
  // "OK" for a reply that is not an error, else the error's code name (readable in assertions).
  std::string code() const;
  // The error's message; "" for a reply that is not an error.
  std::string message() const;
  template <typename T>
  const T* As() const {
    return proto::Body<T>(body);
  }
};

// A session's far end: keeps every message, with its fds, in the order sent.
class FakePeer : public Peer {
 public:
  void Send(std::vector<uint8_t> message, std::vector<UniqueFd> fds) override;
  size_t Backlog() const override { return backlog; }

  std::deque<Message> received;
  size_t backlog = 0;  // what Backlog reports: a subscriber that does not read
};

// What the tests vary about a store; everything else is fixed in MakeOptions.
struct StoreSetup {
  uint64_t capacity = 4 * kMiB;
  uint64_t segment_size = 1 * kMiB;
  uint64_t keep_warm = 1 * kMiB;  // one empty segment kept
  bool eviction = true;
  bool per_user_namespaces = false;
  Quota user_quota{};
  Quota client_quota{};
  uint32_t max_pending = 1024;
  uint32_t max_pending_guids = 16384;
  uint32_t max_pending_guids_per_user = 65536;
  uint32_t max_sessions_per_user = 1024;
  uint32_t max_frames = 8;
  uint32_t max_metadata = 1024;
  uint32_t max_message_size = proto::kMaxMessageSize;
  uint64_t index_entries = 65536;  // the shared index's first size
  std::vector<uid_t> allow_users{};
  std::vector<gid_t> allow_groups{};
};

// Options for a test store: its shared memory under a name prefix of its own (this process, a
// counter), so tests running in parallel never meet; no device pools.
StoreOptions MakeOptions(const StoreSetup& setup);

// The reason a test store gives for having no device pools.
inline constexpr const char* kNoDevices = "no GPUs in this test";

// One connection to the Store under test (not a depot::Client): its session and its far end.
struct FakeClient {
  SessionId id = 0;
  PeerCredentials creds;
  FakePeer peer;
  uint64_t next_request = 1;
  bool open = true;
};

// A create request; the defaults ask for one host frame of 1 KiB and nothing else.
struct CreateArgs {
  std::vector<uint64_t> sizes{1024};
  std::optional<Guid> guid{};
  bool evictable = false;
  std::vector<uint8_t> metadata{};
  std::string name{};
  std::optional<std::vector<uint8_t>> inline_data{};
  bool seal = false;
  std::vector<uint32_t> pools{};  // empty: no frame_pools field
};

// Status, the fields the tests read.
struct StatusSummary {
  uint64_t used = 0;
  uint32_t segments = 0;
  uint64_t creating = 0;
  uint64_t sealed = 0;
  uint64_t deleted = 0;
  uint64_t evictions = 0;
  uint32_t gets_waiting = 0;
  uint32_t namespaces = 0;
  uint32_t clients = 0;
  uint64_t reserved = 0;
  uint64_t retired_held = 0;
  uint64_t index_entries = 0;
  uint64_t index_growths = 0;
  uint32_t index_moving = 0;
  std::vector<uint64_t> errors;                             // by code
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> users;  // uid -> objects, bytes
  uint64_t errors_of(Status::Code c) const { return errors.at(static_cast<size_t>(c)); }
};

// One test's store, the io_context its timers run on, and its clients. Each request helper sends
// one request the way a Session would and takes its reply off the client's peer; events and
// other messages the store sends on its own stay there. Not thread-safe.
class StoreHarness {
 public:
  explicit StoreHarness(const StoreSetup& setup = {});
  ~StoreHarness();

  // A session of this user, not greeted yet.
  FakeClient& Connect(uid_t uid = kDaemonUid, gid_t gid = kSocketGid,
                      std::vector<gid_t> groups = {});
  // A greeted session; REQUIREs the hello reply.
  FakeClient& Hello(uid_t uid = kDaemonUid, gid_t gid = kSocketGid, std::vector<gid_t> groups = {});
  // What Handle returned for a hello (not OK: the session would be closed).
  Status SayHello(FakeClient& c, uint16_t version = proto::kProtocolVersion,
                  const std::string& name = "store_test");
  void Close(FakeClient& c);

  // Hands the store one request; returns what Handle returned. `id` receives the request id.
  Status Send(FakeClient& c, MsgType type, flatbuffers::FlatBufferBuilder& fbb,
              uint64_t* id = nullptr);
  // Removes and returns the reply to request `id`, when one came.
  static std::optional<Message> Reply(FakeClient& c, uint64_t id);
  // Send and Reply, REQUIREing both.
  Message Call(FakeClient& c, MsgType type, flatbuffers::FlatBufferBuilder& fbb);

  Message Create(FakeClient& c, const CreateArgs& args);
  // A create that may wait (for memory): returns its request id, REQUIREing that Handle
  // accepted it.
  uint64_t SendCreate(FakeClient& c, const CreateArgs& args);
  // Create then seal; REQUIREs both to succeed. Returns the GUID.
  Guid Put(FakeClient& c, uint64_t size, bool evictable = false, std::optional<Guid> guid = {});
  Message Seal(FakeClient& c, const Guid& g, std::optional<uint64_t> checksum = {});
  Message Abort(FakeClient& c, const Guid& g);
  // A get that may wait: returns its request id, REQUIREing that Handle accepted it.
  uint64_t SendGet(FakeClient& c, const std::vector<Guid>& guids, int64_t timeout_ms);
  // A get that must be answered at once.
  Message Get(FakeClient& c, const std::vector<Guid>& guids, int64_t timeout_ms = 0);
  void Release(FakeClient& c, const std::vector<uint64_t>& handles);
  // Answers every retire notice `c` received (and removes them) as the client library does once
  // it has unmapped the segments: a SegmentsDropped naming them. Returns how many segments.
  size_t DropRetired(FakeClient& c);
  Message Delete(FakeClient& c, const std::vector<Guid>& guids);
  Message Contains(FakeClient& c, const std::vector<Guid>& guids);
  Message List(FakeClient& c);
  Message Stat(FakeClient& c, const Guid& g);
  Message Subscribe(FakeClient& c);
  StatusSummary StatusOf(FakeClient& c);

  // Removes and returns the events the peer received.
  static std::vector<Message> Events(FakeClient& c);

  // Runs the store's timers until none is left or `limit` has passed.
  void RunFor(std::chrono::milliseconds limit);

  Store& store() { return *store_; }

 private:
  boost::asio::io_context io_;  // first: it outlives the store, whose timers it holds
  std::unique_ptr<Store> store_;
  std::list<FakeClient> clients_;  // stable addresses: the store keeps their peers
};

// Test GUIDs: small, readable, never nil.
inline Guid G(uint64_t n) { return Guid{0x1111, n}; }

// The GUID a create reply names.
Guid CreatedGuid(const Message& reply);

// Per GUID, the code name of each result of a get, delete or contains reply.
std::vector<std::string> ResultCodes(const Message& reply);

// The handle of each result of a get reply (0 for results that are not OK).
std::vector<uint64_t> Handles(const Message& reply);

}  // namespace depot::test

#endif  // DEPOT_TESTS_STORE_FIXTURE_H_
