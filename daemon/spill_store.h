// SpillStore is the daemon's disk: with `spill_dir` set, host memory is a cache in front of it.
// It writes sealed, unreferenced, non-evictable objects out when a namespace runs short
// (MakeRoom) or nears full (SpillAhead), restores them on a get (Acquire), removes their files
// when they go (Forget), writes every object out at a clean stop (PersistAll) and adopts what a
// previous daemon left (Attach). A file outlives the restore of its object, as a clean copy:
// the object's next spill, and a crash, then cost nothing. Each namespace has a directory of its
// own under spill_dir
// (`shared`, or `uid-<N>`), so users never see each other's spilled objects.
//
// The disk is touched only by a small pool of I/O threads; everything else, this object
// included, belongs to the daemon's loop, and each job's result is posted back to it. A job
// keeps the memory it reads or fills allocated until it ends, even when its object goes
// meanwhile, so no I/O thread touches memory handed to someone else.
#ifndef DEPOT_DAEMON_SPILL_STORE_H_
#define DEPOT_DAEMON_SPILL_STORE_H_

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/unique_fd.h"
#include "daemon/drop_waits.h"
#include "daemon/namespace.h"
#include "daemon/parked_creates.h"
#include "daemon/spill_file.h"
#include "daemon/spill_manifest.h"
#include "daemon/spill_recovery.h"
#include "daemon/spill_removals.h"
#include "depot/store_status.h"

namespace depot {

struct SpillOptions {
  std::string dir;       // empty: no spilling
  std::string capacity;  // bytes of files at most, or a % of the file system's size
  // Creates waiting for room: per connection (max_pending), their copied requests' bytes per
  // connection (max_pending_bytes) and per user (max_parked_bytes_per_user).
  uint32_t max_parked = 1024;
  uint64_t max_parked_bytes = uint64_t{64} << 20;
  uint64_t max_parked_bytes_per_user = uint64_t{256} << 20;
};

class SpillStore {
 public:
  struct Hooks {
    // A restore of `guid` ended: OK when it is in memory again.
    std::function<void(Namespace&, const Guid&, const Status&)> restored;
    // Memory for a restore, as NamespaceSet::Allocate finds it (spares, eviction).
    std::function<Result<std::vector<Location>>(Namespace&, std::span<const uint64_t>, uid_t)>
        allocate;
    // A job in `ns` ended: the namespace may be left with nothing.
    std::function<void(Namespace*)> idle;
    // Bytes of retired host segments that clients still map, over every namespace: they come
    // back as the clients unmap them (DropWaits).
    std::function<uint64_t()> held_by_clients;
  };

  SpillStore(boost::asio::io_context& io, SpillOptions options, Hooks hooks);
  ~SpillStore();  // waits for the I/O threads
  SpillStore(const SpillStore&) = delete;
  SpillStore& operator=(const SpillStore&) = delete;

  bool enabled() const { return !options_.dir.empty(); }
  const std::string& dir() const { return options_.dir; }

  // Checks the directory (made 0700 when missing; it must be the daemon's user's and closed to
  // everyone else) and sizes the capacity. Returns the namespace keys that have objects on disk
  // (Namespace::kShared for the shared one). PermissionDenied or Unavailable, saying what to do.
  Result<std::vector<uint32_t>> Open();

  // A namespace was made: opens its directory and adopts the objects a previous daemon left
  // there into its table (on disk, restored at their first get). `memory_kept`: the previous
  // daemon's memory came back too (KeptMemory).
  Status Attach(Namespace& ns, bool memory_kept);
  // The namespace goes (it has no objects left).
  void Detach(const Namespace& ns) {
    places_.erase(&ns);
    drop_waits_.Forget(&ns);
  }
  // True while a job of `ns` runs, or a restore or create in it waits for memory (DropWaits).
  bool Busy(const Namespace& ns) const;

  // Starts writing out `ns`'s least recently used spill candidates, `bytes` worth, and calls
  // `then` on the loop once they are done (or once a spill already running ends). StoreFull
  // saying why when nothing can be spilled: no candidate, spill_capacity reached, the disk full.
  Status MakeRoom(Namespace& ns, uint64_t bytes, std::function<void()> then);
  // Room for a create that the host pool could not hold (`full` is the pool's answer): MakeRoom
  // for its bytes when every frame is on the host (device frames are not spilled). OK when the
  // create is to be asked again (`then`); else StoreFull naming the host pool and the spill
  // directory, or `full` itself when spilling cannot help.
  // `then` holds a copy of the request (`request_bytes`) of a connection (`session`) of `uid`:
  // past the limits of ParkedCreates, QuotaExceeded naming the limit.
  Status MakeRoomFor(Namespace& ns, SessionId session, uid_t uid, uint64_t request_bytes,
                     std::span<const uint64_t> sizes, std::span<const uint32_t> pools,
                     const Status& full, std::function<void()> then);
  // Spills ahead of need when the host pool is over 90% used, down to 80%.
  void SpillAhead(Namespace& ns, uint64_t used, uint64_t capacity);

  // ObjectTable::Acquire, which also starts the restore of an object on disk (once).
  Result<const StoredObject*> Acquire(Namespace& ns, SessionId session, const Guid& guid);

  // Whether a get told `st` (by Acquire) about one of its objects waits for it: for a restore
  // under way, always (a restore ends, and the object exists: even a get that polls waits for the
  // disk); for an object missing or not sealed yet, only when the get has a timeout.
  static bool Waits(const Status& st, int64_t timeout_ms) {
    return st.IsUnavailable() || (timeout_ms != 0 && (st.IsNotFound() || st.IsTimeout()));
  }

  // `o` is being destroyed: its file goes, and the memory a job holds for it goes when the job
  // ends (the table frees the memory of an object plainly in memory itself).
  void Forget(Namespace& ns, const StoredObject& o);

  // At a clean stop, with the loop stopped and every session closed: writes every sealed object
  // still in memory, waits for every job, and writes the manifest.
  void PersistAll(std::span<Namespace* const> namespaces);

  void Report(StoreStatus& status) const;
  const ParkedCreates& parked() const { return parked_; }

  // The number of sealed objects changed: the census is rewritten within a second.
  void NoteChange();
  // A retired segment was let go by the last client that mapped it: restores and creates
  // waiting for memory try again.
  void SegmentDropped() { drop_waits_.Dropped(); }
  // A create of `request_bytes` (its copied request) from `session` of `uid` found the pool full
  // while clients still map retired segments: parks it (counted as ParkedCreates counts those
  // that wait for the disk) until a segment is let go or DropWaits::kWait has passed, then calls
  // `then`. False, with nothing parked, when no retired segment is held (waiting would not help)
  // or the session or user has parked all it may.
  bool WaitForDrop(Namespace& ns, SessionId session, uid_t uid, uint64_t request_bytes,
                   std::function<void()> then) {
    if (hooks_.held_by_clients() == 0 || !parked_.Admit(session, uid, request_bytes).ok()) {
      return false;
    }
    drop_waits_.Add(&ns, [this, session, uid, request_bytes, then = std::move(then)](bool) {
      parked_.Release(session, uid, request_bytes);
      then();
    });
    return true;
  }

 private:
  struct Job;
  struct Waiter {
    size_t remaining = 0;
    std::function<void()> then;
  };
  // One namespace's directory and the files in it, by object.
  struct Place {
    UniqueFd dir;
    std::shared_ptr<const UniqueFd> removals_dir;  // its own copy of `dir`, for removals
    std::string path;
    SpillRecords files;
  };

  Place* PlaceOf(const Namespace& ns);
  // Starts writing `o` out; false when spill_capacity leaves no room for it.
  bool StartSpill(Namespace& ns, const StoredObject& o, bool over_capacity);
  void EndSpill(const std::shared_ptr<Job>& job);
  // Starts reading `o` back. Without memory for it, makes room; with none to be made while
  // clients still map retired segments, waits for them (`may_wait`: once more since the last
  // segment they let go); else fails the restore.
  void StartRestore(Namespace& ns, const StoredObject& o, bool may_wait = true);
  void EndRestore(const std::shared_ptr<Job>& job);
  // Runs `job` on an I/O thread, then `end` on the loop.
  void Run(std::shared_ptr<Job> job, void (SpillStore::*end)(const std::shared_ptr<Job>&));
  // Makes room for `need` more bytes of files within spill_capacity by removing clean copies
  // (files of objects read back into memory since); true when they fit.
  bool ReclaimCleanCopies(uint64_t need);
  void Unlink(Place& place, ObjectId id);
  void Finish(const std::shared_ptr<Job>& job);
  std::string Describe() const;  // "the spill directory X (Y of Z used)"

  boost::asio::io_context& io_;
  SpillOptions options_;
  Hooks hooks_;
  boost::asio::thread_pool threads_;
  SpillRemovals removals_{io_, threads_};
  UniqueFd dir_;
  uint64_t capacity_ = 0;
  uint64_t on_disk_ = 0;    // bytes of complete files
  uint64_t in_flight_ = 0;  // bytes of files being written
  uint64_t sequence_ = 0;   // file names: <guid>.<sequence>.obj
  std::string disk_full_;   // why the last spill failed for want of space, until space is freed
  std::chrono::steady_clock::time_point disk_full_at_;
  std::optional<SpillManifest> expected_;  // what the last clean stop wrote, if it was clean
  std::optional<SpillManifest> census_;    // what the last daemon counted, for a crash
  boost::asio::steady_timer census_timer_;
  bool census_due_ = false;
  std::map<const Namespace*, Place> places_;
  std::map<std::pair<const Namespace*, ObjectId>, std::shared_ptr<Job>> jobs_;
  ParkedCreates parked_;  // creates waiting for room
  DropWaits drop_waits_;  // restores and creates waiting for memory that clients let go
  // Counters since start, for status.
  uint64_t spills_ = 0, spilled_bytes_ = 0, spill_ns_ = 0;
  uint64_t restores_ = 0, restored_bytes_ = 0, restore_ns_ = 0;
  uint64_t spill_failures_ = 0;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_SPILL_STORE_H_
