// SegmentMaker makes shared memory on a helper thread of its own: host segments (sealed memfds,
// see SealedMemfd), so that a pool can grow ahead of need without the loop waiting while the
// kernel reserves and zeroes a segment's pages, and anything else whose making needs nothing of
// the loop's (Run: a bigger shared index). Each result is posted back to the loop, where whoever
// asked adopts it or lets it go.
//
// Thread contract: Make and Run are called on the loop; the jobs run, one at a time and in
// order, on the helper thread; `done` runs on the loop (through the `post` given at
// construction). The destructor joins the thread, after the job in progress; jobs not started
// are dropped, their `done` never called.
#ifndef DEPOT_DAEMON_SEGMENT_MAKER_H_
#define DEPOT_DAEMON_SEGMENT_MAKER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
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

  // Runs `work` on the helper thread; `done` gets what it returned, on the loop. `work` must
  // touch nothing the loop owns.
  template <typename T>
  void Run(std::function<T()> work, std::function<void(T)> done) {
    Enqueue([work = std::move(work), done = std::move(done)]() -> std::function<void()> {
      // A posted function must be copyable; T (descriptors, say) may not be, so it travels in a
      // shared holder.
      auto made = std::make_shared<T>(work());
      return [made, done] { done(std::move(*made)); };
    });
  }

 private:
  // Runs on the helper thread; returns what is posted to the loop.
  using Job = std::function<std::function<void()>()>;
  void Enqueue(Job job);
  void Serve();

  PostFn post_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Job> jobs_;  // guarded by mu_
  bool stop_ = false;     // guarded by mu_
  std::thread thread_;    // last: started once everything it reads exists
};

}  // namespace depot

#endif  // DEPOT_DAEMON_SEGMENT_MAKER_H_
