// DropWaits holds the restores from disk that found no memory while clients still map retired
// segments (SegmentedPool: a segment given back stays counted until each client that mapped it
// says it unmapped it). Those bytes come back within a round trip of each client that reads its
// socket, the getter waiting for the restore included, so a restore waits for them as it waits
// for the disk: each waiter runs once, at the next segment let go (with true) or after kWait
// (with false), whichever comes first. A client that never reads holds its segments until it
// goes; kWait bounds what that costs a restore. A waiter stays here until it runs, so that its
// namespace counts as busy (SpillStore::Busy) and is not dropped under it.
//
// Not thread-safe: the daemon's single loop owns it; its timer fires on that loop.
#ifndef DEPOT_DAEMON_DROP_WAITS_H_
#define DEPOT_DAEMON_DROP_WAITS_H_

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <functional>

namespace depot {

class Namespace;

class DropWaits {
 public:
  static constexpr std::chrono::milliseconds kWait{250};

  explicit DropWaits(boost::asio::io_context& io) : io_(io), timer_(io) {}

  // Runs `then(dropped)` on the loop, later: see the class comment. `ns` is the waiter's
  // namespace, for Forget.
  void Add(const Namespace* ns, std::function<void(bool dropped)> then);
  // A retired segment was let go by the last client that mapped it: every waiter runs, soon (not
  // inside the call that let the segment go).
  void Dropped();
  // `ns` goes: its waiters never run.
  void Forget(const Namespace* ns);
  bool Waiting(const Namespace* ns) const;

 private:
  struct Waiter {
    const Namespace* ns;
    std::chrono::steady_clock::time_point until;
    std::function<void(bool)> then;
    bool dropped = false;
  };
  void Arm();  // the timer, for the oldest waiter
  void Run();  // runs the waiters that are due: a segment was let go, or their time is up

  boost::asio::io_context& io_;
  boost::asio::steady_timer timer_;
  std::deque<Waiter> waiters_;  // oldest first: each waits kWait from its Add
  bool run_posted_ = false;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_DROP_WAITS_H_
