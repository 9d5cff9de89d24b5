#include "client/src/release_batcher.h"

namespace depot::internal {
namespace {

constexpr auto kReleaseDelay = std::chrono::milliseconds(1);
constexpr size_t kMaxWaitingReleases = 256;

}  // namespace

ReleaseBatcher::~ReleaseBatcher() {
  if (made_.forked()) {
    // The flusher is a thread of the parent's, which this process does not have: joining it
    // would wait forever. Only the std::thread object is let go.
    if (flusher_.joinable()) flusher_.detach();
    return;
  }
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_->notify_all();
  if (flusher_.joinable()) flusher_.join();
}

void ReleaseBatcher::Queue(uint64_t handle) {
  std::unique_lock lk(mu_);
  if (releases_.empty() && guids_.empty()) oldest_ = std::chrono::steady_clock::now();
  releases_.push_back(handle);
  Queued(lk);
}

void ReleaseBatcher::QueueGuid(const Guid& guid) {
  std::unique_lock lk(mu_);
  if (releases_.empty() && guids_.empty()) oldest_ = std::chrono::steady_clock::now();
  guids_.push_back(proto::ToWire(guid));
  Queued(lk);
}

void ReleaseBatcher::Queued(std::unique_lock<std::mutex>& lk) {
  std::vector<uint8_t> now;
  if (releases_.size() + guids_.size() >= kMaxWaitingReleases) now = TakeLocked();
  if (!flusher_.joinable()) flusher_ = std::thread([this] { Flush(); });
  // Only an idle flusher needs waking: a busy one already waits for the oldest release's time.
  bool wake = flusher_idle_;
  lk.unlock();
  if (wake) cv_->notify_one();
  if (!now.empty()) (void)channel_.Send(now);  // a broken connection released everything already
}

std::vector<uint8_t> ReleaseBatcher::Take() {
  std::lock_guard lk(mu_);
  return TakeLocked();
}

std::vector<uint8_t> ReleaseBatcher::TakeLocked() {
  if (releases_.empty() && guids_.empty()) return {};
  flatbuffers::FlatBufferBuilder fbb(64 + 8 * releases_.size() + 16 * guids_.size());
  auto handles = fbb.CreateVector(releases_);
  auto guids = fbb.CreateVectorOfStructs(guids_);
  fbb.Finish(wire::CreateReleaseRequest(fbb, handles, guids));
  releases_.clear();
  guids_.clear();
  return proto::Encode(static_cast<uint16_t>(proto::MsgType::kRelease), 0, fbb);
}

void ReleaseBatcher::Flush() {
  std::unique_lock lk(mu_);
  while (!stopping_) {
    if (releases_.empty() && guids_.empty()) {
      flusher_idle_ = true;
      cv_->wait(lk);
      flusher_idle_ = false;
      continue;
    }
    auto due = oldest_ + kReleaseDelay;
    if (std::chrono::steady_clock::now() < due) {
      cv_->wait_until(lk, due);
      continue;
    }
    std::vector<uint8_t> bytes = TakeLocked();
    lk.unlock();
    (void)channel_.Send(bytes);  // a broken connection released everything already
    lk.lock();
  }
}

}  // namespace depot::internal
