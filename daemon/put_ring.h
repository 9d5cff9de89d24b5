// PutRing is one session's put ring (proto/put_ring_layout.h): a sealed memfd that the daemon
// maps and sends read-write to the session at hello. The client writes puts into it and sends no
// message; the daemon takes them (Take) before it handles any request of that session, before a
// get, delete, contains or stat of a missing object from anyone, on its polling timer, and when
// the session closes (see PutRings). It also hands blocks of the session's lease back to it
// through the ring (Return).
//
// The ring is the client's to write: the daemon copies each record before it reads it, and a
// ring whose positions or lengths make no sense, or whose layout words (proto/layout_words.h)
// the client overwrote, is the session's protocol error (it closes). The memfd is sealed
// against shrinking, so no client can make the daemon's reads fault.
//
// Not thread-safe: the daemon's single loop owns it; the client writes the memory concurrently.
#ifndef DEPOT_DAEMON_PUT_RING_H_
#define DEPOT_DAEMON_PUT_RING_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/shared_mapping.h"
#include "common/unique_fd.h"
#include "daemon/location.h"
#include "depot/status.h"

namespace depot {

class PutRing {
 public:
  // An empty ring in a memfd named `name`; the memfd's error when it cannot be made.
  static Result<std::unique_ptr<PutRing>> Create(const std::string& name);
  // The ring of a session of the last daemon, kept across its crash (KeptMemory): Take hands out
  // what its client published and that daemon had not taken. InvalidArgument for a descriptor
  // that is no ring (its size or seals).
  static Result<std::unique_ptr<PutRing>> Adopt(UniqueFd fd);

  // Sent to the session: read-write.
  int fd() const { return fd_.get(); }

  // Hands each record the client had published when this was called to `take`, in order (a copy
  // of its body: the client cannot change it while it is read, and whether the client holds the
  // object already: kHeld), and moves the tail past it; at most `most` records.
  // Stops at the first error, `take`'s or the ring's own (a ProtocolError: the session must
  // close); the ring is broken from then on and takes nothing more.
  Status Take(const std::function<Status(std::span<const uint8_t>, bool held)>& take,
              uint64_t most = UINT64_MAX);
  // Whether the client published records not taken yet, or overwrote the layout words (then
  // Take fails).
  bool Pending() const;
  // Whether the layout words are as the daemon wrote them. While they are not, Revoke and
  // CanReturn answer false and Take breaks the ring.
  bool Intact() const;

  // Tells the client how to ring the doorbell: the kPolled word (proto/put_ring_layout.h).
  void SetPolled(uint64_t word);
  // A kept ring of a daemon that is gone, before its Take: revokes the client's lease unless it
  // is writing into it, tells the client to ring after every put (kUrgent, on a socket no one
  // reads any more, so that its put fails), then fences. The
  // client publishes a record, fences, then reads this word: either the Take that follows sees
  // the record, or the client sees this word and its put answers Disconnected. No record is ever
  // left in a ring that no daemon reads after a put returned.
  void Close();

  // A lease was granted to the session: the client may write into it (kLease, kLeaseIdle).
  void LeaseGranted();
  // Takes the session's lease from its client, when the client is not writing into it and has
  // published no record that the daemon has not taken (a record may name frames in the lease):
  // kLease from kLeaseIdle to kLeaseRevoked. False, and nothing changed, otherwise, and for a
  // session that never wrote into its ring (an older client's puts are messages, which the
  // daemon may not have read yet).
  bool Revoke();

  // Whether a return can be written: the client has taken all but fewer than kReturnSlots of the
  // earlier ones (as it says).
  bool CanReturn() const;
  // Writes a return of `block` (see CanReturn) for the client.
  void Return(const Location& block);

 private:
  PutRing(UniqueFd fd, SharedMapping map) : fd_(std::move(fd)), map_(std::move(map)) {}

  UniqueFd fd_;
  SharedMapping map_;
  uint64_t tail_ = 0;     // the daemon's own copy: the shared word is written, never read
  uint64_t returns_ = 0;  // returns written
  bool broken_ = false;
  std::vector<uint8_t> body_;  // the record being taken
};

}  // namespace depot

#endif  // DEPOT_DAEMON_PUT_RING_H_
