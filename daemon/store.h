// Store is the request handler: it turns each verified message from a session into calls on the
// units that keep the daemon's state, and a reply. It never touches a socket (replies go to the
// session's Peer) and keeps no state of its own beyond the sessions it serves:
//   AccessPolicy   who may connect (at hello)
//   NamespaceSet   objects and the pools they live in, allocation with eviction; the disk behind
//                  them (SpillStore: room for creates, restores for gets, persistence at stop)
//   QuotaLedger    what each user and connection created, against their limits
//   GetWaits       gets parked until their objects are sealed, and their timers
//   SegmentTracker which segment descriptors each session has; retire notices
//   EventBus       events to subscribers
//   DeviceSet      the GPUs pooled
//   OwnerScopes    objects deleted when the session that created them closes
//   StoreCounters  request latencies and object sizes, for metrics
// The queries, which change nothing (list, stat, status, clients, metrics), are in
// store_queries.cc; leases, puts in one message or through the put rings and the drain that makes
// them visible (LeaseTable, PutRings) in store_puts.cc; a session's open, hello and close in
// store_sessions.cc.
// A request that breaks the protocol (anything before hello, a reply type) is not answered here:
// Handle returns the error and the session closes.
//
// Not thread-safe: everything runs on the daemon's one io_context thread.
#ifndef DEPOT_DAEMON_STORE_H_
#define DEPOT_DAEMON_STORE_H_

#include <sys/types.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "daemon/access_policy.h"
#include "daemon/device_set.h"
#include "daemon/event_bus.h"
#include "daemon/get_waits.h"
#include "daemon/lease_table.h"
#include "daemon/namespace_set.h"
#include "daemon/owner_scopes.h"
#include "daemon/peer.h"
#include "daemon/put_rings.h"
#include "daemon/quota_ledger.h"
#include "daemon/segment_tracker.h"
#include "daemon/store_counters.h"
#include "daemon/store_options.h"
#include "daemon/user_cap.h"
#include "proto/wire.h"

namespace depot {

class Store {
 public:
  // InvalidArgument for options that cannot go together; the pool's error when the shared
  // namespace cannot be made (with prefault, its whole capacity is reserved here); the spill
  // directory's when it cannot be used (its objects from a previous daemon are adopted here, and
  // then those of the memory it kept, `kept`, from systemd's descriptor store).
  static Result<std::unique_ptr<Store>> Create(boost::asio::io_context& io, StoreOptions options,
                                               std::vector<KeptFd> kept = {});

  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Registers a connected peer; `peer` must outlive the session (until Close). QuotaExceeded
  // when the peer's user has max_handshakes_per_user connections that have not said hello (the
  // access policy is asked at hello): then nothing is registered, and the connection closes.
  Result<SessionId> Open(Peer* peer, PeerCredentials creds);

  // The session ended: aborts its creates, drops its references, forgets its waiting gets.
  void Close(SessionId session);

  // Answers one request whose header was checked and whose body was verified. The first request
  // of a session must be hello. Returns a ProtocolError when the session must be closed.
  Status Handle(SessionId session, const proto::Header& header, std::span<const uint8_t> body);
  // Takes a turn's worth of the session's put ring (PutRings::kTurnRecords) before the session
  // hands over its next request: whether records are left (the session comes back next turn,
  // so that a full ring, hundreds of puts, does not hold up every other connection at once);
  // the error when its ring broke (the session must close).
  Result<bool> TakeRingTurn(SessionId session);

  // Session `s` ended its turn with whole messages read and not handled: the next drain
  // handles them (store_puts.cc).
  void NoteUnhandled(SessionId s);
  // A session broke the protocol before its request reached Handle (counted in status).
  void NoteProtocolError() { ++errors_[static_cast<size_t>(Status::Code::kProtocolError)]; }

  // "2 GPUs (GPU-..., GPU-...)", or "unavailable (<reason>)".
  std::string DeviceSummary() const { return devices_.Summary(); }
  // Looks for GPUs again when there are none (SIGHUP), logging what it finds; clients that
  // connect from then on are told of the pools found.
  void FindDevices() { namespaces_.FindDevices(); }
  // The daemon stops (SIGINT, SIGTERM): what it keeps for the next one (KeptMemory) stays in the
  // descriptor store as the sessions close, their put rings included, so that the next daemon
  // waits for their processes, which carry on and may still use its memory.
  void Stopping() { namespaces_.kept().Stop(); }

  // The socket's group is known once the socket exists (systemd may have made it).
  void SetSocketGroup(gid_t gid) { access_.set_socket_gid(gid); }

  // At a clean stop, once every session is closed: writes every object still in memory to the
  // spill directory, for the next daemon (nothing without spill_dir).
  void Persist() { namespaces_.Persist(); }

  size_t sessions() const { return sessions_.size(); }

  // The metrics in the Prometheus text format (the metrics request and the HTTP endpoint).
  std::string Metrics() const;
  const StoreOptions& options() const { return options_; }

 private:
  struct SessionState {
    Peer* peer = nullptr;
    PeerCredentials creds;
    int64_t connected_ns = 0;
    std::string name;     // from hello
    std::string process;  // /proc/PID/comm
    uint64_t requests = 0;
    Namespace* ns = nullptr;  // set at hello: greeted
    // References the session holds by GUID, released by GUID: objects it got from its put ring
    // before the daemon took them (kHeld), and those it still mapped when it reconnected (hold).
    std::unordered_map<Guid, ObjectId> guid_holds;
  };

  Store(boost::asio::io_context& io, StoreOptions options);

  void Reply(SessionId session, uint64_t request_id, proto::MsgType type,
             flatbuffers::FlatBufferBuilder& fbb, std::vector<UniqueFd> fds = {});
  void ReplyError(SessionId session, uint64_t request_id, const Status& status);
  // InvalidArgument, naming max_message_size, for a reply of `size` bytes that would pass it: no
  // request may make the daemon queue an unbounded reply (nor one its client would refuse).
  Status CheckReplySize(size_t size) const;

  // An exception escaped the handling of `what` for session `s`: logged, and the ProtocolError
  // that closes that session (and no other).
  Status Failed(SessionId s, std::string_view what, const std::exception& e);
  // A message only the daemon sends, or of no known type, came from a client.
  Status NotARequest(uint16_t type);
  // Handle, once the session is known and greeted (or greeting): one request to its handler.
  Status Dispatch(SessionId s, SessionState& st, const proto::Header& h,
                  std::span<const uint8_t> body);
  Status OnHello(SessionId s, uint64_t id, const wire::HelloRequest& req);
  // The ProtocolError that closes session `s` when it overwrote the layout words of its reference
  // slots (proto/layout_words.h); checked before each of its requests.
  Status CheckSlotWords(SessionId s);
  // The greeted sessions of each user (max_sessions_per_user).
  std::map<uid_t, uint32_t> SessionsByUser() const;
  // `waited`: asked again after waiting for retired segments to be let go (it waits once).
  void OnCreate(SessionId s, uint64_t id, std::span<const uint8_t> body, bool waited = false);
  void OnSealOrAbort(SessionId s, uint64_t id, bool seal, const wire::GuidRequest& req);
  void OnGet(SessionId s, uint64_t id, const wire::GetRequest& req);
  // Replies to a get that is complete or out of time.
  void AnswerGet(GetWait& w);
  void OnRelease(SessionId s, const wire::ReleaseRequest& req);
  // store_puts.cc: a lease of host memory for puts in one message, and such a put (an error is
  // a ProtocolError: the session closes).
  void OnLease(SessionId s, uint64_t id, const wire::LeaseRequest& req);
  Status OnPut(SessionId s, const wire::PutRequest& req);
  // A put taken from `s`'s put ring: a copy of its body, checked like a message, then OnPut; when
  // `held`, the session gets a reference on the object (see SessionState::guid_holds).
  Status OnRingPut(SessionId s, std::span<const uint8_t> body, bool held);
  // The reclaim hook: a block of a deleted object goes back to its creator's lease when it was
  // cut from it, and the client hears of it through its put ring (see LeaseTable::TakeBack).
  bool ReturnToLease(const StoredObject& o, const Location& frame);
  // The revoke_leases hook, when memory is short: takes back every lease left idle for
  // options_.lease_idle whose client is not writing into it (PutRing::Revoke). Whether it took
  // any.
  bool RevokeIdleLeases();
  // Before a get, delete, contains or stat that names an object not in the table: reads and
  // handles what every other session holding a lease has sent already (its puts may have
  // returned before the daemon read them). Such a request read during that drain is put off
  // until the drain ends: returns true, and the caller does nothing more with it.
  bool DrainFirst(SessionId s, const proto::Header& h, std::span<const uint8_t> body);
  void OnDelete(SessionId s, uint64_t id, const wire::GuidsRequest& req);
  void OnContains(SessionId s, uint64_t id, const wire::GuidsRequest& req);
  // A client that reconnected names the objects it still maps: each sealed one is held for the
  // session (by GUID, as in guid_holds), so that it is not freed under the mapping.
  void OnHold(SessionId s, uint64_t id, const wire::GuidsRequest& req);
  // A process says it is done with a session of the last daemon (KeptMemory::Resumed).
  void OnResume(SessionId s, uint64_t id, const wire::ResumeRequest& req);
  void OnList(SessionId s, uint64_t id, const wire::ListRequest& req);
  void OnStat(SessionId s, uint64_t id, const wire::GuidRequest& req);
  void OnStatus(SessionId s, uint64_t id);
  void OnIndex(SessionId s, SessionState& st, uint64_t id, const wire::IndexRequest& req);
  void OnClients(SessionId s, uint64_t id);
  void OnMetrics(SessionId s, uint64_t id);
  StoreStatus Snapshot() const;
  // Up to `limit` objects after `after` (GUID order) that the connections of process `pid` in
  // `table`'s namespace hold or are creating.
  std::vector<const StoredObject*> HeldByProcess(const ObjectTable& table, int32_t pid,
                                                 std::optional<Guid> after, size_t limit) const;

  // Frees the deleted objects that only reference slots held and none holds now, and reads the
  // slots again while some still do: 5 ms later, then less and less often (to once a second)
  // while no object newly waits for slots, so that a slot held for ever costs almost nothing.
  void WatchPins();
  // Arms pins_timer_ to call WatchPins after pins_delay_, and doubles the delay for next time.
  void ArmPins();

  // Tells the sessions that have the segment to unmap it; whether any has it (then it is held).
  bool OnSegmentRetired(const Namespace& ns, uint32_t pool, uint32_t id);
  // Deletes the owner-scoped objects a previous daemon kept that process `pid` of user `uid`
  // made, unless a connection of that process is open (OwnerScopes); how many.
  size_t DropOrphans(int32_t pid, uint32_t uid);
  // The grace period after an adoption ended: the orphans of every process not connected go.
  void OnGraceEnd();

  boost::asio::io_context& io_;
  StoreOptions options_;
  AccessPolicy access_;
  DeviceSet devices_;
  NamespaceSet namespaces_;
  QuotaLedger quotas_;
  GetWaits waits_;
  SegmentTracker segments_;
  EventBus events_;
  OwnerScopes owner_scopes_;
  std::chrono::steady_clock::time_point started_;
  SessionId next_session_ = 1;
  std::unordered_map<SessionId, SessionState> sessions_;
  UserCap handshakes_;  // sessions not greeted yet, by user
  UserCap references_;  // objects held through the daemon, by user (ObjectTable::Join)
  uint64_t requests_ = 0;
  uint64_t connections_ = 0;
  std::array<uint64_t, 16> errors_{};  // by Status::Code
  StoreCounters counters_;
  boost::asio::steady_timer pins_timer_;  // armed while deleted objects wait for slots to let go
  bool pins_armed_ = false;
  static constexpr std::chrono::milliseconds kPinsFirst{5};
  static constexpr std::chrono::milliseconds kPinsLast{1000};
  std::chrono::milliseconds pins_delay_ = kPinsFirst;
  uint64_t pins_made_ = 0;                          // NamespaceSet::PinsMade at the last WatchPins
  std::chrono::steady_clock::time_point pins_due_;  // when the armed wait ends
  uint64_t pins_wait_ = 0;  // the armed wait's number: a wait cancelled by a re-arm does nothing
  LeaseTable leases_;
  PutRings rings_;
  uint64_t leases_revoked_ = 0;
  // A request put off by a drain (DrainFirst), with its own copy of the body.
  struct Deferred {
    SessionId session;
    proto::Header header;
    std::vector<uint8_t> body;
  };
  // The sessions DrainFirst reads before a miss, other than `s`: those that may have a put
  // unread (store_puts.cc).
  std::vector<SessionId> SentSinceDrain(SessionId s);
  // From `s`'s first lease on, a drain hears of the bytes its socket takes (drain_poll_).
  void WatchForDrain(SessionId s);
  UniqueFd drain_poll_;     // the sockets of sessions that took a lease, edge-triggered
  bool drain_all_ = false;  // no epoll set: every drain reads every lease holder, as it once did
  // Sessions to drain next time whatever drain_poll_ says (NoteUnhandled, or the session whose
  // request drained, whose edge that drain consumed).
  std::unordered_set<SessionId> drain_again_;
  bool drain_reading_ = false;    // DrainFirst is reading the sessions' sockets
  bool drain_replaying_ = false;  // ... and is answering what it put off: no second drain
  std::vector<Deferred> deferred_;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_STORE_H_
