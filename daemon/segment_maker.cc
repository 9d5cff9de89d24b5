#include "daemon/segment_maker.h"

#include <memory>

#include "daemon/shm_source.h"

namespace depot {

SegmentMaker::SegmentMaker(PostFn post) : post_(std::move(post)), thread_([this] { Run(); }) {}

SegmentMaker::~SegmentMaker() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void SegmentMaker::Make(std::string name, uint64_t size, DoneFn done, bool huge) {
  {
    std::lock_guard lk(mu_);
    jobs_.push_back({std::move(name), size, std::move(done), huge});
  }
  wake_.notify_one();
}

void SegmentMaker::Run() {
  while (true) {
    Job job;
    {
      std::unique_lock lk(mu_);
      wake_.wait(lk, [this] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    // A posted function must be copyable; the memory (two descriptors) is not, so it travels
    // in a shared holder.
    auto made = std::make_shared<Result<SegmentMemory>>(
        SealedMemfd(job.name, job.size, std::nullopt, job.huge));
    post_([made, done = std::move(job.done)] { done(std::move(*made)); });
  }
}

}  // namespace depot
