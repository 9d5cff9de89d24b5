#include "daemon/server.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <boost/asio/write.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/unix_socket.h"

namespace depot {
namespace {

// True when something accepts connections on `path` now.
bool SomeoneListens(const std::string& path) { return ConnectUnix(path).valid(); }

}  // namespace

Result<SocketClaim> SocketClaim::Lock(const std::string& socket_path) {
  SocketClaim claim;
  claim.path_ = socket_path;
  std::string lock_path = socket_path + ".lock";
  claim.lock_.reset(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!claim.lock_.valid()) {
    return Status::Unavailable(
        fmt::format("cannot open the lock file {}: {}", lock_path, std::strerror(errno)));
  }
  if (::flock(claim.lock_.get(), LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {};
    ssize_t n = ::pread(claim.lock_.get(), pid, sizeof pid - 1, 0);
    std::string who = n > 0 ? fmt::format(" (pid {})", std::string(pid, strcspn(pid, "\n"))) : "";
    return Status::Unavailable(fmt::format(
        "another depotd{} is already serving {}; stop it first or choose another --socket", who,
        socket_path));
  }
  std::string pid = fmt::format("{}\n", ::getpid());
  if (::ftruncate(claim.lock_.get(), 0) != 0 ||
      ::pwrite(claim.lock_.get(), pid.data(), pid.size(), 0) < 0) {
    spdlog::debug("cannot record the pid in {}: {}", lock_path, std::strerror(errno));
  }
  return claim;
}

Result<SocketClaim> SocketClaim::Acquire(const std::string& socket_path) {
  if (socket_path.size() >= sizeof(sockaddr_un::sun_path)) {
    return Status::InvalidArgument(fmt::format("socket path {} is longer than {} bytes",
                                               socket_path, sizeof(sockaddr_un::sun_path) - 1));
  }
  std::filesystem::path dir = std::filesystem::path(socket_path).parent_path();
  if (!dir.empty()) {
    std::error_code ec;
    if (std::filesystem::create_directories(dir, ec)) ::chmod(dir.c_str(), 0700);
    if (ec) {
      return Status::Unavailable(
          fmt::format("cannot create the socket directory {}: {}", dir.string(), ec.message()));
    }
  }
  auto claim = Lock(socket_path);
  if (!claim.ok()) return claim;
  if (SomeoneListens(socket_path)) {
    return Status::Unavailable(fmt::format(
        "a live process answers on {}; stop it first or choose another --socket", socket_path));
  }
  if (::unlink(socket_path.c_str()) == 0) spdlog::info("replaced stale socket {}", socket_path);
  return claim;
}

Result<SocketClaim> SocketClaim::Adopt(const std::string& socket_path, UniqueFd listening) {
  auto claim = Lock(socket_path);
  if (!claim.ok()) return claim;
  claim->passed_ = true;
  claim->listening_ = std::move(listening);
  return claim;
}

Server::Server(boost::asio::io_context& io, SocketClaim claim, Store& store, ServerOptions options)
    : acceptor_(io), retry_(io), claim_(std::move(claim)), store_(store), options_(std::move(options)) {}

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
    } else if (sessions_.size() >= options_.max_clients) {
      spdlog::warn("refused a connection: {} clients already connected (max_clients)",
                   sessions_.size());
      std::string msg = fmt::format("depotd serves at most {} clients at once (max_clients); try again later",
                                    options_.max_clients);
      auto bytes = proto::EncodeError(0, wire::Code::Unavailable, msg);
      boost::system::error_code ignored;
      boost::asio::write(socket, boost::asio::buffer(bytes), ignored);
    } else {
      auto session = std::make_shared<Session>(std::move(socket), store_, [this](Session* s) {
        sessions_.erase(s);
        ClientsChanged();
      });
      sessions_.emplace(session.get(), session);
      session->Start();
      ClientsChanged();
    }
    Accept();
  });
}

}  // namespace depot
