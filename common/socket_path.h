// Where depotd listens and clients connect when nothing else is said.
#ifndef DEPOT_COMMON_SOCKET_PATH_H_
#define DEPOT_COMMON_SOCKET_PATH_H_

#include <sys/types.h>

#include <string>

namespace depot {

// The per-user default socket of this process's user: DefaultSocketPathFor($XDG_RUNTIME_DIR,
// getuid()).
std::string DefaultSocketPath();

// The default socket of `uid`: $XDG_RUNTIME_DIR/depot/depot.sock when `xdg_runtime_dir` is not
// empty; else <run_user>/$UID/depot/depot.sock when that per-user runtime directory exists and
// belongs to `uid` (logind makes it at login, 0700: nobody else can get in first); else
// /tmp/depot-$UID/depot.sock, a directory that depotd makes 0700 and refuses to serve from when
// another user made it first.
std::string DefaultSocketPathFor(const std::string& xdg_runtime_dir, uid_t uid,
                                 const std::string& run_user = "/run/user");

}  // namespace depot

#endif  // DEPOT_COMMON_SOCKET_PATH_H_
