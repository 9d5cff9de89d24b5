// SegmentTracker remembers which segment descriptors each session has been sent, so that a
// shared segment's descriptor travels once per connection (a dedicated segment's, holding one
// object, travels with each reply that names it), and tells who must hear that a segment is
// gone so that its clients unmap it.
//
// Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_SEGMENT_TRACKER_H_
#define DEPOT_DAEMON_SEGMENT_TRACKER_H_

#include <cstdint>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/unique_fd.h"
#include "daemon/namespace.h"
#include "daemon/peer.h"

namespace depot {

class SegmentTracker {
 public:
  // Pool and segment id in one key, as replies list them.
  static uint64_t Key(uint32_t pool, uint32_t id) { return uint64_t{pool} << 32 | id; }

  // A greeted session of namespace `ns`.
  void Join(SessionId session, const Namespace* ns) { sessions_[session].ns = ns; }
  void Leave(SessionId session) { sessions_.erase(session); }

  // Adds to `keys` the segments of `frames` that the reply must describe, and to `fds` a
  // duplicate of each descriptor `session` does not have yet. Unavailable when the daemon is
  // out of file descriptors; then the session is owed every segment of this reply again.
  Status Collect(SessionId session, std::span<const Location> frames, std::vector<uint64_t>& keys,
                 std::vector<UniqueFd>& fds);

  // Segment `id` of pool `pool` in `ns` was given back: the sessions that have its descriptor
  // (each forgets it), to be told to unmap it.
  std::vector<SessionId> Retire(const Namespace* ns, uint32_t pool, uint32_t id);

 private:
  struct Entry {
    const Namespace* ns = nullptr;
    std::unordered_set<uint64_t> sent;  // shared segments whose fd it has
  };
  std::unordered_map<SessionId, Entry> sessions_;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_SEGMENT_TRACKER_H_
