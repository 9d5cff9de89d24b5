#include "daemon/device_watch.h"

#include <algorithm>

namespace depot {

DeviceWatch::DeviceWatch(DeviceBackend& backend, Post post, Found found)
    : backend_(backend), post_(std::move(post)), found_(std::move(found)) {}

DeviceWatch::~DeviceWatch() {
  *alive_ = false;
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DeviceWatch::Start() {
  std::unique_lock lk(mu_);
  if (running_ || stopping_) return;
  lk.unlock();
  if (thread_.joinable()) thread_.join();  // ended after it found GPUs: nothing left to wait for
  lk.lock();
  running_ = true;
  thread_ = std::thread([this] { Run(); });
}

void DeviceWatch::LookNow() {
  {
    std::lock_guard lk(mu_);
    asked_ = true;
  }
  cv_.notify_all();
  Start();
}

void DeviceWatch::Run() {
  auto wait = kFirstWait;
  std::unique_lock lk(mu_);
  while (!stopping_) {
    cv_.wait_for(lk, wait, [&] { return stopping_ || asked_; });
    if (stopping_) break;
    bool asked = asked_;
    asked_ = false;
    lk.unlock();
    auto devices = backend_.Devices();
    bool found = devices.ok();
    if (found) {
      // Ended before the answer is posted, so that the loop, finding none of these GPUs usable,
      // can Start again; the backend is the loop's from here on.
      lk.lock();
      running_ = false;
      lk.unlock();
    }
    post_([alive = alive_, found_cb = found_, devices = std::move(devices), asked]() mutable {
      if (*alive) found_cb(std::move(devices), asked);
    });
    if (found) return;
    lk.lock();
    wait = std::min(wait * 2, kLongestWait);
  }
  running_ = false;
}

}  // namespace depot
