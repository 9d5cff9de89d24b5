// Server owns the listening socket and the connected sessions. Before it binds, it makes sure it
// is the only daemon for its socket path: it holds an exclusive lock on "<socket>.lock" for its
// whole life, refuses to start while another daemon holds it or answers on the socket, and
// replaces a stale socket file left by a daemon that died. Under socket activation it adopts the
// listening socket systemd passed instead of binding; the lock still applies, but the socket file
// is systemd's: depotd neither replaces, chmods nor removes it.
#ifndef DEPOT_DAEMON_SERVER_H_
#define DEPOT_DAEMON_SERVER_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>

#include "daemon/session.h"
#include "daemon/store.h"
#include "proto/fd_passing.h"

namespace depot {

// Proof that this process is the one daemon for a socket path (the held lock).
class SocketClaim {
 public:
  // Creates the socket's directory when missing (mode 0700), takes the lock, and removes a stale
  // socket file. Unavailable, naming the path and what to do, when another daemon has it.
  static Result<SocketClaim> Acquire(const std::string& socket_path);

  // The same lock for a socket that the service manager passed already listening (socket
  // activation), bound to `socket_path`. The socket file belongs to systemd: it is not probed
  // (systemd itself answers there until depotd runs) and never removed. The claim carries
  // `listening` until Server::Start adopts it.
  static Result<SocketClaim> Adopt(const std::string& socket_path, UniqueFd listening);

  const std::string& path() const { return path_; }
  // True when the socket was passed by systemd rather than bound by this daemon.
  bool passed() const { return passed_; }

 private:
  friend class Server;
  // Opens "<socket>.lock", takes its exclusive lock and records this pid in it.
  static Result<SocketClaim> Lock(const std::string& socket_path);

  std::string path_;
  UniqueFd lock_;
  bool passed_ = false;
  UniqueFd listening_;  // the passed socket, until Server::Start takes it
};

struct ServerOptions {
  uint32_t socket_mode = 0660;
  std::string socket_group;  // empty: leave the daemon's own group
  uint32_t max_clients = 1024;
  // Called on the loop after each client connects or disconnects, with the number connected
  // (for the STATUS line systemd shows). Not called while the server shuts down.
  std::function<void(size_t clients)> on_clients_changed;
};

class Server {
 public:
  // Binds and listens on the claimed path, gives the socket file its mode and group, and starts
  // accepting. A passed socket (SocketClaim::Adopt) is adopted as it is: its mode and group are
  // systemd's (SocketMode=, SocketGroup=). Connections beyond max_clients are answered
  // Unavailable and closed.
  static Result<std::unique_ptr<Server>> Start(boost::asio::io_context& io, SocketClaim claim,
                                               Store& store, ServerOptions options = {});

  // Stops accepting, closes every session and removes the socket file (unless systemd passed it).
  ~Server();

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

 private:
  Server(boost::asio::io_context& io, SocketClaim claim, Store& store, ServerOptions options);
  void Accept();
  // Opens, binds and listens on the claimed path; sets its mode and group.
  Status Listen();
  // Tells on_clients_changed how many sessions there are now.
  void ClientsChanged();

  boost::asio::local::stream_protocol::acceptor acceptor_;
  boost::asio::steady_timer retry_;
  SocketClaim claim_;
  Store& store_;
  ServerOptions options_;
  std::unordered_map<Session*, std::shared_ptr<Session>> sessions_;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_SERVER_H_
