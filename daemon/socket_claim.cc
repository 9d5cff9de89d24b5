#include "daemon/socket_claim.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/unix_socket.h"
#include "common/users.h"

namespace depot {
namespace {

std::string ModeText(mode_t mode) { return fmt::format("{:04o}", mode & 07777); }

// What a file system entry is, for messages.
std::string_view Kind(mode_t mode) {
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

// True when something accepts connections on `path` now.
bool SomeoneListens(const std::string& path) { return ConnectUnix(path).valid(); }

// Why depotd may not serve from the directory `dir`, whose status is `st`, or OK. Whoever may
// write in the socket's directory may replace the socket (and answer depotd's clients) or plant a
// link where depotd writes its lock file.
Status CheckDirectory(const std::string& dir, const struct stat& st) {
  uid_t me = ::geteuid();
  std::string whose = fmt::format("the socket directory {} (owned by {}, mode {})", dir,
                                  DescribeUser(st.st_uid), ModeText(st.st_mode));
  std::string fix = fmt::format(
      "serve from a directory of depotd's own user ({}) that nobody else may write: the default "
      "socket's, or one made with `mkdir -m 0700`",
      DescribeUser(me));
  if (st.st_uid != me && st.st_uid != 0) {
    return Status::PermissionDenied(fmt::format(
        "refusing to serve from {}: it belongs to another user, who may replace the socket and "
        "its lock file there (and may have made it first, to answer your clients); remove it "
        "(its owner or root can), or {}",
        whose, fix));
  }
  if ((st.st_mode & S_IWOTH) != 0) {
    return Status::PermissionDenied(fmt::format(
        "refusing to serve from {}: every user may write in it, and so replace the socket and "
        "its lock file; {}",
        whose, fix));
  }
  if ((st.st_mode & S_IWGRP) != 0 && st.st_gid != ::getegid()) {
    return Status::PermissionDenied(fmt::format(
        "refusing to serve from {}: its group (gid {}), which is not depotd's own, may write in "
        "it, and so replace the socket and its lock file; chmod g-w {}, or {}",
        whose, st.st_gid, dir, fix));
  }
  return Status::OK();
}

// Opens the socket's directory `dir` and checks it (CheckDirectory). A missing directory is made,
// mode 0700, with its missing parents: depotd's own from the start. A symbolic link is followed
// only when depotd's user or root made it.
Result<UniqueFd> OpenDirectory(const std::string& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) {
      return Status::Unavailable(
          fmt::format("cannot look at the socket directory {}: {}", dir, std::strerror(errno)));
    }
    std::error_code ec;
    std::filesystem::path parent = std::filesystem::path(dir).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    // EEXIST: someone made it since; it is checked below like any existing directory.
    if (ec || (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) ||
        ::lstat(dir.c_str(), &st) != 0) {
      return Status::Unavailable(fmt::format("cannot create the socket directory {}: {}", dir,
                                             ec ? ec.message() : std::strerror(errno)));
    }
  }
  if (S_ISLNK(st.st_mode) && st.st_uid != ::geteuid() && st.st_uid != 0) {
    return Status::PermissionDenied(fmt::format(
        "refusing to serve from {}: it is a symbolic link made by {}, and depotd follows no link "
        "another user made; remove it, or choose another --socket",
        dir, DescribeUser(st.st_uid)));
  }
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
    return Status::Unavailable(
        fmt::format("cannot open the socket directory {}: {}", dir, std::strerror(errno)));
  }
  if (Status checked = CheckDirectory(dir, st); !checked.ok()) return checked;
  return fd;
}

// Removes the socket file that a daemon which died left at `path`, in the directory `dir`. Only a
// socket of depotd's own user that nobody answers on goes; anything else stays, and is an error.
Status RemoveStaleSocket(int dir, const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  struct stat st {};
  if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return Status::OK();
    return Status::Unavailable(fmt::format("cannot look at {}: {}", path, std::strerror(errno)));
  }
  if (S_ISSOCK(st.st_mode) && SomeoneListens(path)) {
    return Status::Unavailable(fmt::format(
        "a live process answers on {}; stop it first or choose another --socket", path));
  }
  if (!S_ISSOCK(st.st_mode) || st.st_uid != ::geteuid()) {
    return Status::PermissionDenied(fmt::format(
        "{} is {} owned by {}, not a socket that depotd's user left: depotd replaces only a "
        "stale socket of its own; remove it if nothing needs it, or choose another --socket",
        path, Kind(st.st_mode), DescribeUser(st.st_uid)));
  }
  if (::unlinkat(dir, name.c_str(), 0) != 0) {
    return Status::Unavailable(
        fmt::format("cannot remove the stale socket {}: {}", path, std::strerror(errno)));
  }
  spdlog::info("replaced stale socket {}", path);
  return Status::OK();
}

}  // namespace

Result<SocketClaim> SocketClaim::Lock(const std::string& socket_path, UniqueFd& dir) {
  std::filesystem::path socket(socket_path);
  auto opened = OpenDirectory(socket.has_parent_path() ? socket.parent_path().string() : ".");
  if (!opened.ok()) return opened.status();
  dir = std::move(*opened);
  SocketClaim claim;
  claim.path_ = socket_path;
  std::string lock_path = socket_path + ".lock";
  std::string lock_name = socket.filename().string() + ".lock";
  // O_NOFOLLOW: a link planted here would make depotd truncate a file of someone's choosing.
  claim.lock_.reset(
      ::openat(dir.get(), lock_name.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!claim.lock_.valid()) {
    if (errno == ELOOP) {
      return Status::PermissionDenied(fmt::format(
          "the lock file {} is a symbolic link, and depotd follows no link it did not make; "
          "remove it (rm {})",
          lock_path, lock_path));
    }
    return Status::Unavailable(
        fmt::format("cannot open the lock file {}: {}", lock_path, std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(claim.lock_.get(), &st) != 0) {
    return Status::Unavailable(
        fmt::format("cannot look at the lock file {}: {}", lock_path, std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || st.st_nlink != 1) {
    return Status::PermissionDenied(fmt::format(
        "the lock file {} is {} owned by {} with {} link(s), not a plain file of depotd's own "
        "user ({}); remove it (rm {})",
        lock_path, Kind(st.st_mode), DescribeUser(st.st_uid), st.st_nlink,
        DescribeUser(::geteuid()), lock_path));
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
  UniqueFd dir;
  auto claim = Lock(socket_path, dir);
  if (!claim.ok()) return claim;
  if (Status st = RemoveStaleSocket(dir.get(), socket_path); !st.ok()) return st;
  return claim;
}

Result<SocketClaim> SocketClaim::Adopt(const std::string& socket_path, UniqueFd listening) {
  UniqueFd dir;
  auto claim = Lock(socket_path, dir);
  if (!claim.ok()) return claim;
  claim->passed_ = true;
  claim->listening_ = std::move(listening);
  return claim;
}

}  // namespace depot
