// internal::Connection is one client's socket to depotd and everything tied to it: request ids,
// replies that arrive out of order, the segments it has mapped, and the objects it holds.
//
// Threads share it. Replies are read by whichever waiting thread holds the reader role (leader
// and followers): a single-threaded caller reads its own reply with no thread hand-off, and a
// thread parked in a long get hands the role on so others' replies still flow.
#ifndef DEPOT_CLIENT_SRC_CONNECTION_H_
#define DEPOT_CLIENT_SRC_CONNECTION_H_

#include <atomic>
#include <chrono>
#include <optional>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "depot/client.h"
#include "depot/object.h"
#include "depot/status.h"
#include "proto/fd_passing.h"
#include "proto/wire.h"

namespace depot::internal {

// One received reply. Fds of dedicated segments named in it ride along (shared segments' fds are
// installed by the reader, in order, since later replies may name them without an fd).
struct Message {
  proto::Header header{};
  std::vector<uint8_t> body;
  struct SegmentFd {
    uint32_t pool;
    uint32_t id;
    uint64_t size;
    UniqueFd fd;
  };
  std::vector<SegmentFd> dedicated;
  uint16_t type() const { return header.type; }
};

// What an Object points at: one reference on the daemon, released when the last Object goes.
struct Holding {
  std::shared_ptr<Connection> conn;
  Guid guid;
  uint64_t handle = 0;
  std::vector<std::span<const std::byte>> frames;
  std::vector<std::byte> metadata;
  std::optional<uint64_t> checksum;
  std::vector<Place> places;  // empty: every frame on the host
  std::vector<uint64_t> segment_uses;
  uint64_t size = 0;
  ~Holding();
};

// The device pools a hello or status reply lists.
std::vector<DevicePoolInfo> DevicePoolsFromWire(
    const flatbuffers::Vector<flatbuffers::Offset<wire::DevicePoolInfo>>* pools);

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  static Result<std::shared_ptr<Connection>> Open(const std::string& path, const std::string& name);
  ~Connection();

  // Sends a request and waits for its reply. An ErrorReply becomes its Status; a broken
  // connection is Disconnected.
  Result<Message> Call(proto::MsgType type, flatbuffers::FlatBufferBuilder& fbb);

  // Resolves frame locations of a reply to pointers in this process, mapping segments as
  // needed (read-write for `writable`). Records one segment use per frame in `uses`; the caller
  // gives them back with DropUses. For writable frames, `unpopulated` receives the address
  // ranges whose page tables this process has not filled yet (see PopulateForWrite).
  Result<std::vector<std::span<std::byte>>> MapFrames(
      const flatbuffers::Vector<const wire::FrameLocation*>* frames, bool writable, Message& reply,
      std::vector<uint64_t>& uses, std::vector<std::span<std::byte>>* unpopulated = nullptr);
  void DropUses(const std::vector<uint64_t>& uses);

  // The daemon's device pools (from hello); Unavailable with the daemon's reason when none.
  Result<std::vector<DevicePoolInfo>> DevicePools() const;
  // The pool number of a place: 0 for the host. Unavailable or InvalidArgument when there is no
  // pool on that GPU.
  Result<uint32_t> PoolOf(const Place& place) const;
  // Where a frame of pool `pool` lives.
  Place PlaceOf(uint32_t pool) const;
  // Where each of `frames` lives; empty when every frame is on the host.
  std::vector<Place> Places(const flatbuffers::Vector<const wire::FrameLocation*>* frames) const;
  // Copies host bytes into a frame of this process's draft at `place`.
  Status CopyIn(std::span<std::byte> dst, std::span<const std::byte> src, const Place& place) const;
  // See Client::PinHostMemory.
  Status PinHostMemory();
  // Waits for `cuda_stream` when any of `places` is on a CUDA GPU (see Draft::Seal).
  Status SyncDevices(const std::vector<Place>& places, void* cuda_stream) const;

  // The local object cache: an Object this process already holds, if any.
  std::optional<Object> Cached(const Guid& guid);
  // Builds an Object for `guid` from its get result and remembers it.
  Result<Object> Adopt(const Guid& guid, const wire::GetResult& result, Message& reply);
  // A Holding's last Object is gone: forget it and release its reference on the daemon.
  void Forget(Holding& h);

  // Builds a Draft from a create reply.
  Result<Draft> MakeDraft(const wire::CreateReply& reply, Message& msg);

  // The next event pushed by the daemon (after a subscribe), waiting up to `timeout` (negative:
  // no limit). Timeout when none came.
  Result<Message> NextEvent(std::chrono::milliseconds timeout);

  const std::string& path() const { return path_; }

 private:
  struct Slot {
    bool done = false;
    Status status;
    Message message;
  };
  struct Segment {
    UniqueFd fd;
    uint64_t size = 0;
    bool dedicated = false;
    bool retired = false;
    void* ro = nullptr;
    void* rw = nullptr;
    uint32_t uses = 0;
    // Granules of the read-write mapping whose page tables are filled. Filling them once per
    // process in one call is cheaper than a fault per page, and filling them again is not free.
    std::vector<bool> rw_populated;
    uint32_t pool = 0;       // 0: host; otherwise a device chunk
    bool cuda = false;       // imported with CUDA VMM: ro and rw are device addresses
    bool pinned = false;     // ro (or else rw) is registered with CUDA
  };
  struct CacheEntry {
    std::weak_ptr<Holding> holding;
    const Holding* raw;
  };

  Connection(UniqueFd fd, std::string path);
  // Writes a whole message. `peer_closed` says whether it failed because the daemon hung up.
  Status Send(const std::vector<uint8_t>& bytes, bool* peer_closed = nullptr);
  Status Wait(uint64_t id, Slot& slot);
  // Reads until at least one message has been dispatched. Called by the reader only. With a
  // deadline, Timeout when nothing arrives before it.
  Status ReadSome(std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt);
  Status Dispatch(const proto::Header& h, std::span<const uint8_t> body);
  void Unmap(Segment& s);
  // Registers a host mapping with CUDA when pin_host_ is set; seg_mu_ held.
  Status Pin(Segment& s, void* base);
  // Maps segment `s` (read-write or read-only) into this process: mmap, or for a CUDA chunk
  // import, reserve, map and set access on the matching local GPU.
  Status Map(Segment& s, bool writable, void** base);
  // The local CUDA ordinal of pool `pool`'s GPU (matched by UUID).
  Result<int> LocalDevice(uint32_t pool) const;
  void Fail(const Status& st);  // with mu_ held

  // A dropped Object's release waits here a moment so that it rides with the next request (one
  // write, one wake of the daemon). The flusher thread sends what still waits after
  // kReleaseDelay; many waiting releases are sent at once.
  void QueueRelease(uint64_t handle);
  std::vector<uint8_t> TakeReleases();  // the encoded release message, or nothing; release_mu_ held
  void FlushReleases();                 // the flusher thread

  UniqueFd fd_;
  std::string path_;
  bool hugepages_ = false;  // the daemon asks for huge pages on segment mappings
  bool pin_host_ = false;  // register host mappings with CUDA (PinHostMemory)
  std::vector<DevicePoolInfo> device_pools_;
  std::string devices_unavailable_;
  std::atomic<uint64_t> next_id_{1};

  std::mutex send_mu_;

  std::mutex mu_;  // guards everything below but the reader state
  std::condition_variable cv_;
  bool reading_ = false;
  Status broken_;
  std::unordered_map<uint64_t, Slot*> pending_;
  std::deque<Message> events_;

  // Reader state: touched only by the thread holding the reader role.
  std::vector<uint8_t> in_;
  size_t in_begin_ = 0;
  size_t in_end_ = 0;
  std::deque<UniqueFd> fds_;

  std::mutex seg_mu_;
  std::unordered_map<uint64_t, Segment> segments_;  // by SegmentKey(pool, id)

  std::mutex cache_mu_;
  std::unordered_map<Guid, CacheEntry> cache_;

  std::mutex release_mu_;
  std::condition_variable release_cv_;
  std::vector<uint64_t> releases_;
  std::chrono::steady_clock::time_point oldest_release_;
  bool stopping_ = false;
  bool flusher_idle_ = false;  // waiting for a release, with no deadline
  std::thread flusher_;        // started with the first release
};

}  // namespace depot::internal

#endif  // DEPOT_CLIENT_SRC_CONNECTION_H_
