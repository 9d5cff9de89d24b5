// MetricsServer is depotd's optional HTTP endpoint for Prometheus (metrics_listen): a minimal
// HTTP/1.1 server on the daemon's loop that answers GET /metrics with the metrics text (the same
// text as `depotctl metrics`), anything else with 404 or 405, and closes each connection after
// one answer. A slow or hostile scraper cannot hold or grow the daemon, nor keep other scrapers
// out: at most kMaxConnections at once, a request head of at most kMaxRequestBytes that must
// arrive within kHeadTimeout, and kTimeout for the whole exchange, the answer's writing included.
// When the table is full, a new connection closes the oldest one that has sent nothing, else the
// oldest still waiting for the rest of its head, else (every one being answered) the oldest: a
// client that connects and sends nothing, or half a head, holds its place only until newer ones
// need it or kHeadTimeout passes.
//
// Not thread-safe: it runs on the daemon's one io_context thread, so it may read the Store.
#ifndef DEPOT_DAEMON_METRICS_SERVER_H_
#define DEPOT_DAEMON_METRICS_SERVER_H_

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <string>

#include "depot/status.h"

namespace depot {

class MetricsServer {
 public:
  static constexpr size_t kMaxConnections = 8;
  static constexpr size_t kMaxRequestBytes = 4096;
  static constexpr std::chrono::seconds kHeadTimeout{2};
  static constexpr std::chrono::seconds kTimeout{5};

  using RenderFn = std::function<std::string()>;

  // Listens on `listen` ("127.0.0.1:9464", "[::1]:9464"; port 0 picks a free one).
  // InvalidArgument for an address that is not an IP literal with a port; Unavailable, with the
  // system's reason, when it cannot be bound.
  static Result<std::unique_ptr<MetricsServer>> Start(boost::asio::io_context& io,
                                                      const std::string& listen, RenderFn render);

  // Stops accepting; connections still open end at their timeout or with the loop.
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The address and port it listens on, e.g. "127.0.0.1:9464".
  std::string address() const;

  // "host:port" split and checked, for the options' validation; an error message or "".
  static std::string CheckAddress(const std::string& listen);

 private:
  class Connection;
  // What connections share with the server and outlive it with: the connections open, oldest
  // first (each leaves the list when it closes), and the renderer.
  struct Shared {
    std::list<Connection*> open;
    RenderFn render;
  };

  // Closes a connection to make room for a new one: the oldest silent one, else the oldest still
  // reading its head, else the oldest.
  void MakeRoom();

  MetricsServer(boost::asio::io_context& io, RenderFn render);
  void Accept();

  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer retry_;
  std::shared_ptr<Shared> shared_;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_METRICS_SERVER_H_
