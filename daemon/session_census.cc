#include "daemon/session_census.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>

namespace depot {

SessionCensus::~SessionCensus() {
  if (word_ != nullptr) ::munmap(word_, sizeof(*word_));
}

void SessionCensus::Start(FdStore& store, uint64_t word) {
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
  word_ = new (p) std::atomic<uint64_t>(word);
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

void SessionCensus::Watch(const std::vector<Kept>& sessions,
                          std::function<void(const std::string&)> done) {
  done_ = std::move(done);
  std::map<int32_t, UniqueFd> fds;
  for (const Kept& k : sessions) {
    if (fds.contains(k.pid)) continue;
    UniqueFd fd(k.pid > 0 ? static_cast<int>(::syscall(SYS_pidfd_open, k.pid, 0)) : -1);
    if (!fd.valid() && (k.pid <= 0 || errno != ESRCH)) {  // none can tell: the period runs out
      spdlog::info("kept memory: process {} cannot be watched ({}): the grace period runs out",
                   k.pid, k.pid > 0 ? std::strerror(errno) : "its pid is not known here");
      done_ = nullptr;
      return;
    }
    fds.emplace(k.pid, std::move(fd));
  }
  for (const Kept& k : sessions) {
    if (fds.at(k.pid).valid()) {
      waiting_[k.session] = k;
    } else {
      ++exited_;  // gone already
    }
  }
  for (auto& entry : fds) {
    int32_t pid = entry.first;  // a plain variable: a lambda cannot capture a structured binding
    if (!entry.second.valid()) continue;
    auto& d = pidfds_[pid] =
        std::make_unique<boost::asio::posix::stream_descriptor>(io_, entry.second.release());
    d->async_wait(boost::asio::posix::stream_descriptor::wait_read,
                  [this, pid](const boost::system::error_code& ec) {
                    if (!ec) Exited(pid);
                  });
  }
  // On the loop, as the other ways it ends, whatever the caller does next.
  boost::asio::post(io_, [this] { MaybeDone(); });
}

bool SessionCensus::Resumed(uint64_t session, int32_t pid, uint32_t uid) {
  auto it = waiting_.find(session);
  if (it == waiting_.end() || it->second.pid != pid || it->second.uid != uid) return false;
  waiting_.erase(it);
  ++resumed_;
  if (std::none_of(waiting_.begin(), waiting_.end(),
                   [pid](const auto& w) { return w.second.pid == pid; })) {
    pidfds_.erase(pid);  // its wait is cancelled: the handler sees operation_aborted
  }
  MaybeDone();
  return true;
}

void SessionCensus::StopWatching() {
  done_ = nullptr;
  waiting_.clear();
  pidfds_.clear();  // each wait is cancelled: its handler sees operation_aborted
}

void SessionCensus::Exited(int32_t pid) {
  exited_ += std::erase_if(waiting_, [pid](const auto& w) { return w.second.pid == pid; });
  pidfds_.erase(pid);
  MaybeDone();
}

void SessionCensus::MaybeDone() {
  if (!waiting_.empty() || !done_) return;
  auto done = std::move(done_);
  done_ = nullptr;
  pidfds_.clear();
  done(resumed_ == 0 ? std::string("every process connected to the last depotd exited")
                     : fmt::format("of the sessions connected to the last depotd, {} resumed and "
                                   "{} ended with their process",
                                   resumed_, exited_));
}

}  // namespace depot
