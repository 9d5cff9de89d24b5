// internal::PutRing is this connection's put ring (proto/put_ring_layout.h), mapped read-write
// from the memfd the daemon sent at hello: a put through the lease writes its message's body here
// instead of sending it, and the daemon takes it before anything that could look for it (see
// docs/design.md, "Puts without a message"). The daemon also hands back, here, blocks of the
// lease whose objects were deleted, for puts to reuse while they are still in cache.
//
// Not thread-safe: the connection's Lease calls it under its mutex.
#ifndef DEPOT_CLIENT_SRC_PUT_RING_H_
#define DEPOT_CLIENT_SRC_PUT_RING_H_

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "common/shared_mapping.h"
#include "common/unique_fd.h"
#include "depot/status.h"

namespace depot::internal {

class PutRing {
 public:
  // A block of the lease handed back by the daemon.
  struct Block {
    uint32_t segment;
    uint64_t offset;
    uint64_t size;
  };

  // Maps the ring from `fd`, which the hello reply said is `bytes` long. ProtocolError for another
  // size, a smaller file, or layout words that are not this library's (proto/layout_words.h).
  static Result<PutRing> Map(const UniqueFd& fd, uint64_t bytes);

  // Writes `body` as one record and publishes it, then fences (seq_cst) so that Polled reads the
  // daemon's word after the publication. The record's position; nullopt when the ring has no room
  // for it now.
  std::optional<uint64_t> Append(std::span<const uint8_t> body);
  // Marks the record at `position` (of a body of `length` bytes) held: the daemon will take it
  // with a reference for this session. False when the daemon took it already.
  bool Hold(uint64_t position, uint64_t length);
  // Whether the put just appended must ring the doorbell: the daemon does not poll the rings and
  // this connection has not rung since it stopped, or a get waits (see PolledState).
  bool NeedsDoorbell();

  // Before a put places its frames in the lease: marks the lease written (kLease). False when
  // the daemon took the lease back (memory ran short while it was idle): the lease is gone,
  // and a new one must be asked for.
  bool BeginWrite();
  // After the put's record is published (or the put gave up): the lease is idle again.
  void EndWrite();

  // Appends the blocks handed back since the last call.
  void TakeReturns(std::vector<Block>& out);
  // Passes over the blocks handed back so far: they are of a lease given up.
  void SkipReturns();

 private:
  explicit PutRing(SharedMapping map) : map_(std::move(map)) {}

  SharedMapping map_;
  uint64_t head_ = 0;             // bytes published
  uint64_t returns_ = 0;          // returns taken
  uint64_t rang_ = ~uint64_t{0};  // the kPolled word when this connection last rang
};

}  // namespace depot::internal

#endif  // DEPOT_CLIENT_SRC_PUT_RING_H_
