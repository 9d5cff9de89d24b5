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

namespace depot {

using SessionId = uint64_t;

class Peer {
 public:
  virtual ~Peer() = default;
  // Queues one encoded message; `fds` travel with its first byte.
  virtual void Send(std::vector<uint8_t> message, std::vector<UniqueFd> fds) = 0;
  // Messages queued and not yet written (a subscriber that does not read falls behind).
  virtual size_t Backlog() const = 0;
};

// Who connected, as the kernel vouches for it (SO_PEERCRED, SO_PEERGROUPS).
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups
};

}  // namespace depot

#endif  // DEPOT_DAEMON_PEER_H_
