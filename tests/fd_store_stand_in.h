// A stand-in for systemd's file descriptor store, as much of it as depotd uses (for the tests
// and benchmarks of memory kept across restarts, which cannot have a systemd as PID 1): it listens
// on the socket NOTIFY_SOCKET names, keeps what FDSTORE=1 hands it under its FDNAME, drops what
// FDSTOREREMOVE=1 names, and passes what it kept to a child about to exec the next depotd as
// systemd does (LISTEN_FDS, LISTEN_FDNAMES, LISTEN_PID). scripts/systemd-check runs the real one.
#ifndef DEPOT_TESTS_FD_STORE_STAND_IN_H_
#define DEPOT_TESTS_FD_STORE_STAND_IN_H_

#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/unique_fd.h"
#include "proto/fd_passing.h"

namespace depot::test {

// systemd's descriptor store, as much of it as depotd uses.
class FdStoreStandIn {
 public:
  explicit FdStoreStandIn(const std::string& path) : path_(path) {
    fd_ = UniqueFd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    if (::bind(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      throw std::runtime_error("cannot bind " + path + ": " + std::strerror(errno));
    }
    // As systemd does, it reads notifications as they come: a datagram socket holds only a few
    // (net.unix.max_dgram_qlen), and a daemon whose notifications are not read blocks in sendmsg.
    reader_ = std::thread([this] {
      while (!stop_) Read(std::chrono::milliseconds(20));
    });
  }
  ~FdStoreStandIn() {
    stop_ = true;
    reader_.join();
  }
  FdStoreStandIn(const FdStoreStandIn&) = delete;
  FdStoreStandIn& operator=(const FdStoreStandIn&) = delete;
  const std::string& path() const { return path_; }

  // Waits `wait` for notifications in flight, then until every one sent is read.
  void Drain(std::chrono::milliseconds wait = std::chrono::milliseconds(0)) {
    std::this_thread::sleep_for(wait);
    for (int i = 0; i < 500; ++i) {
      int queued = 0;
      if (::ioctl(fd_.get(), FIONREAD, &queued) == 0 && queued == 0 && !reading_) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the last one handled
  }

  // Forgets everything kept, as systemd does when the service stops with no restart queued.
  void Clear() {
    std::lock_guard<std::mutex> hold(mutex_);
    kept_.clear();
  }

  // The descriptors kept under names starting with `prefix`.
  size_t Count(const std::string& prefix) const {
    std::lock_guard<std::mutex> hold(mutex_);
    return std::count_if(kept_.begin(), kept_.end(),
                         [&](const auto& k) { return k.first.starts_with(prefix); });
  }
  // The names of the descriptors kept under names starting with `prefix`.
  std::vector<std::string> Names(const std::string& prefix) const {
    std::lock_guard<std::mutex> hold(mutex_);
    std::vector<std::string> names;
    for (const auto& k : kept_) {
      if (k.first.starts_with(prefix)) names.push_back(k.first);
    }
    return names;
  }
  // A copy of the descriptor of the one entry named `prefix`... (invalid when none): the
  // caller's own, which a removal the reader handles later does not close under it.
  UniqueFd Dup(const std::string& prefix) const {
    std::lock_guard<std::mutex> hold(mutex_);
    for (const auto& k : kept_)
      if (k.first.starts_with(prefix)) return UniqueFd(::fcntl(k.second.get(), F_DUPFD_CLOEXEC, 0));
    return UniqueFd();
  }

  // In a child about to exec depotd: passes every kept descriptor as systemd does. Takes no lock
  // (a forked child must not): called once the last daemon is gone and its notifications read.
  void PassToChild() const {
    if (kept_.empty()) return;  // as systemd, which sets nothing then
    std::vector<int> high;
    std::string names;
    for (const auto& [name, fd] : kept_) {
      high.push_back(::fcntl(fd.get(), F_DUPFD_CLOEXEC, 1000));
      names += (names.empty() ? "" : ":") + name;
    }
    for (size_t i = 0; i < high.size(); ++i) ::dup2(high[i], 3 + static_cast<int>(i));
    ::setenv("LISTEN_FDS", std::to_string(high.size()).c_str(), 1);
    ::setenv("LISTEN_FDNAMES", names.c_str(), 1);
    ::setenv("LISTEN_PID", std::to_string(::getpid()).c_str(), 1);
  }

 private:
  // Reads and handles every notification waiting (up to `wait` for the first).
  void Read(std::chrono::milliseconds wait) {
    while (true) {
      pollfd p{fd_.get(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0) return;
      wait = std::chrono::milliseconds(0);
      reading_ = true;
      std::lock_guard<std::mutex> hold(mutex_);
      uint8_t text[4096];
      std::vector<UniqueFd> fds;
      ssize_t n = proto::RecvWithFds(fd_.get(), text, fds, 0);
      reading_ = false;
      if (n <= 0) return;
      std::map<std::string, std::string> fields;
      std::istringstream lines(std::string(reinterpret_cast<char*>(text), static_cast<size_t>(n)));
      for (std::string l; std::getline(lines, l);) {
        auto eq = l.find('=');
        if (eq != std::string::npos) fields[l.substr(0, eq)] = l.substr(eq + 1);
      }
      if (fields["FDSTORE"] == "1") {
        for (auto& fd : fds) kept_.emplace_back(fields["FDNAME"], std::move(fd));
      } else if (fields["FDSTOREREMOVE"] == "1") {
        std::erase_if(kept_, [&](const auto& k) { return k.first == fields["FDNAME"]; });
      }
    }
  }

 private:
  std::string path_;
  UniqueFd fd_;
  std::vector<std::pair<std::string, UniqueFd>> kept_;
  mutable std::mutex mutex_;  // kept_, between the reader and the callers
  std::atomic<bool> reading_{false};
  std::atomic<bool> stop_{false};
  std::thread reader_;  // last: started once the rest exists
};

}  // namespace depot::test

#endif  // DEPOT_TESTS_FD_STORE_STAND_IN_H_
