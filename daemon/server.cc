#include "daemon/server.h"

#include <fmt/format.h>
#include <grp.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>

namespace depot {
namespace {

// Answers a connection that will not become a session with `code` and `why`, and lets it go.
void Refuse(boost::asio::local::stream_protocol::socket& socket, wire::Code code,
            const std::string& why) {
  auto bytes = proto::EncodeError(0, code, why);
  boost::system::error_code ignored;
  boost::asio::write(socket, boost::asio::buffer(bytes), ignored);
}

}  // namespace

Server::Server(boost::asio::io_context& io, SocketClaim claim, Store& store, ServerOptions options)
    : acceptor_(io),
      retry_(io),
      claim_(std::move(claim)),
      store_(store),
      options_(std::move(options)) {}

Result<std::unique_ptr<Server>> Server::Start(boost::asio::io_context& io, SocketClaim claim,
                                              Store& store, ServerOptions options) {
  std::unique_ptr<Server> server(new Server(io, std::move(claim), store, std::move(options)));
  if (server->claim_.passed()) {
    boost::system::error_code ec;
    server->acceptor_.assign(boost::asio::local::stream_protocol(), server->claim_.listening_.get(),
                             ec);
    if (ec) {
      return Status::Unavailable(fmt::format("cannot adopt the socket systemd passed for {}: {}",
                                             server->claim_.path(), ec.message()));
    }
    server->claim_.listening_.release();  // the acceptor owns it now
  } else if (Status st = server->Listen(); !st.ok()) {
    return st;
  }
  server->Accept();
  return server;
}

Status Server::Listen() {
  const std::string& path = claim_.path();
  boost::system::error_code ec;
  boost::asio::local::stream_protocol::endpoint endpoint(path);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(boost::asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::Unavailable(fmt::format("cannot listen on {}: {}", path, ec.message()));
  if (::chmod(path.c_str(), options_.socket_mode) != 0) {
    return Status::Unavailable(fmt::format("cannot set mode {:04o} on {}: {}", options_.socket_mode,
                                           path, std::strerror(errno)));
  }
  const std::string& group_name = options_.socket_group;
  if (!group_name.empty()) {
    group* g = ::getgrnam(group_name.c_str());
    if (g == nullptr || ::chown(path.c_str(), static_cast<uid_t>(-1), g->gr_gid) != 0) {
      return Status::Unavailable(fmt::format("cannot give {} to group {}: {}", path, group_name,
                                             g ? std::strerror(errno) : "no such group"));
    }
  }
  return Status::OK();
}

Server::~Server() {
  options_.on_clients_changed = nullptr;  // shutting down: no more reports
  boost::system::error_code ec;
  acceptor_.close(ec);
  retry_.cancel();
  auto sessions = std::move(sessions_);
  for (auto& [raw, session] : sessions) session->Close();
  // A passed socket's file is systemd's: it keeps listening there, to start depotd again.
  if (!claim_.passed()) ::unlink(claim_.path().c_str());
}

void Server::ClientsChanged() {
  if (options_.on_clients_changed) options_.on_clients_changed(sessions_.size());
}

void Server::Accept() {
  acceptor_.async_accept([this](const boost::system::error_code& ec,
                                boost::asio::local::stream_protocol::socket socket) {
    if (ec == boost::asio::error::operation_aborted) return;
    if (ec) {
      // Out of fds, for example: say so, keep serving the sessions we have, and try again a
      // little later rather than spinning on the same error.
      spdlog::error("accept on {} failed: {}", claim_.path(), ec.message());
      retry_.expires_after(std::chrono::milliseconds(100));
      retry_.async_wait([this](const boost::system::error_code& e) {
        if (!e) Accept();
      });
      return;
    }
    if (sessions_.size() >= options_.max_clients) {
      spdlog::warn("refused a connection: {} clients already connected (max_clients)",
                   sessions_.size());
      std::string msg =
          fmt::format("depotd serves at most {} clients at once (max_clients); try again later",
                      options_.max_clients);
      Refuse(socket, wire::Code::Unavailable, msg);
    } else if (auto creds = ReadPeerCredentials(socket.native_handle()); !creds.ok()) {
      spdlog::warn("refused a connection: {}", creds.status().message());
      Refuse(socket, wire::Code::PermissionDenied,
             fmt::format("depotd cannot tell who you are: {}", creds.status().message()));
    } else {
      auto session = std::make_shared<Session>(std::move(socket), store_, [this](Session* s) {
        sessions_.erase(s);
        ClientsChanged();
      });
      sessions_.emplace(session.get(), session);
      session->Start(std::move(*creds));
      ClientsChanged();
    }
    Accept();
  });
}

}  // namespace depot
