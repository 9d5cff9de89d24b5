// internal::ReleaseBatcher sends the releases of dropped Objects. A release waits here a moment
// so that it rides with the next request (one write, one wake of the daemon); a flusher thread,
// started with the first release, sends what still waits after kReleaseDelay, and a long queue
// is sent at once. Releases that wait when the batcher goes are not sent: the connection is
// closing, and the daemon drops a closed connection's references. In a child forked since it
// was made, the batcher goes without touching its lock or its flusher, which are the parent's.
//
// Thread-safe.
#ifndef DEPOT_CLIENT_SRC_RELEASE_BATCHER_H_
#define DEPOT_CLIENT_SRC_RELEASE_BATCHER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "client/src/channel.h"
#include "common/fork_generation.h"
#include "depot/guid.h"

namespace depot::internal {

class ReleaseBatcher {
 public:
  // Sends on `channel`, which must outlive the batcher.
  explicit ReleaseBatcher(Channel& channel) : channel_(channel) {}
  ~ReleaseBatcher();  // stops the flusher
  ReleaseBatcher(const ReleaseBatcher&) = delete;
  ReleaseBatcher& operator=(const ReleaseBatcher&) = delete;

  // Releases the reference `handle` names, soon.
  void Queue(uint64_t handle);
  // Releases the reference on `guid` that the daemon took for a put this process got from its
  // put ring (see PutRing::Hold), soon.
  void QueueGuid(const Guid& guid);
  // The waiting releases as one encoded message, to send ahead of a request; empty when none
  // wait.
  std::vector<uint8_t> Take();

 private:
  std::vector<uint8_t> TakeLocked();              // Take, with mu_ held
  void Queued(std::unique_lock<std::mutex>& lk);  // after a release was queued: sends or wakes
  void Flush();                                   // the flusher thread

  Channel& channel_;
  ForkMark made_;
  std::mutex mu_;
  ParentOwned<std::condition_variable> cv_;
  std::vector<uint64_t> releases_;
  std::vector<wire::Guid> guids_;
  std::chrono::steady_clock::time_point oldest_;
  bool stopping_ = false;
  bool flusher_idle_ = false;  // waiting for a release, with no deadline
  std::thread flusher_;        // started with the first release
};

}  // namespace depot::internal

#endif  // DEPOT_CLIENT_SRC_RELEASE_BATCHER_H_
