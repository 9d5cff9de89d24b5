#include "daemon/peer.h"

#include <sys/socket.h>

#include <cerrno>

#include "common/unix_socket.h"

namespace depot {
namespace {

std::vector<gid_t> PeerGroups(int fd) {
  std::vector<gid_t> groups(64);
  for (int tries = 0; tries < 2; ++tries) {
    socklen_t len = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len) == 0) {
      groups.resize(len / sizeof(gid_t));
      return groups;
    }
    if (errno != ERANGE) break;
    groups.resize(len / sizeof(gid_t));
  }
  return {};
}

}  // namespace

Result<PeerCredentials> ReadPeerCredentials(int fd) {
  auto cred = PeerCredentialsOf(fd);
  if (!cred.ok()) return cred.status();
  return PeerCredentials{cred->pid, cred->uid, cred->gid, PeerGroups(fd)};
}

}  // namespace depot
