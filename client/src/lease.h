// internal::Lease is this connection's lease of host memory from depotd, for puts in one message
// or none (docs/design.md, "Puts in one message", "Puts without a message"): a range of a segment
// of this process's uid, mapped read-write with its page tables filled, into which a put copies
// its frames, and then writes its message into the put ring (when the daemon sent one; a doorbell
// message only when the ring's word asks for one, see PutRing::NeedsDoorbell) or sends it, with
// no reply to wait for. A frame goes into a block of the lease that the daemon handed back (its
// object was deleted; still in cache) when one is of about its size, else at the cursor. A put
// that does not fit takes a new lease (one round trip), sized after the puts that come (at least
// kMinLease, 16 puts of this size, at most kMaxLease, or what the daemon grants); a put larger
// than kLargestPut or a quarter of the largest lease, one that proposes a GUID or has frames on a
// GPU, or one made while the daemon does not know leases (an older daemon) or refuses them (a
// quota, a full store: asked again after kRetryAfter), takes the create path instead, and Put
// says so. A lease left idle may be taken back by the daemon when memory runs short (a put then
// finds PutRing::BeginWrite false, forgets it and takes a new one).
//
// Thread-safe: one mutex, held from the cursor's move to the message's send, since the daemon
// takes the puts of a lease in the order they were written.
#ifndef DEPOT_CLIENT_SRC_LEASE_H_
#define DEPOT_CLIENT_SRC_LEASE_H_

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "client/src/channel.h"
#include "client/src/put_ring.h"
#include "client/src/release_batcher.h"
#include "client/src/segment_map.h"
#include "depot/client.h"
#include "proto/object_rules.h"

namespace depot::internal {

class Lease {
 public:
  static constexpr uint64_t kMinLease = uint64_t{4} << 20;
  static constexpr uint64_t kMaxLease = proto::kMaxLease;  // the most a client may ask for
  static constexpr std::chrono::seconds kRetryAfter{1};
  // The largest put that goes into a lease. Before the put ring and the blocks handed back, a
  // put of 1 MiB into a lease's fresh, cache-cold memory cost more than the two round trips it
  // saved (bench/results/2026-11-30-one-message-put.md); with them, see
  // bench/results/2026-11-30-put-ring.md.
  static constexpr uint64_t kLargestPut = uint64_t{4} << 20;

  // Uses `channel`, `segments` and `releases`, which must outlive it.
  Lease(Channel& channel, SegmentMap& segments, ReleaseBatcher& releases)
      : channel_(channel), segments_(segments), releases_(releases) {}
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;

  // Whether the daemon takes puts in one message (its hello says so; an older one does not).
  void set_offered(bool offered) { offered_ = offered; }
  // The put ring the daemon sent at hello (before any put).
  void set_ring(PutRing ring) { ring_.emplace(std::move(ring)); }

  // Puts host `frames` with one message as `guid` (a GUID of this process's, not one the caller
  // proposed, which needs the daemon's answer): `guid` once the message is sent, or an error.
  // nullopt when this put must take the create path (see the class comment).
  std::optional<Result<Guid>> Put(std::span<const std::span<const std::byte>> frames,
                                  const CreateOptions& options, const Guid& guid);

  // The daemon hung up: no put writes into the lease from now on (Disconnected). The next
  // daemon adopted the lease's segment with the rest, and once its grace period ends the
  // lease's bytes may be another object's.
  void Close() {
    std::lock_guard lk(mu_);
    closed_ = true;
  }

  // Whether `guid` is one of the last kRecentPuts objects put through this lease with a message
  // (the put's or a doorbell): the daemon may not have read it yet, so the shared index may not
  // have it yet, but will soon. (A put left in the polled ring may wait for the next poll.)
  bool RecentlyPut(const Guid& guid);

  // What a get of one of this connection's puts needs, taken from the put itself.
  struct OwnPut {
    std::vector<wire::FrameLocation> frames;
    std::vector<std::byte> metadata;
    std::optional<uint64_t> checksum;
  };
  // When `guid` is one of the last kRecentPuts puts written into the ring and the daemon has not
  // taken it yet: marks it held (PutRing::Hold: the daemon takes it with a reference for this
  // connection, released by GUID) and returns it. nullopt otherwise: the daemon has it, or will
  // have it once it reads a message of this connection.
  std::optional<OwnPut> HoldOwn(const Guid& guid);

 private:
  // Marks the lease written (PutRing::BeginWrite); false when there is none, or when the daemon
  // took it back (then forgotten). End marks it idle again, once Begin said true.
  bool Begin();
  void End();
  // Forgets the lease: the daemon ended it, or ends it now.
  void Forget();
  // Takes a new lease of about `want` bytes, and at least `need` (the old one's rest goes back to
  // the daemon). False when the daemon refused.
  bool Renew(uint64_t want, uint64_t need);
  // Where each frame (rounded-up sizes in `sizes`) goes: the offset in the segment of a block
  // handed back, or of the cursor; false when the cursor's part does not fit.
  bool Place(std::span<const uint64_t> sizes, std::vector<uint64_t>& offsets);

  Channel& channel_;
  SegmentMap& segments_;
  ReleaseBatcher& releases_;
  bool offered_ = false;          // set while connecting, before any put
  uint64_t largest_ = kMaxLease;  // the most the daemon grants, once it granted less
  std::mutex mu_;
  bool closed_ = false;        // under mu_
  std::byte* base_ = nullptr;  // the lease, mapped read-write
  uint32_t segment_ = 0;
  uint64_t offset_ = 0;  // of the lease in its segment
  uint64_t size_ = 0;
  uint64_t cursor_ = 0;   // bytes of the lease used
  bool writing_ = false;  // between Begin and End
  std::optional<PutRing> ring_;
  std::vector<PutRing::Block> returned_;  // blocks of this lease handed back, not used yet
  SegmentUses uses_;                      // the segment use the mapping holds
  std::chrono::steady_clock::time_point refused_until_{};
  // A put's working space, kept so that a put allocates nothing (under mu_).
  std::vector<uint64_t> sizes_;    // each frame's rounded-up size
  std::vector<uint64_t> offsets_;  // where each frame goes (Place)
  std::vector<size_t> used_;       // the returned blocks Place used
  std::vector<wire::FrameLocation> locations_;
  flatbuffers::FlatBufferBuilder fbb_{1024};  // the put's record
  static constexpr size_t kRecentPuts = 32;
  struct RingPut {
    Guid guid;
    uint64_t position = 0;  // of its record in the ring
    uint64_t length = 0;    // of its record's body
    OwnPut put;
  };
  std::array<RingPut, kRecentPuts> ring_puts_{};  // a ring of the last puts left in the ring
  size_t next_ring_put_ = 0;
  std::array<Guid, kRecentPuts> recent_{};  // a ring of the last puts' GUIDs
  size_t next_recent_ = 0;
};

}  // namespace depot::internal

#endif  // DEPOT_CLIENT_SRC_LEASE_H_
