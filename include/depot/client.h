// The depot client: put objects into the node's store and get them back, zero-copy, by GUID.
//
//   auto client = depot::Client::Connect();                  // $DEPOT_SOCKET, else the default
//   depot::Result<depot::Guid> id = client->Put(bytes);
//   depot::Result<depot::Object> obj = client->Get(*id, std::chrono::milliseconds(500));
//   std::span<const std::byte> view = obj->frame(0);         // no copy
//
// A Client is a cheap handle to one connection to depotd; copies share it. It is thread-safe:
// many threads may call it at once, and a get that waits does not hold up other threads'
// requests. Each shared-memory segment is mapped once per connection, and a get of an object the
// process already holds is answered locally, without a round trip. A Client does not cross a
// fork(): a child process connects its own.
//
// When depotd goes away (a crash, `systemctl restart`, an upgrade), the Client connects to the
// next one (ConnectOptions::reconnect_wait) and tells it which objects this process still holds,
// so that none is freed under its Objects, whose bytes stay as they were. A read cut off by the
// loss is sent again; so is a Put (exactly once: its GUID is chosen before it is sent, and the
// next daemon is asked whether it has it) and a Delete. A Draft made before the loss cannot be
// sealed after it (Disconnected): its bytes were not kept. docs/design.md, "Clients carry on".
#ifndef DEPOT_CLIENT_H_
#define DEPOT_CLIENT_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "depot/device_pool_info.h"
#include "depot/export.h"
#include "depot/guid.h"
#include "depot/object.h"
#include "depot/status.h"
#include "depot/store_status.h"

namespace depot {

// Get timeouts: 0 polls, -1 waits forever, anything else waits that long.
inline constexpr std::chrono::milliseconds kNoWait{0};
inline constexpr std::chrono::milliseconds kForever{-1};

struct ConnectOptions {
  std::string socket_path;  // empty: $DEPOT_SOCKET, else DefaultSocketPath()
  std::string client_name;  // shown in the daemon's log
  // A daemon's uid to trust besides this process's own, root's, and that of the owner of a socket
  // directory only root could have made (such as the service's /run/depot). Unset:
  // $DEPOT_DAEMON_UID when set. Connect refuses any other daemon, PermissionDenied: another user
  // could have placed it at the socket path.
  std::optional<uid_t> trusted_daemon_uid = std::nullopt;
  // How long a call that finds depotd gone (a crash, a restart, an upgrade) tries to connect to
  // the next one before it answers Disconnected. 0: never reconnect; every call after the loss
  // answers Disconnected. See Client.
  std::chrono::milliseconds reconnect_wait = std::chrono::seconds(10);
};

struct CreateOptions {
  std::span<const std::byte> metadata;  // opaque bytes kept with the object (<= 16 KiB)
  std::string name;                     // for people (<= 256 bytes)
  std::optional<Guid> guid;             // propose the GUID; AlreadyExists when taken
  bool evictable = false;               // may be dropped (LRU) when space is short
  // Record a checksum of the bytes at seal (XXH3-64, computed by this process), so that readers
  // can check them later: Object::Verify, `depotctl verify`. Host frames only.
  bool checksum = false;
  // Where each frame lives; empty: every frame on the host. Frames on GPUs are device memory of
  // the daemon's device pools (see Client::DevicePools), never copied through the host.
  std::vector<Place> places;
  // Delete the object when this connection closes (or its process exits), as a message between
  // two processes should not outlive its sender. Deleting it earlier is allowed. After a crash
  // of depotd it lives while this process has a connection to the next one (docs/design.md).
  bool owner_scoped = false;
};

struct FrameInfo {
  uint32_t pool = 0;  // 0: host; n: device pool n (DevicePoolInfo::pool)
  uint32_t segment = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};

// A connection holding an object: its process and how many gets of it are not yet released.
struct HolderInfo {
  uint64_t session_id = 0;
  int32_t pid = 0;
  uint32_t uid = 0;
  std::string process;  // its command name (/proc/PID/comm)
  std::string name;     // what it called itself (ConnectOptions::client_name)
  uint64_t references = 0;
};

struct ObjectInfo {
  enum class State { kCreating, kSealed, kDeleted };
  // "creating", "sealed" or "deleted", as depotctl and Python show it.
  static const char* StateName(State s) {
    switch (s) {
      case State::kCreating:
        return "creating";
      case State::kSealed:
        return "sealed";
      case State::kDeleted:
        return "deleted";
    }
    return "unknown";
  }
  // Where a sealed object's bytes are: in memory, or on the daemon's disk (spill_dir).
  enum class Residence { kMemory, kSpilling, kDisk, kRestoring, kLost };
  // "memory", "spilling" (in memory, being written out), "disk", "restoring" or "lost" (its
  // file could not be read back; gets answer DataLoss).
  static const char* ResidenceName(Residence r) {
    static constexpr const char* kNames[] = {"memory", "spilling", "disk", "restoring", "lost"};
    return kNames[static_cast<int>(r)];
  }
  Guid guid;
  std::string name;
  State state = State::kCreating;
  uint64_t size = 0;
  std::vector<FrameInfo> frames;
  uint32_t refcount = 0;  // connections holding it
  bool evictable = false;
  int64_t created_unix_ns = 0;
  int64_t sealed_unix_ns = 0;
  int32_t creator_pid = 0;
  uint32_t creator_uid = 0;
  uint32_t metadata_size = 0;
  std::vector<std::byte> metadata;   // Stat only
  std::optional<uint64_t> checksum;  // recorded at seal, when the creator asked for one
  // Stat only: the connections holding it, and the creating connection while it is connected
  // (creator_session 0 once it is gone).
  std::vector<HolderInfo> holders;
  uint64_t creator_session = 0;
  std::string creator_process;
  Residence residence = Residence::kMemory;
};

struct ListPage {
  std::vector<ObjectInfo> objects;
  bool more = false;  // pass objects.back().guid as `after` for the next page
};

// One connected client, as the daemon sees it.
struct ClientInfo {
  uint64_t session_id = 0;
  int32_t pid = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::string name;     // what it called itself (ConnectOptions::client_name)
  std::string process;  // its command name
  uint64_t references = 0;
  uint64_t bytes_held = 0;
  uint64_t creating = 0;
  uint64_t requests = 0;
  int64_t connected_unix_ns = 0;
  bool subscribed = false;
  uint64_t created_objects = 0;  // objects it created that are not freed yet
  uint64_t created_bytes = 0;
};

// Something that happened in the store, as a subscriber sees it.
struct DEPOT_API Event {
  enum class Kind {
    kCreated,
    kSealed,
    kAborted,
    kDeleted,
    kEvicted,
    kFreed,  // a deleted object's memory was given back when its last holder let go
    kClientConnected,
    kClientDisconnected,
    kSpilled,   // written to the daemon's disk, its memory freed
    kRestored,  // read back from disk into memory
  };
  Kind kind = Kind::kCreated;
  int64_t unix_ns = 0;
  Guid guid;  // object events
  std::string name;
  uint64_t size = 0;
  uint64_t session_id = 0;  // the connection that caused it (or connected, or left)
  int32_t pid = 0;
  uint32_t uid = 0;
  uint64_t dropped = 0;  // events lost before this one because the subscriber fell behind

  static std::string_view KindName(Kind k);  // "created", "client-connected", ...
};

// A stream of events on a connection of its own. Move-only; one thread at a time.
class DEPOT_API Subscription {
 public:
  // The next event, waiting up to `timeout` (kForever: no limit). Timeout when none came;
  // Disconnected when the daemon went away.
  Result<Event> Next(std::chrono::milliseconds timeout = kForever);

 private:
  friend class Client;
  explicit Subscription(std::shared_ptr<internal::Connection> conn) : conn_(std::move(conn)) {}
  std::shared_ptr<internal::Connection> conn_;
};

class DEPOT_API Client {
 public:
  // Connects, checks who answers (see ConnectOptions::trusted_daemon_uid) and says hello.
  // Unavailable when no daemon listens at the socket; PermissionDenied when the daemon that
  // answers is not one to trust (the message says why and how to trust it); ProtocolError when
  // the daemon speaks another protocol version (the message names both).
  static Result<Client> Connect(const ConnectOptions& options = {});

  // $XDG_RUNTIME_DIR/depot/depot.sock, else /run/user/$UID/depot/depot.sock when that runtime
  // directory exists, else /tmp/depot-$UID/depot.sock.
  static std::string DefaultSocketPath();

  // Copies `data` into a new sealed object of one frame and returns its GUID. Up to 4 MiB (host
  // frames, no proposed GUID) the bytes go into memory leased to the connection and the put into
  // its put ring, mostly with no message; otherwise small objects travel inside the request (one
  // round trip) and larger ones are written straight into shared memory. Either way a get that
  // starts after Put returned finds the object. StoreFull when it does not fit even after
  // evicting evictable objects.
  Result<Guid> Put(std::span<const std::byte> data, const CreateOptions& options = {});
  // The same, one frame per span.
  Result<Guid> Put(std::span<const std::span<const std::byte>> frames,
                   const CreateOptions& options = {});

  // Reserves an object of frames of the given sizes (1 to 64 frames) to be written in place.
  Result<Draft> Create(std::span<const uint64_t> sizes, const CreateOptions& options = {});
  Result<Draft> Create(std::initializer_list<uint64_t> sizes, const CreateOptions& options = {}) {
    return Create(std::span<const uint64_t>(sizes.begin(), sizes.size()), options);
  }

  // Gets a sealed object, waiting up to `timeout` for it to be created and sealed. NotFound when
  // it does not exist and timeout is 0; Timeout when the wait ends first.
  Result<Object> Get(const Guid& guid, std::chrono::milliseconds timeout = kNoWait);
  // Gets several objects in one round trip (longer lists than a request may name, 2,048 GUIDs, go
  // in batches, under one timeout); one result per GUID, in order. The call returns when all are
  // available or the timeout ends.
  std::vector<Result<Object>> Get(std::span<const Guid> guids,
                                  std::chrono::milliseconds timeout = kNoWait);

  // Removes the GUID at once; the memory is freed when the last process holding the object lets
  // it go. NotFound when absent; InvalidArgument for an object not yet sealed. Once deleted, Get
  // and Contains answer as the daemon does (not found), even while this process still holds the
  // object: the Objects it has keep their bytes.
  Status Delete(const Guid& guid);
  // Any number of GUIDs, in batches as Get does; one status per GUID, in order.
  std::vector<Status> Delete(std::span<const Guid> guids);

  // True when the object exists and is sealed.
  Result<bool> Contains(const Guid& guid);
  // One answer per GUID, in order, in batches as Get does.
  std::vector<Result<bool>> Contains(std::span<const Guid> guids);

  // What the daemon knows about one object, metadata included.
  Result<ObjectInfo> Stat(const Guid& guid);

  // One page of objects in GUID order, starting after `after`.
  Result<ListPage> List(std::optional<Guid> after = std::nullopt, uint32_t limit = 1000);

  // Like List, but only the objects that the connections of process `pid` hold or are creating
  // (in this user's namespace).
  Result<ListPage> ListHeldBy(int32_t pid, std::optional<Guid> after = std::nullopt,
                              uint32_t limit = 1000);

  Result<StoreStatus> GetStatus();

  // The daemon's metrics in the Prometheus text exposition format (docs/metrics.md).
  Result<std::string> Metrics();

  // How many objects this connection's gets took from the namespace's shared index since it
  // connected: gets answered with no message to the daemon (docs/design.md, "Gets without a round
  // trip"). Gets of objects this process already held are not counted. One relaxed counter.
  uint64_t index_gets() const;

  // Page-locks (cuMemHostRegister) every host segment this connection maps, now and later, so
  // that copies between host objects and a GPU run at pinned-memory speed. Costs time per
  // segment mapped (once each). Unavailable without a CUDA driver.
  Status PinHostMemory();

  // The daemon's device pools, as of connecting. Unavailable, with the daemon's reason ("cannot
  // load libcuda.so.1: ...", "built without CUDA support"), when it has none.
  Result<std::vector<DevicePoolInfo>> DevicePools() const;

  // One round trip that does nothing: the floor under every request.
  Status Ping();

  // Every connected client.
  Result<std::vector<ClientInfo>> Clients();

  // Opens a second connection that receives every event from now on.
  Result<Subscription> Subscribe();

  const std::string& socket_path() const;

 private:
  explicit Client(std::shared_ptr<internal::Link> link) : link_(std::move(link)) {}
  std::shared_ptr<internal::Link> link_;
};

}  // namespace depot

#endif  // DEPOT_CLIENT_H_
