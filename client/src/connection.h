// internal::Connection is one client's connection to depotd: the parts that make it up, each in
// the file named after it, and what ties them together (turning get and create replies into
// Objects and Drafts, and handing references back):
//   Channel         the socket: requests and replies, pushed events, fds received
//   SegmentMap      the segments this process has mapped (MmapMapper, CudaMapper)
//   ObjectCache     the objects this process holds, by GUID
//   ReleaseBatcher  releases of dropped Objects, sent with the next request or soon after
//   Lease           host memory leased for puts in one message
//   Pools           the daemon's pools, from hello
//   IndexReader     the daemon's shared index of the namespace, when it sent one at hello
//   SlotTable       this connection's reference slots, sent with the index
//
// Threads share it; each part keeps its own thread contract.
#ifndef DEPOT_CLIENT_SRC_CONNECTION_H_
#define DEPOT_CLIENT_SRC_CONNECTION_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "client/src/channel.h"
#include "client/src/cuda_mapper.h"
#include "client/src/index_reader.h"
#include "client/src/lease.h"
#include "client/src/object_cache.h"
#include "client/src/pools.h"
#include "client/src/release_batcher.h"
#include "client/src/segment_map.h"
#include "client/src/slot_table.h"
#include "depot/client.h"
#include "depot/object.h"
#include "depot/status.h"
#include "proto/object_rules.h"

namespace depot::internal {

class Link;

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // Connects to `path`, checks who answers (CheckDaemon, trusting also `trusted_daemon_uid`) and
  // says hello as `name`.
  static Result<std::shared_ptr<Connection>> Open(const std::string& path, const std::string& name,
                                                  std::optional<uid_t> trusted_daemon_uid);

  // Sends a request, with the releases that wait, and waits for its reply (Channel::Call).
  Result<Message> Call(proto::MsgType type, flatbuffers::FlatBufferBuilder& fbb) {
    if (forked()) return channel_.ForkedError();  // before the batcher's lock, maybe held
    return channel_.Call(type, fbb, releases_.Take());
  }

  // Whether this process is a child forked since the connection was made: then nothing of it is
  // used (Channel), and what it holds is left as it is, the parent's.
  bool forked() const { return channel_.forked(); }

  // A create request. When it finds the store full while this process was unmapping segments
  // the daemon had retired (their bytes count until the daemon hears it), it is sent once more.
  Result<Message> CallCreate(flatbuffers::FlatBufferBuilder& fbb) {
    uint64_t drops = segments_.retired_drops();
    auto reply = Call(proto::MsgType::kCreate, fbb);
    if (reply.ok() || !reply.status().IsStoreFull() || segments_.retired_drops() == drops) {
      return reply;
    }
    return Call(proto::MsgType::kCreate, fbb);
  }

  // The limits on an object's shape the daemon enforces (from hello): every put and create is
  // checked against them before anything is written or sent.
  const proto::ObjectLimits& object_limits() const { return object_limits_; }

  // A put with one message into this connection's lease, as `guid` (chosen by this process, not
  // proposed by the caller); nullopt when it must take the create path (see Lease).
  std::optional<Result<Guid>> PutInLease(std::span<const std::span<const std::byte>> frames,
                                         const CreateOptions& options, const Guid& guid) {
    if (forked()) return channel_.ForkedError();  // the put ring is the parent's
    return lease_.Put(frames, options, guid);
  }

  // Gives back segment uses that MapFrames recorded, and tells the daemon of the retired
  // segments that this unmapped.
  void DropUses(std::span<const uint64_t> uses) {
    if (forked()) return;  // the parent's, as in Forget
    // A send that fails finds the connection gone, and every hold with it.
    if (auto dropped = segments_.DropUses(uses); !dropped.empty()) (void)channel_.Send(dropped);
  }
  // Every result of `reply` is handled: closes its dedicated segments that nothing uses.
  void DropIdle(const Message& reply) { segments_.DropIdle(reply.dedicated); }

  // The daemon's device pools (from hello); Unavailable with the daemon's reason when none.
  Result<std::vector<DevicePoolInfo>> DevicePools() const { return pools_.Devices(); }
  // The pool number of a place: 0 for the host. Unavailable or InvalidArgument when there is no
  // pool on that GPU.
  Result<uint32_t> PoolOf(const Place& place) const { return pools_.PoolOf(place); }
  // This session's id (from hello), and whether its daemon understands a resume.
  uint64_t session_id() const { return session_id_; }
  bool resumes() const { return resumes_; }
  // The daemon's pid, as its hello gave it (in its own pid namespace).
  pid_t daemon_pid() const { return daemon_pid_; }
  // Tells the daemon that this process is done with `session`, one of the daemon before's
  // (docs/design.md, "The grace period ends when no one is left"). An error when it was not one
  // the daemon waits for.
  Status Resume(uint64_t session);
  // The daemon went away and a reconnect is about to name what this process maps (Link::Carry):
  // from now on a get through this connection gives no Object (its holding might not be named)
  // and a create no Draft; each answers as if the daemon had gone before it.
  void Leave() { leaving_.store(true, std::memory_order_seq_cst); }
  // The drafts made through this connection and not sealed or aborted yet: until none is left,
  // this process may still write where the daemon put them.
  uint64_t open_drafts() const { return drafts_.load(std::memory_order_seq_cst); }
  // A Draft of this connection was sealed or aborted; the last one of a superseded connection
  // tells its Link, whose resume may have waited for it.
  void DraftEnded();

  // Copies host bytes into a frame of this process's draft at `place`.
  Status CopyIn(std::span<std::byte> dst, std::span<const std::byte> src, const Place& place);
  // See Client::PinHostMemory.
  Status PinHostMemory() { return segments_.PinHostMemory(); }
  // Waits for `cuda_stream` when any of `places` is on a CUDA GPU (see Draft::Seal).
  Status SyncDevices(const std::vector<Place>& places, void* cuda_stream);

  // An Object this process already holds, if any.
  std::optional<Object> Cached(const Guid& guid);
  // An Object for `guid` taken from the shared index and held by a reference slot, without a
  // round trip; nullopt when the index does not have it, no slot is free, it changed meanwhile,
  // or a segment it lies in is not mapped yet (the caller then asks the daemon).
  std::optional<Object> FromIndex(const Guid& guid);
  // A multi-GUID get's look in this process, without a round trip: each of `guids` it holds
  // already or takes from the shared index (as FromIndex) is written at its position in `out`
  // (as long as `guids`); the positions of the others, for the daemon to answer, are appended to
  // `missed`. One pass: each lock is taken once for the batch, the slots are claimed together and
  // published behind one fence, and no allocation is made per object beyond its Holding.
  void GetLocal(std::span<const Guid> guids, std::span<Result<Object>> out,
                std::vector<size_t>& missed);
  // FromIndex for an object this connection put in one message moments ago, whose message the
  // daemon may still be reading: looks again, yielding the CPU between looks (the daemon may
  // share it), for at most kOwnPutWait. nullopt when `guid` is not such a put or did not appear.
  std::optional<Object> FromIndexAfterOwnPut(const Guid& guid);
  // An Object for `guid` when it is one of this connection's puts still in its put ring, not
  // taken by the daemon yet: made from the put itself and held by it (Lease::HoldOwn), without
  // a round trip. nullopt otherwise.
  std::optional<Object> FromOwnPut(const Guid& guid);
  static constexpr std::chrono::microseconds kOwnPutWait{100};
  // How many objects FromIndex has given (Client::index_gets).
  uint64_t index_gets() const { return index_gets_.load(std::memory_order_relaxed); }
  // Whether the shared index has `guid` now (a miss proves nothing).
  bool Indexed(const Guid& guid) const {
    const IndexReader* index = index_.load(std::memory_order_acquire);
    return index != nullptr && index->Find(guid).has_value();
  }
  // ProtocolError, and the connection broken, unless `reply` answers a get of `asked`: one
  // result per GUID, in order, each naming its GUID.
  Status CheckGetReply(std::span<const Guid> asked, const wire::GetReply& reply);
  // Builds an Object for `guid` from its get result and remembers it.
  Result<Object> Adopt(const Guid& guid, const wire::GetResult& result, Message& reply);
  // A Holding's last Object is gone: forget it and release its reference on the daemon.
  void Forget(Holding& h);
  // This process deleted `guid`: it is no longer answered from the cache.
  void Deleted(const Guid& guid) { cache_.Deleted(guid); }

  // Builds a Draft from a create reply for frames of `sizes` in `pools` (empty: all on the host),
  // and aborts the object when its frames cannot be mapped. A reply whose frames are not those
  // asked for is ProtocolError, and the connection is broken.
  // `checksum`: the draft records one at seal.
  Result<Draft> MakeDraft(const wire::CreateReply& reply, Message& msg,
                          std::span<const uint64_t> sizes, std::span<const uint32_t> pools,
                          bool checksum);

  // The next event pushed by the daemon (see Channel::NextEvent).
  Result<Message> NextEvent(std::chrono::milliseconds timeout) {
    return channel_.NextEvent(timeout);
  }

  // What this process holds through this connection (each kept alive by the result), and
  // whether it holds anything: after depotd went away, for the reconnect to name (Link).
  std::vector<std::shared_ptr<Holding>> Holdings() { return cache_.All(); }
  bool Holds() { return !cache_.empty(); }
  // Releases a hold (a reference the daemon took by GUID at a hold request) soon.
  void ReleaseHold(const Guid& guid) { releases_.QueueGuid(guid); }
  // `next` replaced this connection, whose daemon went away (Link::Carry). From now on a
  // Holding of this one that goes tells `link` (Link::DropCarried) and sends nothing here, and
  // each segment is unmapped with its last use. `next` lives at least as long as this.
  void Supersede(std::weak_ptr<Link> link, std::shared_ptr<Connection> next);
  // Called once, at the first Object this connection holds (Link starts its watcher then: a
  // process that holds nothing needs none). Set before the connection is shared.
  void set_on_first_hold(std::function<void()> f) { on_first_hold_ = std::move(f); }
  // The socket, for Link's watcher to poll for the daemon's hang-up; and what it does then: no
  // put is written into the lease any more (Lease::Close).
  int socket_fd() const { return channel_.fd(); }
  void HungUp() { lease_.Close(); }

  const std::string& path() const { return channel_.path(); }
  // The daemon uid this connection was told to trust, for another connection to the same daemon.
  std::optional<uid_t> trusted_daemon_uid() const { return trusted_daemon_uid_; }

 private:
  // After a holding was remembered: on_first_hold_, the first time.
  // Whether Leave was called; after a holding was remembered, with the cache's lock between.
  bool Left() const { return leaving_.load(std::memory_order_acquire); }
  void NoteHeld() {
    if (!held_once_.load(std::memory_order_relaxed) && !held_once_.exchange(true) &&
        on_first_hold_) {
      on_first_hold_();
    }
  }

  // FromIndex and FromOwnPut, once `h` holds the object: maps its frames and remembers it.
  // nullopt when a segment it lies in is not mapped (h's destruction lets the hold go).
  std::optional<Object> Held(const Guid& guid, std::shared_ptr<Holding> h,
                             std::span<const wire::FrameLocation> frames,
                             std::vector<std::byte> metadata);

  // GetLocal's pass over the shared index for the positions `look` of `guids`; appends those it
  // cannot answer to `missed`. Whether `index` was retired and a position missed (the caller
  // may refresh and look again).
  bool FromIndexMany(const IndexReader& index, std::span<const Guid> guids,
                     std::span<const size_t> look, std::span<Result<Object>> out,
                     std::vector<size_t>& missed);

  Connection(UniqueFd fd, std::string path);
  // Asks the daemon for more reference slots (`more_slots`) or for the index that replaced a
  // retired one, unless another thread did meanwhile; whether the caller may look again.
  bool Refresh(bool more_slots);

  // In this order: each part uses only those above it, except that the channel hands segments to
  // the map below it (a reference, first used once the connection is built). Destruction runs
  // upwards: the flusher stops before anything it uses goes, and the segments are unmapped
  // before the socket closes.
  Pools pools_;
  proto::ObjectLimits object_limits_;
  CudaMapper cuda_{pools_};
  Channel channel_;
  SegmentMap segments_{pools_, cuda_};
  ReleaseBatcher releases_{channel_};
  Lease lease_{channel_, segments_, releases_};
  ObjectCache cache_;
  // The index now. Every index this connection mapped stays mapped until it closes (another
  // thread may be reading one that was replaced; the daemon gave a retired one's memory back):
  // a few, as each is twice as big as the one before.
  std::atomic<const IndexReader*> index_{nullptr};
  std::optional<SlotTable> slots_;
  std::mutex refresh_mu_;  // guards what follows, and Refresh's requests
  std::vector<std::unique_ptr<IndexReader>> indexes_;
  uint64_t index_generation_ = 0;
  std::chrono::steady_clock::time_point slots_refused_{};  // the last ask for slots refused
  std::atomic<uint64_t> index_gets_{0};
  std::optional<uid_t> trusted_daemon_uid_;
  // Set by Supersede: superseded_ last, with release order.
  std::weak_ptr<Link> link_;
  std::shared_ptr<Connection> successor_;
  std::atomic<bool> superseded_{false};
  std::atomic<bool> leaving_{false};
  std::atomic<uint64_t> drafts_{0};  // open ones
  uint64_t session_id_ = 0;
  bool resumes_ = false;
  pid_t daemon_pid_ = 0;
  std::function<void()> on_first_hold_;
  std::atomic<bool> held_once_{false};
};

}  // namespace depot::internal

#endif  // DEPOT_CLIENT_SRC_CONNECTION_H_
