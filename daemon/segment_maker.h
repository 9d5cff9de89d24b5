// SegmentMaker makes host segments (sealed memfds, see SealedMemfd) on a helper thread of its
// own, so that a pool can grow ahead of need without the loop waiting while the kernel reserves
// and zeroes a segment's pages. Each result is posted back to the loop, where the pool that asked
// adopts it or lets it go.
//
// Thread contract: Make is called on the loop; the jobs run, one at a time, on the helper thread;
// `done` runs on the loop (through the `post` given at construction). The destructor joins the
// thread, after the job in progress; jobs not started are dropped, their `done` never called.
#ifndef DEPOT_DAEMON_SEGMENT_MAKER_H_
#define DEPOT_DAEMON_SEGMENT_MAKER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "daemon/segment_source.h"

namespace depot {

class SegmentMaker {
 public:
  // Runs a function on the daemon's loop (boost::asio::post on its io_context).
  using PostFn = std::function<void(std::function<void()>)>;
  using DoneFn = std::function<void(Result<SegmentMemory>)>;

  explicit SegmentMaker(PostFn post);
  ~SegmentMaker();
  SegmentMaker(const SegmentMaker&) = delete;
  SegmentMaker& operator=(const SegmentMaker&) = delete;

  // Makes a segment named `name` of `size` bytes (on huge pages where the kernel gives them,
  // when `huge`); `done` gets it, or the error, on the loop.
  void Make(std::string name, uint64_t size, DoneFn done, bool huge = false);

 private:
  struct Job {
    std::string name;
    uint64_t size;
    DoneFn done;
    bool huge = false;
  };
  void Run();

  PostFn post_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Job> jobs_;  // guarded by mu_
  bool stop_ = false;     // guarded by mu_
  std::thread thread_;    // last: started once everything it reads exists
};

}  // namespace depot

#endif  // DEPOT_DAEMON_SEGMENT_MAKER_H_
