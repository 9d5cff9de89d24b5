#include "daemon/systemd.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace depot {
namespace {

// What every error about a passed socket ends with: where the socket comes from and the fix.
constexpr const char* kSocketUnitHint =
    "give depotd.socket exactly one ListenStream= line naming a filesystem path (for example "
    "ListenStream=/run/depot/depot.sock) and Accept=no";

// The filesystem path a passed Unix socket is bound to. Socket activation hands over an fd, not
// a path, but the lock file, the segment names and the status all need the path.
Result<std::string> BoundPath(int fd) {
  sockaddr_un addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return Status::InvalidArgument(
        fmt::format("cannot read the address of the socket systemd passed (fd {}): {}", fd,
                    std::strerror(errno)));
  }
  size_t path_len =
      len > offsetof(sockaddr_un, sun_path) ? len - offsetof(sockaddr_un, sun_path) : 0;
  if (path_len == 0 || addr.sun_path[0] == '\0') {
    return Status::InvalidArgument(fmt::format(
        "the socket systemd passed (fd {}) is {} but depotd needs a socket file (its lock file "
        "and segment names derive from the path); {}",
        fd, path_len == 0 ? "unnamed" : "in the abstract namespace", kSocketUnitHint));
  }
  return std::string(addr.sun_path, ::strnlen(addr.sun_path, path_len));
}

// Sends one notification; the caller's message says what the daemon is doing.
void Notify(const std::string& message) {
  int r = ::sd_notify(0, message.c_str());
  if (r < 0) spdlog::debug("sd_notify({}) failed: {}", message, std::strerror(-r));
}

// STATUS= takes one line: a newline would start another assignment.
std::string OneLine(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

}  // namespace

Result<Passed> TakePassed() {
  // unset_environment = 1: the LISTEN_* variables describe this process only.
  char** names = nullptr;
  int n = ::sd_listen_fds_with_names(1, &names);
  if (n < 0) {
    return Status::InvalidArgument(fmt::format(
        "cannot read the sockets passed by systemd (LISTEN_FDS, LISTEN_PID): {}; unset them to "
        "let depotd bind its socket itself",
        std::strerror(-n)));
  }
  Passed passed;
  // Owned from here on, so that every early return closes what was passed.
  std::vector<UniqueFd> sockets;
  for (int i = 0; i < n; ++i) {
    std::string name = names != nullptr && names[i] != nullptr ? names[i] : "";
    UniqueFd fd(SD_LISTEN_FDS_START + i);
    if (name.starts_with("depot.")) {
      passed.kept.push_back({std::move(name), std::move(fd)});
    } else {
      sockets.push_back(std::move(fd));
    }
  }
  if (names != nullptr) {
    for (int i = 0; i < n; ++i) std::free(names[i]);
    std::free(names);
  }
  if (sockets.empty()) return passed;
  if (sockets.size() > 1) {
    return Status::InvalidArgument(fmt::format(
        "systemd passed {} sockets but depotd serves one; {}", sockets.size(), kSocketUnitHint));
  }
  int fd = sockets[0].get();
  int r = ::sd_is_socket_unix(fd, SOCK_STREAM, /*listening=*/1, nullptr, 0);
  if (r < 0) {
    return Status::InvalidArgument(
        fmt::format("cannot inspect the socket systemd passed (fd {}): {}", fd, std::strerror(-r)));
  }
  if (r == 0) {
    return Status::InvalidArgument(
        fmt::format("the socket systemd passed (fd {}) is not a listening Unix stream socket; {}",
                    fd, kSocketUnitHint));
  }
  auto path = BoundPath(fd);
  if (!path.ok()) return path.status();
  passed.socket = PassedSocket{std::move(sockets[0]), std::move(*path)};
  return passed;
}

void NotifyReady(const std::string& status) { Notify("READY=1\nSTATUS=" + OneLine(status)); }

void NotifyStatus(const std::string& status) { Notify("STATUS=" + OneLine(status)); }

void NotifyStopping() { Notify("STOPPING=1\nSTATUS=stopping"); }

}  // namespace depot
