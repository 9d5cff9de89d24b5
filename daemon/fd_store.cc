#include "daemon/fd_store.h"

#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace depot {

FdStore::FdStore(bool wanted) {
  const char* notify = std::getenv("NOTIFY_SOCKET");
  on_ = wanted && notify != nullptr && *notify != '\0';
  if (const char* max = std::getenv("FDSTORE"); on_ && max != nullptr) {
    limit_ = std::min<uint64_t>(limit_, std::strtoull(max, nullptr, 10));
  }
}

bool FdStore::Keep(const std::string& name, int fd) {
  if (!on_) return false;
  if ((stored_.size() >= limit_ || name_bytes_ + name.size() + 1 > kMaxNameBytes) &&
      !stored_.contains(name)) {
    if (!warned_) {
      warned_ = true;
      spdlog::warn(
          "{} descriptors ({} bytes of names) are in systemd's store, as much as depotd keeps "
          "there: {} and the segments and rings made after it are lost at a restart (their "
          "objects are not)",
          stored_.size(), name_bytes_, name);
    }
    return false;
  }
  std::string message = "FDSTORE=1\nFDNAME=" + name;
  int r = ::sd_pid_notify_with_fds(0, 0, message.c_str(), &fd, 1);
  if (r <= 0) {
    spdlog::warn("cannot hand {} to systemd's descriptor store: {}; it is lost at a restart", name,
                 r < 0 ? std::strerror(-r) : "no service manager listens");
    return false;
  }
  if (stored_.insert(name).second) name_bytes_ += name.size() + 1;
  return true;
}

void FdStore::Forget(const std::string& name) {
  if (!on_ || stored_.erase(name) == 0) return;
  name_bytes_ -= name.size() + 1;
  std::string message = "FDSTOREREMOVE=1\nFDNAME=" + name;
  ::sd_pid_notify(0, 0, message.c_str());
}

}  // namespace depot
