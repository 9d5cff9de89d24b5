#include "daemon/segment_maker.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "daemon/shm_source.h"

namespace depot {

SegmentMaker::SegmentMaker(PostFn post, int nicer)
    : post_(std::move(post)), nicer_(nicer), thread_([this] { Serve(); }) {}

SegmentMaker::~SegmentMaker() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void SegmentMaker::Make(std::string name, uint64_t size, DoneFn done, bool huge) {
  Run<Result<SegmentMemory>>(
      [name = std::move(name), size, huge] { return SealedMemfd(name, size, std::nullopt, huge); },
      std::move(done));
}

void SegmentMaker::Enqueue(Job job) {
  {
    std::lock_guard lk(mu_);
    jobs_.push_back(std::move(job));
  }
  wake_.notify_one();
}

void SegmentMaker::Serve() {
  if (nicer_ > 0) {
    // On Linux a thread's id names that thread alone here; a user may always make its threads
    // nicer. Left as it is when that fails: the jobs run all the same.
    auto tid = static_cast<id_t>(::gettid());
    errno = 0;
    int nice = ::getpriority(PRIO_PROCESS, tid);
    if (errno == 0) (void)::setpriority(PRIO_PROCESS, tid, std::min(19, nice + nicer_));
  }
  while (true) {
    Job job;
    {
      std::unique_lock lk(mu_);
      wake_.wait(lk, [this] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    post_(job());
  }
}

}  // namespace depot
