// Connecting to a Unix stream socket by path, and asking the kernel who is at the other end.
#ifndef DEPOT_COMMON_UNIX_SOCKET_H_
#define DEPOT_COMMON_UNIX_SOCKET_H_

#include <sys/socket.h>

#include <string>

#include "common/unique_fd.h"
#include "depot/status.h"

namespace depot {

// A stream socket connected to the Unix socket at `path` (close-on-exec), or an invalid UniqueFd
// with errno set (ENAMETOOLONG for a path that does not fit a sockaddr_un).
UniqueFd ConnectUnix(const std::string& path);

// The pid, uid and gid of the process at the other end of the connected Unix socket `fd`
// (SO_PEERCRED): the kernel's record of who connected, or for a client, of who listens (taken
// when listen() was called). Unavailable, saying why, when the kernel does not tell; a caller
// then refuses the peer: any guess (uid 0 is the zero value) could admit a stranger as root.
Result<ucred> PeerCredentialsOf(int fd);

}  // namespace depot

#endif  // DEPOT_COMMON_UNIX_SOCKET_H_
