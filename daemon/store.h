// Store answers requests: it turns each verified message from a session into changes of the
// object table and the host pool, and a reply. A request that breaks the protocol (anything
// before hello, a reply type) is not answered here: Handle returns the error and the session
// closes. It never touches a socket: replies go to the
// session's Peer. Gets that must wait are parked here, woken by seals or by their deadline.
//
// Not thread-safe: everything runs on the daemon's one io_context thread.
#ifndef DEPOT_DAEMON_STORE_H_
#define DEPOT_DAEMON_STORE_H_

#include <sys/types.h>

#include <array>
#include <map>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "daemon/device_backend.h"
#include "daemon/device_pool.h"
#include "daemon/host_pool.h"
#include "daemon/object_table.h"
#include "daemon/status_reply.h"
#include "proto/fd_passing.h"
#include "proto/wire.h"

namespace depot {

// Where a session's replies go (the Session, in the daemon).
class Peer {
 public:
  virtual ~Peer() = default;
  // Queues one encoded message; `fds` travel with its first byte.
  virtual void Send(std::vector<uint8_t> message, std::vector<UniqueFd> fds) = 0;
  // Messages queued and not yet written (a subscriber that does not read falls behind).
  virtual size_t Backlog() const = 0;
};

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups (SO_PEERGROUPS)
};

// Who may connect. Root and the daemon's own user always may; so may the users listed and the
// members of the groups listed. With both lists empty, the members of the socket's group may.
struct AccessOptions {
  std::vector<uid_t> users;
  std::vector<gid_t> groups;
  uid_t daemon_uid = 0;
  gid_t socket_gid = 0;
};

// Limits on what one user, or one connection, may have created and not yet freed: 0 is no limit.
struct Quota {
  uint64_t bytes = 0;
  uint64_t objects = 0;
};

struct StoreOptions {
  HostPoolOptions pool;
  std::string socket_path;  // reported by status
  std::string version;
  uint32_t max_message_size = proto::kMaxMessageSize;  // largest request accepted
  uint32_t max_frames = proto::kMaxFrames;
  uint32_t max_metadata = proto::kMaxMetadataSize;
  bool eviction = true;   // evict LRU evictable objects when full
  bool hugepages = false;  // clients ask for huge pages on their mappings
  AccessOptions access;
  // Each user gets a namespace of its own (objects and segments); otherwise all share one.
  bool per_user_namespaces = false;
  Quota user_quota;
  Quota client_quota;
  // Gets a connection may have waiting, and replies queued for it before its requests are no
  // longer read.
  uint32_t max_pending = 1024;
  std::chrono::milliseconds handshake_timeout{10000};
  // Device pools: null when this build or this machine has none (devices_unavailable says why).
  DeviceBackend* device_backend = nullptr;
  std::string devices_unavailable;
  std::string device_capacity = "90%";  // per GPU: bytes or a % of its memory
  uint64_t device_chunk_size = 1ull << 30;
  std::string devices = "all";          // "all", "none", or GPU UUIDs separated by commas
};

class Store {
 public:
  static Result<std::unique_ptr<Store>> Create(boost::asio::io_context& io, StoreOptions options);

  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Registers a connected peer; `peer` must outlive the session (until Close).
  SessionId Open(Peer* peer, PeerCredentials creds);

  // The session ended: aborts its creates, drops its references, forgets its waiting gets.
  void Close(SessionId session);

  // Answers one request whose header was checked and whose body was verified. The first request
  // of a session must be hello. Returns a ProtocolError when the session must be closed.
  Status Handle(SessionId session, const proto::Header& header, std::span<const uint8_t> body);

  // A session broke the protocol before its request reached Handle (counted in status).
  void NoteProtocolError() { ++errors_[static_cast<size_t>(Status::Code::kProtocolError)]; }

  // "2 GPUs (GPU-..., GPU-...)", or "unavailable (<reason>)".
  std::string DeviceSummary() const;

  // The socket's group is known once the socket exists (systemd may have made it).
  void SetSocketGroup(gid_t gid) { options_.access.socket_gid = gid; }

  size_t sessions() const { return sessions_.size(); }
  const StoreOptions& options() const { return options_; }

 private:
  // Objects and the shared memory they live in: one for everybody, or one per user.
  struct Namespace {
    uint32_t key;  // the owner's uid, or kShared
    std::unique_ptr<HostPool> pool;
    std::vector<std::unique_ptr<DevicePool>> devices;  // device pool n is devices[n - 1]
    std::unique_ptr<ObjectTable> table;
    size_t sessions = 0;
  };
  static constexpr uint32_t kShared = UINT32_MAX;

  struct Usage {
    uint64_t bytes = 0;
    uint64_t objects = 0;
  };

  struct SessionState {
    Peer* peer = nullptr;
    PeerCredentials creds;
    int64_t connected_ns = 0;
    bool greeted = false;
    std::string name;     // from hello
    std::string process;  // /proc/PID/comm
    uint64_t requests = 0;
    bool subscribed = false;
    uint64_t events_dropped = 0;  // since the last event delivered
    std::unordered_set<uint64_t> sent_segments;  // shared segments (SegmentKey) whose fd it has
    Namespace* ns = nullptr;  // set at hello
    Usage created;            // objects it created that are not freed yet
    size_t waiting = 0;       // its parked gets
  };

  struct GetWait {
    SessionId session;
    uint64_t request_id;
    std::vector<Guid> guids;
    std::vector<const StoredObject*> acquired;  // per guid; nullptr while missing
    std::vector<Status> errors;           // per guid, for results that will not come
    size_t missing;
    std::unique_ptr<boost::asio::steady_timer> timer;
  };

  Store(boost::asio::io_context& io, StoreOptions options);

  // Finds the GPUs to pool (options_.devices) and sizes their budgets; the reason when none.
  Status OpenDevices();

  // The namespace for a user, made on first use.
  Result<Namespace*> NamespaceFor(uid_t uid);
  // Forgets a per-user namespace left without sessions or objects (its segments go back).
  void MaybeDropNamespace(Namespace* ns);
  // Why this peer may not connect, or "" when it may.
  std::string Refusal(const PeerCredentials& creds) const;
  // QuotaExceeded naming the limit when creating `bytes` more would pass one, else OK.
  Status CheckQuota(const SessionState& st, uint64_t bytes) const;
  void OnFreed(Namespace& ns, const StoredObject& o);

  void Reply(SessionId session, uint64_t request_id, uint16_t type,
             flatbuffers::FlatBufferBuilder& fbb, std::vector<UniqueFd> fds = {});
  void ReplyError(SessionId session, uint64_t request_id, const Status& status);

  // Handle, once the session is known and greeted (or greeting): one request to its handler.
  Status Dispatch(SessionId s, SessionState& st, const proto::Header& h,
                  std::span<const uint8_t> body);
  Status OnHello(SessionId s, uint64_t id, const wire::HelloRequest& req);
  void OnCreate(SessionId s, uint64_t id, const wire::CreateRequest& req);
  void OnSealOrAbort(SessionId s, uint64_t id, bool seal, const wire::GuidRequest& req);
  void OnGet(SessionId s, uint64_t id, const wire::GetRequest& req);
  void OnRelease(SessionId s, const wire::ReleaseRequest& req);
  void OnDelete(SessionId s, uint64_t id, const wire::GuidsRequest& req);
  void OnContains(SessionId s, uint64_t id, const wire::GuidsRequest& req);
  void OnList(SessionId s, uint64_t id, const wire::ListRequest& req);
  void OnStat(SessionId s, uint64_t id, const wire::GuidRequest& req);
  void OnStatus(SessionId s, uint64_t id);
  void OnClients(SessionId s, uint64_t id);
  void OnEmpty(SessionId s, uint64_t id, proto::MsgType type);  // ping, subscribe

  // Sends an event to every subscribed session. `object` is null for client events.
  void Emit(wire::EventKind kind, const StoredObject* object, SessionId cause,
            const Namespace* ns);

  // Allocates every frame, evicting least recently used objects while that helps.
  Result<std::vector<Location>> AllocateFrames(Namespace& ns, std::span<const uint64_t> sizes,
                                               std::span<const uint32_t> pools);
  static void FreeFrames(Namespace& ns, std::span<const Location> frames);
  static Status WriteInline(Namespace& ns, const std::vector<Location>& frames,
                            std::span<const uint8_t> data);

  // Seal and its consequence: parked gets waiting for the GUID are answered or advanced.
  void WakeWaiters(Namespace& ns, const Guid& guid);
  // Answers a parked get with what it has (Timeout for the rest) and forgets it.
  void FinishGet(uint64_t wait_id);
  // Removes a parked get and its index entries; nullopt when it is already gone.
  std::optional<GetWait> TakeWait(uint64_t wait_id);
  static Status CheckGuidCount(const flatbuffers::Vector<const wire::Guid*>* guids);

  // Builds the segment list for a reply naming `frames`, with the fds the peer does not have.
  // Unavailable when the daemon is out of file descriptors.
  Status CollectSegments(SessionState& st, std::span<const Location> frames,
                         std::vector<uint64_t>& keys, std::vector<UniqueFd>& fds);
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::SegmentInfo>>> SegmentInfos(
      flatbuffers::FlatBufferBuilder& fbb, const Namespace& ns, const std::vector<uint64_t>& keys);
  void OnSegmentRetired(const Namespace& ns, uint32_t pool, uint32_t segment);
  // A host segment or device chunk that a live object's frame names (so it exists).
  struct SegmentRef {
    int fd;
    uint64_t size;
    bool dedicated;
  };
  static SegmentRef SegmentOf(const Namespace& ns, uint32_t pool, uint32_t id);
  static uint64_t SegmentKey(uint32_t pool, uint32_t id) { return uint64_t{pool} << 32 | id; }
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::DevicePoolInfo>>> DevicePools(
      flatbuffers::FlatBufferBuilder& fbb) const;

  boost::asio::io_context& io_;
  StoreOptions options_;
  PoolBudget budget_;  // the capacity, shared by every namespace's pool
  std::vector<DeviceInfo> devices_;           // the GPUs pooled; device pool n is devices_[n - 1]
  std::vector<PoolBudget> device_budgets_;    // per GPU, shared by every namespace
  std::map<uint32_t, std::unique_ptr<Namespace>> namespaces_;
  std::unordered_map<uid_t, Usage> user_usage_;
  std::chrono::steady_clock::time_point started_;
  SessionId next_session_ = 1;
  std::unordered_map<SessionId, SessionState> sessions_;
  // GUIDs for objects whose creator proposed none: a generator seeded once from the kernel, not a
  // system call per object.
  std::mt19937_64 guid_bits_;
  SessionId current_ = 0;  // the session whose request (or disconnect) is being handled
  uint64_t requests_ = 0;
  uint64_t connections_ = 0;
  std::array<uint64_t, 16> errors_{};  // by Status::Code
  uint64_t next_wait_ = 1;
  std::unordered_map<uint64_t, GetWait> waits_;
  std::unordered_multimap<Guid, uint64_t> waiting_on_;  // guid -> wait id
};

}  // namespace depot

#endif  // DEPOT_DAEMON_STORE_H_
