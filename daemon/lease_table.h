// LeaseTable keeps the ranges of host memory leased to sessions, so that a client can put an
// object with one message and no reply (docs/design.md, "Puts in one message"). A lease is one
// allocated block in a segment of its session's uid; a put carves its frames off the front of
// the lease's unconsumed part (its cursor), freeing any gap it skips, and each frame is from
// then on a block of its own, freed with its object (Allocator::Split). What is left of a lease
// is freed when the session takes a new one, gives it back, or closes.
//
// Warm reuse: when an object cut from the session's lease is deleted, its blocks may go back to
// the lease rather than to the pool (TakeBack), up to kMaxReturned blocks and the lease's size;
// the daemon tells the client through its put ring, and a later put of about that size reuses
// the block, still in cache, where a fresh part of the lease would be cold.
//
// Under memory pressure the daemon takes back leases left idle (IdleSince, then End), once their
// clients agree through the put ring (PutRing::Revoke).
//
// It trusts nothing the client says: Carve checks every frame against the lease before it cuts
// anything, and refuses the whole put otherwise.
//
// Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_LEASE_TABLE_H_
#define DEPOT_DAEMON_LEASE_TABLE_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "daemon/namespace.h"
#include "daemon/peer.h"
#include "depot_generated.h"

namespace depot {

class LeaseTable {
 public:
  // Records `block` (allocated in `ns` for `session`) as its lease, whose `charged` bytes were
  // charged to the session's quota. The session must hold none (End it first).
  void Grant(SessionId session, Namespace& ns, const Location& block, uint64_t charged);

  // Cuts the frames of a put off `session`'s lease: each host frame must either start a block
  // the lease took back (and fit in it; the rest of that block is freed) or lie inside the lease,
  // at or after its cursor and after the frame before it, at an aligned offset; frames of size
  // 0 take no memory. Returns their locations (each now a block of its own) and moves the
  // lease's charge for their bytes to the caller, who charges the object instead. A frame that
  // takes the rest of the lease leaves its cursor at the lease's end. An error found by the
  // checks (the caller closes the connection) changes nothing; a cut the checks allowed that
  // fails all the same (a broken invariant) is an error too, never assumed away.
  Result<std::vector<Location>> Carve(
      SessionId session, const flatbuffers::Vector<const wire::FrameLocation*>& frames);

  // Whether `frame`, of an object `session` put, goes back to its lease now that the object is
  // freed: when it was cut from the session's current lease and the lease holds fewer than
  // kMaxReturned blocks taken back, of fewer bytes than the lease's size. Then the block (its
  // size rounded up) is the lease's again, charged to it (the caller charges the quota).
  std::optional<Location> TakeBack(SessionId session, const Location& frame);

  // Frees what is left of `session`'s lease, with the blocks it took back; returns its bytes
  // still charged to the quota (for the caller to credit). 0 when it holds none.
  uint64_t End(SessionId session);

  // The sessions holding a lease: the only ones whose puts may be in their sockets unread.
  std::vector<SessionId> Holders() const;
  // The sessions whose lease was granted, and last had a put cut from it, before `since`.
  std::vector<SessionId> IdleSince(std::chrono::steady_clock::time_point since) const;
  bool empty() const { return leases_.empty(); }
  static constexpr size_t kMaxReturned = 8;

  // Bytes leased and not yet carved, over every session.
  uint64_t leased() const { return leased_; }

 private:
  struct Lease {
    Namespace* ns;
    Location rest;     // the unconsumed part, an allocated block; its offset is the cursor
    uint64_t start;    // where the lease began
    uint64_t end;      // where the lease ends
    uint64_t charged;  // bytes of quota the lease still holds
    std::vector<Location> returned;  // blocks taken back, each allocated (size rounded up)
    std::chrono::steady_clock::time_point used;  // granted, or a put last cut from it
  };

  // A cut that Carve's checks allowed failed: logged, and the put refused.
  static Status Broken(const Status& why);

  std::unordered_map<SessionId, Lease> leases_;
  uint64_t leased_ = 0;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_LEASE_TABLE_H_
