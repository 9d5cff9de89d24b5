#include "daemon/user_cap.h"

#include <fmt/format.h>

#include <algorithm>

namespace depot {

Status UserCap::Take(uid_t uid) {
  auto it = held_.find(uid);
  uint64_t held = it == held_.end() ? 0 : it->second;
  if (held >= per_user_) {
    ++refused_;
    return Status::QuotaExceeded(
        fmt::format("user {} already has {} {}, its limit ({})", uid, held, what_, key_));
  }
  ++held_[uid];
  return Status::OK();
}

void UserCap::Give(uid_t uid, uint64_t n) {
  auto it = held_.find(uid);
  if (it == held_.end()) return;
  it->second -= std::min(n, it->second);
  if (it->second == 0) held_.erase(it);
}

uint64_t UserCap::top_user() const {
  uint64_t top = 0;
  for (const auto& [uid, held] : held_) top = std::max(top, held);
  return top;
}

}  // namespace depot
