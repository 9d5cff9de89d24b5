// Connecting to a Unix stream socket by path.
#ifndef DEPOT_COMMON_UNIX_SOCKET_H_
#define DEPOT_COMMON_UNIX_SOCKET_H_

#include <string>

#include "common/unique_fd.h"

namespace depot {

// A stream socket connected to the Unix socket at `path` (close-on-exec), or an invalid UniqueFd
// with errno set (ENAMETOOLONG for a path that does not fit a sockaddr_un).
UniqueFd ConnectUnix(const std::string& path);

}  // namespace depot

#endif  // DEPOT_COMMON_UNIX_SOCKET_H_
