// Where depotd listens and clients connect when nothing else is said.
#ifndef DEPOT_COMMON_SOCKET_PATH_H_
#define DEPOT_COMMON_SOCKET_PATH_H_

#include <string>

namespace depot {

// The per-user default socket: $XDG_RUNTIME_DIR/depot/depot.sock, else /tmp/depot-$UID/depot.sock.
std::string DefaultSocketPath();

}  // namespace depot

#endif  // DEPOT_COMMON_SOCKET_PATH_H_
