// What depotd takes from systemd and tells it back, through libsystemd's sd-daemon calls:
// - socket activation: the listening socket a .socket unit (or systemd-socket-activate) passed,
//   so that clients can connect before the daemon runs and across its restarts;
// - notification (Type=notify): READY=1 once clients are served, a STATUS= line, STOPPING=1.
// Outside systemd both are no-ops: no socket was passed, and NOTIFY_SOCKET is unset.
//
// Everything here is called from the daemon's one thread.
#ifndef DEPOT_DAEMON_SYSTEMD_H_
#define DEPOT_DAEMON_SYSTEMD_H_

#include <optional>
#include <string>
#include <vector>

#include "daemon/kept_memory.h"
#include "depot/status.h"
#include "proto/fd_passing.h"

namespace depot {

// A listening Unix stream socket that the service manager passed, and the path it is bound to.
struct PassedSocket {
  UniqueFd fd;
  std::string path;
};

// What the service manager passed: the socket of socket activation, and the descriptors of the
// last daemon's memory from the service's descriptor store (see KeptMemory), told apart by name
// (LISTEN_FDNAMES): the kept ones are named "depot.…".
struct Passed {
  std::optional<PassedSocket> socket;
  std::vector<KeptFd> kept;
};

// Takes what systemd passed (LISTEN_FDS/LISTEN_PID/LISTEN_FDNAMES, which it then removes from the
// environment); nothing when nothing was passed to this process. InvalidArgument, saying what to
// change in the .socket unit, when the sockets passed are not exactly one listening Unix stream
// socket bound to a filesystem path (a datagram or TCP socket, an abstract name, two sockets):
// depotd then refuses to start rather than serve something other than what was configured.
Result<Passed> TakePassed();

// Notifications to the service manager (sd_notify). Each is a no-op when NOTIFY_SOCKET is unset;
// a failure to send is logged at debug level and otherwise ignored, since the daemon serves
// the same either way.

// The socket accepts connections and the host pool exists: systemd may start the units that
// are ordered after depotd. `status` is the STATUS= line sent with it.
void NotifyReady(const std::string& status);

// A one-line summary that `systemctl status depotd` shows.
void NotifyStatus(const std::string& status);

// SIGTERM or SIGINT arrived: the daemon is closing its sessions and removing its segments.
void NotifyStopping();

}  // namespace depot

#endif  // DEPOT_DAEMON_SYSTEMD_H_
