#include "daemon/segment_maker.h"

#include "daemon/shm_source.h"

namespace depot {

SegmentMaker::SegmentMaker(PostFn post) : post_(std::move(post)), thread_([this] { Serve(); }) {}

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
