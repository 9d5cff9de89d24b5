// SocketClaim is this daemon's hold on its socket path, taken before anything is served there.
//
// The socket's home must be depotd's own: the directory belongs to the daemon's user (or to root,
// as /run/depot may when systemd made it) and nobody else may write in it (its group may, when
// that is the daemon's own group and the directory is not writable by everyone). Anything else
// could be a directory another user made first, to answer the daemon's clients or to make the
// daemon write where it should not: depotd refuses it, saying which directory, whose it is and
// what to do.
//
// In that directory depotd holds an exclusive lock on "<socket>.lock" for its whole life (the one
// daemon per socket path), opened without following a link and checked to be a plain file of its
// own; and it replaces a stale socket file only when it is a socket of its own user. It follows
// no link it did not make.
//
// Under socket activation the listening socket comes from systemd: the lock still applies, but
// the socket file is systemd's, and depotd neither probes, replaces, chmods nor removes it.
//
// Used on the loop's thread only, at start-up; the claim lives as long as the Server.
#ifndef DEPOT_DAEMON_SOCKET_CLAIM_H_
#define DEPOT_DAEMON_SOCKET_CLAIM_H_

#include <string>

#include "common/unique_fd.h"
#include "depot/status.h"

namespace depot {

class SocketClaim {
 public:
  // Checks the socket's directory (making it, mode 0700, when missing), takes the lock, and
  // removes a stale socket file. Unavailable, naming the path and what to do, when another daemon
  // has it; PermissionDenied when the directory, the lock file or the socket file is not depotd's
  // own.
  static Result<SocketClaim> Acquire(const std::string& socket_path);

  // The same checks and lock for a socket that the service manager passed already listening
  // (socket activation), bound to `socket_path`. The socket file belongs to systemd: it is not
  // probed (systemd itself answers there until depotd runs) and never removed. The claim carries
  // `listening` until Server::Start adopts it.
  static Result<SocketClaim> Adopt(const std::string& socket_path, UniqueFd listening);

  const std::string& path() const { return path_; }
  // True when the socket was passed by systemd rather than bound by this daemon.
  bool passed() const { return passed_; }

 private:
  friend class Server;
  // Opens the socket's directory, checks it, and takes the lock in it. `dir` receives the open
  // directory, for the caller to look at the socket file there.
  static Result<SocketClaim> Lock(const std::string& socket_path, UniqueFd& dir);

  std::string path_;
  UniqueFd lock_;
  bool passed_ = false;
  UniqueFd listening_;  // the passed socket, until Server::Start takes it
};

}  // namespace depot

#endif  // DEPOT_DAEMON_SOCKET_CLAIM_H_
