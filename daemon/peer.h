// Peer is where one session's replies go, and PeerCredentials who is at the other end. The
// request handler (Store) talks to a Peer only, never to a socket: the daemon's Session is one,
// the fuzzer's and the unit tests' fakes are others.
#ifndef DEPOT_DAEMON_PEER_H_
#define DEPOT_DAEMON_PEER_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/unique_fd.h"
#include "depot/status.h"

namespace depot {

using SessionId = uint64_t;

class Peer {
 public:
  virtual ~Peer() = default;
  // Queues one encoded message; `fds` travel with its first byte.
  virtual void Send(std::vector<uint8_t> message, std::vector<UniqueFd> fds) = 0;
  // Messages queued and not yet written (a subscriber that does not read falls behind).
  virtual size_t Backlog() const = 0;
  // Reads and handles, now, the messages the client had sent when this was called (its puts
  // may have returned before the daemon read them: see docs/design.md, "Puts in one message").
  // Nothing for a peer that reads no socket.
  virtual void HandleArrived() {}
  // The socket a drain watches for bytes the client sent (see Store::DrainFirst), or -1 for a
  // peer that reads no socket (nothing to drain).
  virtual int fd() const { return -1; }
  // Closes the session for `status` (a ProtocolError found outside its own request: in its put
  // ring), after one error reply. Nothing for a peer that reads no socket.
  virtual void Abort(const Status& status) { (void)status; }
};

// Who connected, as the kernel vouches for it (SO_PEERCRED, SO_PEERGROUPS).
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups
};

// The credentials of the client connected on `fd`. An error, saying why, when the kernel does not
// tell its pid, uid and gid: the caller refuses the connection (a default would be uid 0, root).
// Its supplementary groups are best effort: without them it is admitted on its uid and gid only.
Result<PeerCredentials> ReadPeerCredentials(int fd);

}  // namespace depot

#endif  // DEPOT_DAEMON_PEER_H_
