// SegmentTracker remembers which segment descriptors each session has been sent, so that a
// shared segment's descriptor travels once per connection (a dedicated segment's, holding one
// object, travels with each reply that names it), and tells who must hear that a segment is
// gone so that its clients unmap it. A segment has two descriptors: the read-only one, sent for
// gets, and the read-write one, sent only in create replies (to creators of the segment's uid,
// since segments are per uid); each is tracked apart.
//
// Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_SEGMENT_TRACKER_H_
#define DEPOT_DAEMON_SEGMENT_TRACKER_H_

#include <cstdint>
#include <span>
#include <unordered_map>
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
  // duplicate of each descriptor `session` does not have yet: the read-write one for `writable`
  // (a create reply), else the read-only one. Unavailable when the daemon is out of file
  // descriptors; then the session is owed every segment of this reply again.
  Status Collect(SessionId session, std::span<const Location> frames, bool writable,
                 std::vector<uint64_t>& keys, std::vector<UniqueFd>& fds);

  // Segment `id` of pool `pool` in `ns` was given back: the sessions that have its descriptor
  // (each forgets it), to be told to unmap it.
  std::vector<SessionId> Retire(const Namespace* ns, uint32_t pool, uint32_t id);

 private:
  static constexpr uint8_t kReadOnly = 1;
  static constexpr uint8_t kReadWrite = 2;

  struct Entry {
    const Namespace* ns = nullptr;
    // Shared segments whose fds it has: kReadOnly, kReadWrite or both.
    std::unordered_map<uint64_t, uint8_t> sent;
  };
  std::unordered_map<SessionId, Entry> sessions_;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_SEGMENT_TRACKER_H_
