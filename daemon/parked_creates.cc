#include "daemon/parked_creates.h"

#include <fmt/format.h>

#include "depot/units.h"

namespace depot {

Status ParkedCreates::Admit(SessionId session, uid_t uid, uint64_t bytes) {
  Parked held;
  if (auto it = per_session_.find(session); it != per_session_.end()) held = it->second;
  if (held.creates >= limits_.per_session) {
    return Status::QuotaExceeded(fmt::format(
        "this connection already has {} creates waiting for objects to be written to disk, its "
        "limit (max_pending)",
        held.creates));
  }
  if (held.bytes + bytes > limits_.bytes_per_session) {
    return Status::QuotaExceeded(fmt::format(
        "this connection's creates waiting for objects to be written to disk hold {}, and this "
        "one {} more: over its limit of {} (max_pending_bytes)",
        FormatBytes(held.bytes), FormatBytes(bytes), FormatBytes(limits_.bytes_per_session)));
  }
  auto user = per_user_.find(uid);
  uint64_t by_user = user == per_user_.end() ? 0 : user->second;
  if (by_user + bytes > limits_.bytes_per_user) {
    return Status::QuotaExceeded(fmt::format(
        "the creates of user {} waiting for objects to be written to disk hold {}, and this one "
        "{} more: over the limit of {} (max_parked_bytes_per_user)",
        uid, FormatBytes(by_user), FormatBytes(bytes), FormatBytes(limits_.bytes_per_user)));
  }
  Parked& p = per_session_[session];
  ++p.creates;
  p.bytes += bytes;
  per_user_[uid] += bytes;
  bytes_ += bytes;
  return Status::OK();
}

void ParkedCreates::Release(SessionId session, uid_t uid, uint64_t bytes) {
  if (auto it = per_session_.find(session); it != per_session_.end()) {
    it->second.bytes -= bytes;
    if (--it->second.creates == 0) per_session_.erase(it);
  }
  if (auto it = per_user_.find(uid); it != per_user_.end() && (it->second -= bytes) == 0) {
    per_user_.erase(it);
  }
  bytes_ -= bytes;
}

}  // namespace depot
