// SegmentTracker remembers which segment descriptors each session has been sent, so that a
// shared segment's descriptor travels once per connection (a dedicated segment's, holding one
// object, travels with each reply that names it), and tells who must hear that a segment is
// gone so that its clients unmap it. A segment has two descriptors: the read-only one, sent for
// gets, and the read-write one, sent only in create replies (to creators of the segment's uid,
// since segments are per uid); each is tracked apart.
//
// A retired shared segment stays held by the sessions told of it until each says it dropped the
// segment (a SegmentsDropped message) or disconnects; when the last one lets go, `released` is
// called so that its pool gives the memory and the bytes back. A dedicated segment needs no such
// hold: a client unmaps it before it sends the release (or seal, or abort) that lets the daemon
// free its one object, so no notice is sent for it.
//
// Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_SEGMENT_TRACKER_H_
#define DEPOT_DAEMON_SEGMENT_TRACKER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/unique_fd.h"
#include "daemon/namespace.h"
#include "daemon/peer.h"
#include "proto/wire.h"

namespace depot {

class SegmentTracker {
 public:
  // Retired segment `id` of pool `pool` in `ns` is mapped by no session any more.
  using ReleasedFn = std::function<void(Namespace& ns, uint32_t pool, uint32_t id)>;

  explicit SegmentTracker(ReleasedFn released) : released_(std::move(released)) {}

  // Pool and segment id in one key, as replies list them.
  static uint64_t Key(uint32_t pool, uint32_t id) { return uint64_t{pool} << 32 | id; }

  // A greeted session of namespace `ns`.
  void Join(SessionId session, Namespace* ns) { sessions_[session].ns = ns; }
  // The session is gone, and so are its mappings: it holds no retired segment any more.
  void Leave(SessionId session);

  // Adds to `keys` the segments of `frames` that the reply must describe, and to `fds` a
  // duplicate of each descriptor `session` does not have yet: the read-write one for `writable`
  // (a create reply), else the read-only one. Unavailable when the daemon is out of file
  // descriptors; then the session is owed every segment of this reply again.
  Status Collect(SessionId session, std::span<const Location> frames, bool writable,
                 std::vector<uint64_t>& keys, std::vector<UniqueFd>& fds);

  // Segment `id` of pool `pool` in `ns` was given back: the sessions that have its descriptor
  // (each forgets it), to be told to unmap it. They hold it until each has dropped it.
  std::vector<SessionId> Retire(const Namespace* ns, uint32_t pool, uint32_t id);

  // `session` unmapped the retired segments its message names. Ids it does not hold are ignored:
  // a client can only let go of its own hold.
  void Dropped(SessionId session, const wire::SegmentsRetired& dropped);

 private:
  static constexpr uint8_t kReadOnly = 1;
  static constexpr uint8_t kReadWrite = 2;

  struct Entry {
    Namespace* ns = nullptr;
    // Shared segments whose fds it has: kReadOnly, kReadWrite or both.
    std::unordered_map<uint64_t, uint8_t> sent;
    // Retired segments it was told of and has not dropped yet.
    std::unordered_set<uint64_t> holding;
  };
  // Held retired segments of one namespace: who still maps each. At most one entry per segment
  // the pools keep counted, so bounded by the capacity.
  struct Held {
    Namespace* ns;
    std::unordered_set<SessionId> by;
  };
  // Removes `session`'s hold on `key` of `ns`; calls released_ when it was the last.
  void LetGo(SessionId session, Namespace* ns, uint64_t key);

  ReleasedFn released_;
  std::unordered_map<SessionId, Entry> sessions_;
  std::map<std::pair<const Namespace*, uint64_t>, Held> held_;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_SEGMENT_TRACKER_H_
