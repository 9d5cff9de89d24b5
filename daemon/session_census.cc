#include "daemon/session_census.h"

#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>

namespace depot {

SessionCensus::~SessionCensus() {
  if (word_ != nullptr) ::munmap(word_, sizeof(*word_));
}

void SessionCensus::Start(FdStore& store) {
  if (!store.on() || fd_.valid()) return;
  UniqueFd fd(::memfd_create("depot-sessions", MFD_CLOEXEC));
  void* p = MAP_FAILED;
  if (fd.valid() && ::ftruncate(fd.get(), sizeof(*word_)) == 0) {
    p = ::mmap(nullptr, sizeof(*word_), PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  }
  if (p == MAP_FAILED) {
    // Without it the next daemon runs its grace period to the end: nothing is at risk.
    spdlog::warn("kept memory: no census of sessions: {}", std::strerror(errno));
    return;
  }
  word_ = new (p) std::atomic<uint64_t>(0);
  fd_ = std::move(fd);
  store.Keep(kName, fd_.get());
}

void SessionCensus::Unkept(uint64_t sessions) {
  if (word_ != nullptr) word_->store(sessions, std::memory_order_seq_cst);
}

bool SessionCensus::Complete(const UniqueFd& census) {
  uint64_t word = 1;
  struct stat st {};
  return ::fstat(census.get(), &st) == 0 && st.st_size == sizeof(word) &&
         ::pread(census.get(), &word, sizeof(word), 0) == sizeof(word) && word == 0;
}

void SessionCensus::Watch(const std::set<int32_t>& pids, std::function<void()> all_gone) {
  all_gone_ = std::move(all_gone);
  std::vector<UniqueFd> fds;
  for (int32_t pid : pids) {
    UniqueFd fd(pid > 0 ? static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)) : -1);
    if (fd.valid()) {
      fds.push_back(std::move(fd));
    } else if (pid <= 0 || errno != ESRCH) {  // alive, or none can tell: the period runs out
      spdlog::info("kept memory: process {} cannot be watched ({}): the grace period runs out", pid,
                   pid > 0 ? std::strerror(errno) : "its pid is not known here");
      return;
    }
  }
  alive_ = fds.size();
  if (alive_ == 0) {
    boost::asio::post(io_, [this] { all_gone_(); });
    return;
  }
  for (UniqueFd& fd : fds) {
    auto& d = watched_.emplace_back(
        std::make_unique<boost::asio::posix::stream_descriptor>(io_, fd.release()));
    d->async_wait(boost::asio::posix::stream_descriptor::wait_read,
                  [this](const boost::system::error_code& ec) {
                    if (!ec) Gone();
                  });
  }
}

void SessionCensus::Gone() {
  if (alive_ > 0 && --alive_ == 0) {
    watched_.clear();
    all_gone_();
  }
}

}  // namespace depot
