#include "daemon/fd_store.h"

#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include <cstdlib>
#include <cstring>

namespace depot {

FdStore::FdStore(bool wanted) {
  const char* notify = std::getenv("NOTIFY_SOCKET");
  on_ = wanted && notify != nullptr && *notify != '\0';
  if (const char* max = std::getenv("FDSTORE"); on_ && max != nullptr) {
    limit_ = std::strtoull(max, nullptr, 10);
  }
}

void FdStore::Keep(const std::string& name, int fd) {
  if (!on_) return;
  std::string message = "FDSTORE=1\nFDNAME=" + name;
  int r = ::sd_pid_notify_with_fds(0, 0, message.c_str(), &fd, 1);
  if (r <= 0) {
    spdlog::warn("cannot hand {} to systemd's descriptor store: {}; it is lost at a restart", name,
                 r < 0 ? std::strerror(-r) : "no service manager listens");
    return;
  }
  ++stored_;
  if (limit_ && stored_ > *limit_ && !warned_) {
    warned_ = true;
    spdlog::warn(
        "{} descriptors kept in systemd's store, which takes {} (FileDescriptorStoreMax=): "
        "segments past that are lost at a restart; raise FileDescriptorStoreMax= in depotd.service",
        stored_, *limit_);
  }
}

void FdStore::Forget(const std::string& name) {
  if (!on_) return;
  std::string message = "FDSTOREREMOVE=1\nFDNAME=" + name;
  if (::sd_pid_notify(0, 0, message.c_str()) > 0 && stored_ > 0) --stored_;
}

}  // namespace depot
