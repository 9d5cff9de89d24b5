#include "daemon/get_waits.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>

namespace depot {

void GetWait::ReleaseAll() const {
  for (const StoredObject* o : acquired) {
    if (o == nullptr) continue;
    if (Status released = table->Release(session, o->id); !released.ok()) {
      spdlog::error("session {}: a parked get's reference: {}", session, released.message());
    }
  }
}

Status GetWaits::Park(GetWait& w, int64_t timeout_ms) {
  if (w.missing == 0) {
    answer_(w);
    return Status::OK();
  }
  Parked& parked = per_session_[w.session];
  if (parked.gets >= limits_.gets_per_session) {
    return Status::QuotaExceeded(fmt::format(
        "this connection already has {} gets waiting, its limit (max_pending)", parked.gets));
  }
  // Every GUID the get names is held while it waits, found or not.
  uint64_t n = w.guids.size();
  if (parked.guids + n > limits_.guids_per_session) {
    return Status::QuotaExceeded(fmt::format(
        "this connection's gets waiting name {} GUIDs, and this get {} more: over its limit of {} "
        "(max_pending_guids)",
        parked.guids, n, limits_.guids_per_session));
  }
  auto user = per_user_.find(w.uid);
  uint64_t by_user = user == per_user_.end() ? 0 : user->second;
  if (by_user + n > limits_.guids_per_user) {
    return Status::QuotaExceeded(fmt::format(
        "the gets waiting of user {} name {} GUIDs, and this get {} more: over the limit of {} "
        "(max_pending_guids_per_user)",
        w.uid, by_user, n, limits_.guids_per_user));
  }
  ++parked.gets;
  parked.guids += n;
  per_user_[w.uid] += n;
  guids_ += n;
  uint64_t wait_id = next_id_++;
  for (size_t i = 0; i < w.guids.size(); ++i) {
    if (w.acquired[i] == nullptr && w.errors[i].ok()) waiting_on_.emplace(w.guids[i], wait_id);
  }
  GetWait& stored = waits_.emplace(wait_id, std::move(w)).first->second;
  // A timer counts nanoseconds in 64 bits: a longer wait (over about 35 years) waits forever.
  constexpr int64_t kLongestTimeoutMs = int64_t{1} << 40;
  if (timeout_ms > 0 && timeout_ms < kLongestTimeoutMs) {
    stored.timer =
        std::make_unique<boost::asio::steady_timer>(io_, std::chrono::milliseconds(timeout_ms));
    stored.timer->async_wait([this, wait_id](const boost::system::error_code& ec) {
      if (!ec) Answer(wait_id);
    });
  }
  return Status::OK();
}

void GetWaits::Wake(ObjectTable& table, const Guid& guid) {
  Settle(table, guid, [&](GetWait& w, size_t i) {
    auto got = table.Acquire(w.session, guid);
    if (got.status().IsQuotaExceeded()) {  // sealed, but its user holds its share already
      w.errors[i] = got.status();
      --w.missing;
      return;
    }
    if (!got.ok()) return;
    w.acquired[i] = *got;
    --w.missing;
  });
}

void GetWaits::Fail(ObjectTable& table, const Guid& guid, const Status& why) {
  Settle(table, guid, [&](GetWait& w, size_t i) {
    w.errors[i] = why;
    --w.missing;
  });
}

void GetWaits::Settle(ObjectTable& table, const Guid& guid,
                      const std::function<void(GetWait&, size_t)>& each) {
  // Gets in other namespaces wait for another object of the same GUID.
  auto [b, e] = waiting_on_.equal_range(guid);
  std::vector<uint64_t> ids;
  for (auto it = b; it != e;) {
    auto w = waits_.find(it->second);
    if (w != waits_.end() && w->second.table != &table) {
      ++it;
      continue;
    }
    ids.push_back(it->second);
    it = waiting_on_.erase(it);
  }
  for (uint64_t wait_id : ids) {
    auto it = waits_.find(wait_id);
    if (it == waits_.end()) continue;
    GetWait& w = it->second;
    for (size_t i = 0; i < w.guids.size(); ++i) {
      if (w.guids[i] != guid || w.acquired[i] != nullptr || !w.errors[i].ok()) continue;
      each(w, i);
    }
    if (w.missing == 0) Answer(wait_id);
  }
}

void GetWaits::DropSession(SessionId session) {
  std::vector<uint64_t> parked;
  for (const auto& [wait_id, w] : waits_) {
    if (w.session == session) parked.push_back(wait_id);
  }
  for (uint64_t wait_id : parked) Take(wait_id);
  per_session_.erase(session);
}

void GetWaits::Answer(uint64_t wait_id) {
  if (std::optional<GetWait> w = Take(wait_id)) answer_(*w);
}

std::optional<GetWait> GetWaits::Take(uint64_t wait_id) {
  auto it = waits_.find(wait_id);
  if (it == waits_.end()) return std::nullopt;
  GetWait w = std::move(it->second);
  waits_.erase(it);
  if (auto s = per_session_.find(w.session); s != per_session_.end()) {
    --s->second.gets;
    s->second.guids -= w.guids.size();
  }
  if (auto u = per_user_.find(w.uid); u != per_user_.end() && (u->second -= w.guids.size()) == 0) {
    per_user_.erase(u);
  }
  guids_ -= w.guids.size();
  for (const Guid& g : w.guids) {
    auto [b, e] = waiting_on_.equal_range(g);
    for (auto x = b; x != e;) x = (x->second == wait_id) ? waiting_on_.erase(x) : std::next(x);
  }
  return w;
}

}  // namespace depot
