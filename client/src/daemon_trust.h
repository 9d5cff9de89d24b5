// Which daemon a client trusts with its data. Whoever answers at the socket path receives every
// byte the client puts and decides every byte it gets, so the client asks the kernel who that is
// (SO_PEERCRED) before it says hello. It trusts a daemon that runs as its own uid or as root; or
// as the owner of the socket's directory when only root could have made that directory (its
// parent is root's and nobody else may write there: the service's /run/depot, in /run); or as
// the uid its user names (ConnectOptions::trusted_daemon_uid, else $DEPOT_DAEMON_UID). Any other
// daemon is one that another unprivileged user could have placed there, in a /tmp/depot-$UID it
// made first for instance: the client refuses it, PermissionDenied, saying why and how to trust
// it when that is meant.
//
// Stateless functions; thread-safe.
#ifndef DEPOT_CLIENT_SRC_DAEMON_TRUST_H_
#define DEPOT_CLIENT_SRC_DAEMON_TRUST_H_

#include <sys/types.h>

#include <optional>
#include <string>

#include "depot/status.h"

namespace depot::internal {

// OK when a client of uid `self` may trust a daemon of uid `daemon` answering at `socket_path`,
// `named` being the uid its user named, if any; else PermissionDenied naming the socket path, the
// daemon's uid, why it is not trusted and how to trust it.
Status TrustDaemon(const std::string& socket_path, uid_t daemon, uid_t self,
                   std::optional<uid_t> named);

// Asks the kernel who listens at the other end of `fd`, connected to `socket_path`, and checks
// it with TrustDaemon for this process's effective uid. PermissionDenied also when the kernel
// does not tell: an unknown daemon is not trusted.
Status CheckDaemon(int fd, const std::string& socket_path, std::optional<uid_t> named);

// The uid to trust that its user named: `option` when set, else $DEPOT_DAEMON_UID when set and not
// empty, else none. InvalidArgument when the variable does not hold a uid.
Result<std::optional<uid_t>> NamedDaemonUid(std::optional<uid_t> option);

}  // namespace depot::internal

#endif  // DEPOT_CLIENT_SRC_DAEMON_TRUST_H_
