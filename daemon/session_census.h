// SessionCensus tells the next depotd which processes may still use this one's memory after a
// crash or a restart, so that its grace period (KeptMemory) can end as soon as none can:
//
//   - every greeted session's put ring is kept under a name that says its process's pid
//     (KeptMemory::KeepRing);
//   - a memfd of the census's own, kept as "depot.sessions", holds one word: how many greeted
//     sessions have no kept ring (none could be made, or the store's room for rings was used).
//     It is raised before such a session's hello is answered and lowered when the session
//     closes (not at a stop, which closes sessions whose processes carry on), so whatever
//     instruction a crash stops at, it counts every session without a ring that could map
//     anything.
//
// The next depotd reads the word (Complete) and, when it is zero, watches each process a kept ring
// names through a pidfd (Watch): once every one has exited, no client maps the last daemon's
// memory any more, or writes where it had a lease. A census missing (an older daemon) or not
// zero, a pid of 0 (a process in another pid namespace, or an older daemon's ring) or a pidfd that
// cannot be opened: the grace period runs its course. A pid reused by another process meanwhile
// is waited for like the one it replaced: the wait is longer, never shorter.
//
// Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_SESSION_CENSUS_H_
#define DEPOT_DAEMON_SESSION_CENSUS_H_

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <vector>

#include "common/unique_fd.h"
#include "daemon/fd_store.h"

namespace depot {

class SessionCensus {
 public:
  static constexpr const char* kName = "depot.sessions";

  explicit SessionCensus(boost::asio::io_context& io) : io_(io) {}
  ~SessionCensus();
  SessionCensus(const SessionCensus&) = delete;
  SessionCensus& operator=(const SessionCensus&) = delete;

  // This daemon's census, kept in `store`: call once the last daemon's is read and forgotten.
  void Start(FdStore& store);
  // How many greeted sessions have no kept ring now.
  void Unkept(uint64_t sessions);

  // Whether the last daemon's census, passed back under kName, is complete: it counts no session
  // without a kept ring.
  static bool Complete(const UniqueFd& census);

  // Calls `all_gone` on the loop once every process in `pids` has exited (at once when none is
  // alive); never when one cannot be watched.
  void Watch(const std::set<int32_t>& pids, std::function<void()> all_gone);

 private:
  void Gone();

  boost::asio::io_context& io_;
  UniqueFd fd_;
  std::atomic<uint64_t>* word_ = nullptr;  // in fd_'s mapping
  std::vector<std::unique_ptr<boost::asio::posix::stream_descriptor>> watched_;
  size_t alive_ = 0;
  std::function<void()> all_gone_;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_SESSION_CENSUS_H_
