#include "common/unix_socket.h"

#include <fmt/format.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>

namespace depot {

UniqueFd ConnectUnix(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) {
    errno = ENAMETOOLONG;
    return UniqueFd();
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return fd;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return UniqueFd();
  return fd;
}

Result<ucred> PeerCredentialsOf(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return Status::Unavailable(
        fmt::format("cannot read the peer's credentials (SO_PEERCRED): {}", std::strerror(errno)));
  }
  if (len != sizeof cred) {
    return Status::Unavailable("cannot read the peer's credentials (SO_PEERCRED): short answer");
  }
  return cred;
}

}  // namespace depot
