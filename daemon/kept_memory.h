// KeptMemory keeps the memory of every namespace across a restart or a crash of depotd: each
// host segment and device chunk and each namespace's Catalog (the sealed objects in them) is
// handed to systemd's descriptor store (FdStore) as it is made, and taken out when it is given
// back. A new depotd is passed them again and, before it serves anyone, adopts them: every
// catalog entry is checked (its own hash, then its frames against the segments passed: pool,
// bounds, no overlap, GUID not taken) and becomes a sealed object again at the same bytes,
// published in the index; what does not check out is dropped and counted, never served. It takes
// no disk I/O and no copy. A device chunk is adopted from its exported descriptor alone, on the
// GPU of the same UUID (pool numbers follow the GPUs found, which may change); a chunk of a GPU
// the new daemon has no pool for is given back, and the objects in it are dropped.
//
// Clients of the last daemon may still map those segments, and one may still write where that
// daemon had a lease or a create under way, which no catalog records. So an adopted segment is
// closed: it takes no new block until `grace` has passed (OpenKept), and a closed segment whose
// objects are all gone is given back rather than reused. The pages of a held object never change
// under its holder; new objects go to new segments meanwhile.
//
// Each session's put ring is kept too: a put returns once its record is in the ring, and the
// next daemon takes what the last one had not (the records checked like messages, their frames
// against the ring's user's closed segments).
//
// Names in the store: "depot.seg.KEY.ID.OWNER.LARGE" for a host segment (namespace key, segment
// id, owner uid, 1 for a segment of large objects), "depot.dev.KEY.POOL.UUID.ID.OWNER.LARGE.SIZE"
// for a device chunk (its pool's number, its GPU's UUID, and its size, which a CUDA descriptor
// does not tell), "depot.ring.KEY.UID.SESSION" for a put ring, and
// "depot.catalog.KEY.GEN" for a catalog (a new daemon stores its own, GEN + 1, once it has adopted
// the last one, and then forgets that one: a crash in between leaves both, and the newer,
// complete one is read).
//
// Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_KEPT_MEMORY_H_
#define DEPOT_DAEMON_KEPT_MEMORY_H_

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/unique_fd.h"
#include "daemon/catalog.h"
#include "daemon/fd_store.h"
#include "daemon/namespace.h"
#include "daemon/session_census.h"
#include "depot/store_status.h"
#include "proto/object_rules.h"

namespace depot {

// A descriptor the service manager passed back from its store, by the name it was stored under.
struct KeptFd {
  std::string name;
  UniqueFd fd;
};

// A session's put ring the last daemon kept, and its user.
struct KeptRing {
  uint32_t uid = 0;
  int32_t pid = 0;  // its session's process; 0 when its name does not say (an older daemon's)
  KeptFd kept;
};

// What adoption found, for the log, status and metrics.
struct AdoptionReport {
  bool ran = false;         // descriptors were passed back
  uint64_t objects = 0;     // served again
  uint64_t bytes = 0;       // their sizes
  uint64_t dropped = 0;     // entries that did not check out (torn, bad frames, GUID taken)
  uint64_t segments = 0;    // segments adopted
  uint64_t released = 0;    // of those, given back at once: nothing kept lived there
  uint64_t refused = 0;     // catalogs refused whole (another version): their objects are lost
  double milliseconds = 0;  // from the first descriptor read to the last object published
};

class KeptMemory {
 public:
  // The namespace of key `key` (Namespace::kShared, or a uid), made if needed; null when it
  // cannot be (then what was kept for it is given back).
  using NamespaceFor = std::function<Namespace*(uint32_t key)>;
  // The number of the device pool on the GPU of UUID `uuid` in every namespace, if there is one.
  using PoolOfGpu = std::function<std::optional<uint32_t>(const std::string& uuid)>;

  KeptMemory(boost::asio::io_context& io, bool wanted, std::chrono::milliseconds grace);
  ~KeptMemory();
  KeptMemory(const KeptMemory&) = delete;
  KeptMemory& operator=(const KeptMemory&) = delete;

  bool on() const { return store_.on(); }

  // The keeper of pool `pool` of namespace `key` (0: the host's; n: device pool n, on the GPU of
  // UUID `uuid`), or null when off: it outlives the pool.
  SegmentKeeper* KeeperFor(uint32_t key, uint32_t pool = 0, const std::string& uuid = "");
  // A namespace was made (its table exists): from now on its sealed objects are recorded. Its
  // catalog is stored at once unless an adoption for it is under way.
  Status Attach(Namespace& ns);
  // Forgets a namespace that is dropped (its catalog leaves the store).
  void Detach(const Namespace& ns);
  // A table transition of `ns` (see ObjectTable::EventFn): records or erases the object.
  void Note(const Namespace& ns, TableEvent e, const StoredObject& o);
  // Session `session` of user `uid` (process `pid`) in namespace `key` was greeted, with put
  // ring `fd` (-1: none could be made). The ring is kept while the session lives (its name says
  // the process's pid: an owner-scoped put in it comes back as an orphan of that process), so
  // that the next daemon takes the puts this one had not taken when it was killed, and knows
  // which processes to wait for (SessionCensus). At most kRingsPerUser of one user's and kRings
  // in all are kept, so that no user's connections can take the room of the store that every
  // user's segments need (FdStore::kMaxStored); a session left without one is counted.
  void KeepRing(uint32_t key, uint32_t uid, int32_t pid, SessionId session, int fd);
  static constexpr size_t kRingsPerUser = 64;
  static constexpr size_t kRings = 1000;
  // The session closed, its ring taken to the end.
  void ForgetRing(SessionId session);

  // Reads the names of what a previous daemon kept, before this one makes any namespace (the
  // spill directory's, say): each catalog it then stores is named after the last daemon's, and
  // nothing passed is stored a second time.
  void Take(std::vector<KeptFd> kept);
  // Adopts what Take read (see the class comment), making namespaces through `ns`. Closed
  // segments open after the grace period, or once every session of the last daemon's has ended
  // with its process or resumed (SessionCensus). A put-ring record is held to `limits` by the
  // same check as a put of a live session (CheckPut).
  AdoptionReport Adopt(const NamespaceFor& ns, const PoolOfGpu& pool_of_gpu,
                       const proto::ObjectLimits& limits);
  const AdoptionReport& report() const { return report_; }
  // Whether the last daemon kept memory of namespace `key` that Take read and Adopt has yet to
  // adopt.
  bool Adopting(uint32_t key) const { return adopting_.contains(key); }
  // Called when the grace period after a start ends, once the closed segments are open.
  void set_on_grace_end(std::function<void()> fn) { on_grace_end_ = std::move(fn); }
  // Starts the grace period, unless an adoption started it: also when nothing was kept but
  // objects came back from spill_dir whose owner-scoped creators may still reconnect.
  void BeginGrace();

  // Process `pid` of `uid` is done with `session` of the last daemon (SessionCensus::Resumed):
  // whether the grace period waited for it.
  bool Resumed(uint64_t session, int32_t pid, uint32_t uid);
  // The greatest session id a kept ring names: this daemon numbers its own above it, so that no
  // session of its own is taken for one of the last daemon's.
  SessionId last_session() const { return last_session_; }

  // The daemon is stopping: the pools about to go leave their segments in the store for the next
  // daemon.
  void Stop() { stopping_ = true; }

  // Adds what it keeps and what the start adopted to a status.
  void Report(StoreStatus& st) const;

 private:
  class Keeper;
  struct Place {
    std::unique_ptr<Catalog> catalog;
    Namespace* ns = nullptr;
    uint64_t generation = 1;
    bool stored = false;  // the catalog is in the store
  };
  struct Taken;
  void StoreCatalog(uint32_t key, Place& place);
  // Namespace `key` is adopted (or refused): its catalog is stored, then `last` forgotten.
  void Adopted(uint32_t key, const std::optional<KeptFd>& last);
  // The puts of a ring of the last daemon that it had not taken, as objects of `ns`: each
  // record that a live put would have refused is dropped, and the rest are adopted.
  void AdoptRing(Namespace& ns, KeptRing& ring, const proto::ObjectLimits& limits);
  // Makes `n` an object of `ns` at the memory the last daemon left (its frames in closed
  // segments of `n.creator_uid`; a device frame's pool, the last daemon's number, renumbered
  // through `pools`); when the spill directory has brought the same object back (it was read
  // back before the crash and kept its file), restores it at those frames instead. False,
  // taking nothing, when they do not check out.
  bool AdoptObject(Namespace& ns, NewObject n, const SpilledFacts& facts,
                   const std::map<uint32_t, uint32_t>& pools = {});
  void OpenAll(const std::string& why);
  // Writes the census word: the sessions without a kept ring, and one more while this daemon's
  // own grace period runs (who maps the memory it adopted is known to it alone).
  void CountUnkept();
  // Ends the grace period now, for `why`: closed segments open, on_grace_end_ is called.
  void EndGrace(const std::string& why);

  boost::asio::io_context& io_;
  FdStore store_;
  std::chrono::milliseconds grace_;
  boost::asio::steady_timer grace_timer_;
  bool grace_begun_ = false;
  bool grace_ended_ = false;
  std::function<void()> on_grace_end_;
  bool stopping_ = false;
  std::map<uint32_t, Place> places_;
  std::map<std::pair<uint32_t, uint32_t>, std::unique_ptr<Keeper>> keepers_;  // by key, pool
  std::unique_ptr<Taken> taken_;           // between Take and Adopt
  std::map<uint32_t, uint64_t> adopting_;  // key -> generation of the catalog being adopted
  struct RingName {
    std::string name;
    uint32_t uid;
  };
  std::map<SessionId, RingName> rings_;  // the name each session's ring is kept under
  std::map<uint32_t, size_t> rings_of_;  // kept rings by user
  std::set<SessionId> unkept_;           // greeted sessions whose ring is not kept (the census)
  SessionId last_session_ = 0;           // the greatest a kept ring names
  SessionCensus census_;                 // after grace_timer_: its watches end first
  AdoptionReport report_;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_KEPT_MEMORY_H_
