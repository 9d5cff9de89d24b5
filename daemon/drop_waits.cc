#include "daemon/drop_waits.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <utility>
#include <vector>

namespace depot {

void DropWaits::Add(const Namespace* ns, std::function<void(bool dropped)> then) {
  waiters_.push_back({ns, std::chrono::steady_clock::now() + kWait, std::move(then)});
  if (waiters_.size() == 1) Arm();
}

void DropWaits::Dropped() {
  if (waiters_.empty()) return;
  for (Waiter& w : waiters_) w.dropped = true;
  if (run_posted_) return;
  run_posted_ = true;
  boost::asio::post(io_, [this] {
    run_posted_ = false;
    Run();
  });
}

void DropWaits::Forget(const Namespace* ns) {
  std::erase_if(waiters_, [ns](const Waiter& w) { return w.ns == ns; });
}

bool DropWaits::Waiting(const Namespace* ns) const {
  return std::any_of(waiters_.begin(), waiters_.end(),
                     [ns](const Waiter& w) { return w.ns == ns; });
}

void DropWaits::Arm() {
  timer_.expires_at(waiters_.front().until);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    Run();
    if (!waiters_.empty()) Arm();
  });
}

void DropWaits::Run() {
  auto now = std::chrono::steady_clock::now();
  std::vector<std::pair<std::function<void(bool)>, bool>> due;
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (!it->dropped && it->until > now) {
      ++it;
      continue;
    }
    due.emplace_back(std::move(it->then), it->dropped);
    it = waiters_.erase(it);
  }
  for (auto& [then, dropped] : due) then(dropped);
}

}  // namespace depot
