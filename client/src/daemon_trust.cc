#include "client/src/daemon_trust.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "common/unix_socket.h"
#include "common/users.h"

namespace depot::internal {
namespace {

// Why root cannot be said to have placed a daemon of uid `daemon` at `socket_path`, or "" when it
// can: the socket's directory is that user's, and it lies in a directory that nobody but root
// may write, so only root could have made it (and given it to that user). The path is resolved
// first: the directory that counts is the one the socket really is in.
std::string WhyNotPlacedByRoot(const std::string& socket_path, uid_t daemon) {
  std::error_code ec;
  std::filesystem::path socket = std::filesystem::absolute(socket_path, ec);
  std::filesystem::path dir = std::filesystem::canonical(socket.parent_path(), ec);
  struct stat d {
  }, p{};
  if (ec || ::stat(dir.c_str(), &d) != 0) {
    return fmt::format("its directory cannot be examined ({})",
                       ec ? ec.message() : std::strerror(errno));
  }
  if (d.st_uid != daemon) {
    return fmt::format("its directory {} is not its own (it belongs to {})", dir.string(),
                       DescribeUser(d.st_uid));
  }
  std::filesystem::path parent = dir.parent_path();
  if (::stat(parent.c_str(), &p) != 0) {
    return fmt::format("the directory above its own, {}, cannot be examined ({})", parent.string(),
                       std::strerror(errno));
  }
  if (p.st_uid != 0 || (p.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return fmt::format(
        "its directory {} lies in {} (owned by {}, mode {:04o}), where users other than root "
        "may make directories",
        dir.string(), parent.string(), DescribeUser(p.st_uid), p.st_mode & 07777);
  }
  return "";
}

}  // namespace

Status TrustDaemon(const std::string& socket_path, uid_t daemon, uid_t self,
                   std::optional<uid_t> named) {
  if (daemon == self || daemon == 0 || named == daemon) return Status::OK();
  std::string why = WhyNotPlacedByRoot(socket_path, daemon);
  if (why.empty()) return Status::OK();
  return Status::PermissionDenied(fmt::format(
      "refusing the depotd at {}: it runs as {}, which is neither you ({}) nor root, and {}; "
      "another user could have placed it there to receive your data. If you trust {} to serve "
      "you, name it: DEPOT_DAEMON_UID={} (ConnectOptions::trusted_daemon_uid, depotctl "
      "--daemon-uid, depot.Client(daemon_uid=...) in Python)",
      socket_path, DescribeUser(daemon), DescribeUser(self), why, DescribeUser(daemon), daemon));
}

Status CheckDaemon(int fd, const std::string& socket_path, std::optional<uid_t> named) {
  auto cred = PeerCredentialsOf(fd);
  if (!cred.ok()) {
    return Status::PermissionDenied(
        fmt::format("refusing the depotd at {}: {}", socket_path, cred.status().message()));
  }
  return TrustDaemon(socket_path, cred->uid, ::geteuid(), named);
}

Result<std::optional<uid_t>> NamedDaemonUid(std::optional<uid_t> option) {
  if (option) return option;
  const char* env = std::getenv("DEPOT_DAEMON_UID");
  if (env == nullptr || *env == '\0') return std::optional<uid_t>();
  std::string_view text(env);
  uid_t uid = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), uid);
  if (ec != std::errc() || end != text.data() + text.size() || uid == static_cast<uid_t>(-1)) {
    return Status::InvalidArgument(fmt::format(
        "DEPOT_DAEMON_UID={} is not a uid (a number, such as `id -u depot` prints)", text));
  }
  return std::optional<uid_t>(uid);
}

}  // namespace depot::internal
