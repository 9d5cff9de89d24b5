#include "daemon/quota_ledger.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <string_view>

#include "depot/units.h"

namespace depot {
namespace {

// `who` names the holder, in the message only.
Status CheckOne(const Quota& q, const QuotaUsage& u, uint64_t bytes, const std::string& who,
                std::string_view key) {
  if (q.objects != 0 && u.objects + 1 > q.objects) {
    return Status::QuotaExceeded(
        fmt::format("{} has {} objects, its limit ({}_objects)", who, u.objects, key));
  }
  if (q.bytes != 0 && u.bytes + bytes > q.bytes) {
    return Status::QuotaExceeded(
        fmt::format("{} has {} in objects; {} more would pass its limit of {} ({}_bytes)", who,
                    FormatBytes(u.bytes), FormatBytes(bytes), FormatBytes(q.bytes), key));
  }
  return Status::OK();
}

}  // namespace

Status QuotaLedger::Check(uid_t uid, SessionId session, uint64_t bytes) const {
  if (user_.limited()) {
    auto it = users_.find(uid);
    Status st = CheckOne(user_, it == users_.end() ? QuotaUsage{} : it->second, bytes,
                         fmt::format("uid {}", uid), "user_quota");
    if (!st.ok()) return st;
  }
  if (!client_.limited()) return Status::OK();
  return CheckOne(client_, OfSession(session), bytes, "this connection", "client_quota");
}

void QuotaLedger::Charge(uid_t uid, SessionId session, uint64_t bytes) {
  for (QuotaUsage* u : {&users_[uid], &sessions_[session]}) {
    u->bytes += bytes;
    ++u->objects;
  }
}

void QuotaLedger::Credit(uid_t uid, SessionId session, uint64_t bytes) {
  auto forget = [bytes](QuotaUsage& u) {
    u.bytes -= std::min(u.bytes, bytes);
    u.objects -= std::min<uint64_t>(u.objects, 1);
  };
  if (auto it = users_.find(uid); it != users_.end()) forget(it->second);
  if (auto it = sessions_.find(session); it != sessions_.end()) forget(it->second);
}

void QuotaLedger::ChargeRestored(uid_t uid, uint64_t bytes) {
  QuotaUsage& u = users_[uid];
  u.bytes += bytes;
  ++u.objects;
}

void QuotaLedger::ChargeBytes(uid_t uid, SessionId session, uint64_t bytes) {
  users_[uid].bytes += bytes;
  sessions_[session].bytes += bytes;
}

void QuotaLedger::CreditBytes(uid_t uid, SessionId session, uint64_t bytes) {
  if (auto it = users_.find(uid); it != users_.end()) {
    it->second.bytes -= std::min(it->second.bytes, bytes);
  }
  if (auto it = sessions_.find(session); it != sessions_.end()) {
    it->second.bytes -= std::min(it->second.bytes, bytes);
  }
}

void QuotaLedger::CountObject(uid_t uid, SessionId session) {
  ++users_[uid].objects;
  ++sessions_[session].objects;
}

void QuotaLedger::Report(StoreStatus& st) const {
  for (const auto& [uid, u] : users_) {
    if (u.objects > 0) st.users.push_back({uid, u.objects, u.bytes});
  }
  st.user_quota_bytes = user_.bytes;
  st.user_quota_objects = user_.objects;
  st.client_quota_bytes = client_.bytes;
  st.client_quota_objects = client_.objects;
}

QuotaUsage QuotaLedger::OfSession(SessionId session) const {
  auto it = sessions_.find(session);
  return it == sessions_.end() ? QuotaUsage{} : it->second;
}

}  // namespace depot
