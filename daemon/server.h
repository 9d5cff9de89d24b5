// Server owns the listening socket and the connected sessions. It serves the path a SocketClaim
// holds (the one daemon there, in a directory of its own); under socket activation it adopts the
// listening socket systemd passed instead of binding, and the socket file is systemd's: depotd
// neither replaces, chmods nor removes it. A connection whose credentials the kernel does not
// tell is refused before it becomes a session: nobody is admitted as a guess.
#ifndef DEPOT_DAEMON_SERVER_H_
#define DEPOT_DAEMON_SERVER_H_

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "daemon/session.h"
#include "daemon/socket_claim.h"
#include "daemon/store.h"
#include "proto/fd_passing.h"

namespace depot {

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
