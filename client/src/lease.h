// internal::Lease is this connection's lease of host memory from depotd, for puts in one message
// (docs/design.md, "Puts in one message"): a range of a segment of this process's uid, mapped
// read-write with its page tables filled, into which a put copies its frames at the cursor and
// then sends one message, with no reply to wait for. A put that does not fit takes a new lease
// (one round trip), sized after the puts that come (at least kMinLease, 16 puts of this size, at
// most kMaxLease, or what the daemon grants); a put larger than kLargestPut or a quarter of the
// largest lease, one that proposes a GUID or has frames on a GPU, or one made while the daemon
// does not know leases (an older daemon) or refuses them (a quota, a full store: asked again
// after kRetryAfter), takes the create path instead, and Put says so.
//
// Thread-safe: one mutex, held from the cursor's move to the message's send, since the daemon
// takes the puts of a lease in cursor order.
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
#include "client/src/release_batcher.h"
#include "client/src/segment_map.h"
#include "depot/client.h"

namespace depot::internal {

class Lease {
 public:
  static constexpr uint64_t kMinLease = uint64_t{4} << 20;
  static constexpr uint64_t kMaxLease = uint64_t{64} << 20;
  static constexpr std::chrono::seconds kRetryAfter{1};
  // The largest put that goes into a lease. Measured (bench/results/2026-11-30-one-message-put.md):
  // at 64 KiB a lease halves a put's time, but from 1 MiB on the copy into the lease's fresh,
  // cache-cold memory costs more than the two round trips it saves, where a create reuses the
  // block a deleted object left, still in cache.
  static constexpr uint64_t kLargestPut = uint64_t{256} << 10;

  // Uses `channel`, `segments` and `releases`, which must outlive it.
  Lease(Channel& channel, SegmentMap& segments, ReleaseBatcher& releases)
      : channel_(channel), segments_(segments), releases_(releases) {}
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;

  // Whether the daemon takes puts in one message (its hello says so; an older one does not).
  void set_offered(bool offered) { offered_ = offered; }

  // Puts host `frames` with one message: the GUID once the message is sent, or an error. nullopt
  // when this put must take the create path (see the class comment).
  std::optional<Result<Guid>> Put(std::span<const std::span<const std::byte>> frames,
                                  const CreateOptions& options);

  // Whether `guid` is one of the last kRecentPuts objects put through this lease: the daemon may
  // not have read its message yet, so the shared index may not have it yet.
  bool RecentlyPut(const Guid& guid);

 private:
  // Takes a new lease of about `want` bytes, and at least `need` (the old one's rest goes back to
  // the daemon). False when the daemon refused.
  bool Renew(uint64_t want, uint64_t need);

  Channel& channel_;
  SegmentMap& segments_;
  ReleaseBatcher& releases_;
  bool offered_ = false;          // set while connecting, before any put
  uint64_t largest_ = kMaxLease;  // the most the daemon grants, once it granted less
  std::mutex mu_;
  std::byte* base_ = nullptr;  // the lease, mapped read-write
  uint32_t segment_ = 0;
  uint64_t offset_ = 0;  // of the lease in its segment
  uint64_t size_ = 0;
  uint64_t cursor_ = 0;         // bytes of the lease used
  std::vector<uint64_t> uses_;  // the segment use the mapping holds
  std::chrono::steady_clock::time_point refused_until_{};
  static constexpr size_t kRecentPuts = 32;
  std::array<Guid, kRecentPuts> recent_{};  // a ring of the last puts' GUIDs
  size_t next_recent_ = 0;
};

}  // namespace depot::internal

#endif  // DEPOT_CLIENT_SRC_LEASE_H_
