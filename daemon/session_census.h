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
// The next depotd reads the word (Complete) and, when it is zero, waits for each session a kept
// ring names (Watch) until its process has exited (a pidfd) or has said, from a connection of
// the same pid and uid, that it is done with that session (Resumed: its library holds again all
// it maps and writes nowhere the last daemon gave it); once no session is left, no client maps
// the last daemon's memory any more unheld, or writes where it had a lease or a draft. A census
// missing (an older daemon) or not zero, a pid of 0 (a process in another pid namespace, or an
// older daemon's ring) or a pidfd that cannot be opened: the grace period runs its course. A pid
// reused by another process meanwhile is waited for like the one it replaced: the wait is longer,
// never shorter. A process can end the wait early only for its own sessions, whose memory only
// it and its user's other processes could write.
//
// Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_SESSION_CENSUS_H_
#define DEPOT_DAEMON_SESSION_CENSUS_H_

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
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

  // This daemon's census, kept in `store` with `word` in it: call once the last daemon's is read
  // and forgotten.
  void Start(FdStore& store, uint64_t word);
  // How many greeted sessions have no kept ring now.
  void Unkept(uint64_t sessions);

  // Whether the last daemon's census, passed back under kName, is complete: it counts no session
  // without a kept ring.
  static bool Complete(const UniqueFd& census);

  // A session of the last daemon's, as its kept ring names it.
  struct Kept {
    uint64_t session = 0;
    int32_t pid = 0;  // 0: not known here
    uint32_t uid = 0;
  };
  // Calls `done` on the loop, with why, once every one of `sessions` is done: its process exited
  // or said it resumed (at once when none is left); never when one cannot be watched.
  void Watch(const std::vector<Kept>& sessions, std::function<void(const std::string&)> done);
  // Process `pid` of `uid` says it is done with `session` of the last daemon: whether that was
  // one waited for, and its.
  bool Resumed(uint64_t session, int32_t pid, uint32_t uid);
  // The grace period ended otherwise (its time ran out): nothing is waited for any more.
  void StopWatching();
  // The sessions still waited for, and those resumed so far.
  size_t waiting() const { return waiting_.size(); }
  size_t resumed() const { return resumed_; }

 private:
  // `pid` exited: its sessions are done.
  void Exited(int32_t pid);
  // Calls done_ once nothing is waited for.
  void MaybeDone();

  boost::asio::io_context& io_;
  UniqueFd fd_;
  std::atomic<uint64_t>* word_ = nullptr;  // in fd_'s mapping
  std::map<uint64_t, Kept> waiting_;       // by session
  std::map<int32_t, std::unique_ptr<boost::asio::posix::stream_descriptor>> pidfds_;
  size_t exited_ = 0, resumed_ = 0;  // sessions done each way
  std::function<void(const std::string&)> done_;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_SESSION_CENSUS_H_
