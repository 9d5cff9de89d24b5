#include "daemon/segment_tracker.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace depot {

Status SegmentTracker::Collect(SessionId session, std::span<const Location> frames, bool writable,
                               std::vector<uint64_t>& keys, std::vector<UniqueFd>& fds) {
  Entry& e = sessions_.at(session);
  const uint8_t kind = writable ? kReadWrite : kReadOnly;
  for (const Location& f : frames) {
    if (f.size == 0) continue;
    SegmentRef seg = e.ns->SegmentOf(f.pool, f.segment);
    uint64_t key = Key(f.pool, f.segment);
    auto has = e.sent.find(key);
    bool needed = seg.dedicated ? std::find(keys.begin(), keys.end(), key) == keys.end()
                                : has == e.sent.end() || (has->second & kind) == 0;
    if (!needed) continue;
    UniqueFd fd(::fcntl(writable ? seg.fd : seg.read_only_fd, F_DUPFD_CLOEXEC, 0));
    if (!fd.valid()) {
      // The caller sends nothing, so the peer still lacks every segment of this reply.
      for (uint64_t sent : keys) {
        auto it = e.sent.find(sent);
        if (it != e.sent.end() && (it->second &= ~kind) == 0) e.sent.erase(it);
      }
      std::string why = fmt::format("depotd cannot pass a segment: {}", std::strerror(errno));
      spdlog::error("{} (raise LimitNOFILE / RLIMIT_NOFILE)", why);
      return Status::Unavailable(why);
    }
    if (!seg.dedicated) {
      e.sent[key] |= kind;
      // From now on this session may hold the segment's objects through its reference slots.
      if (LockFreeGets* gets = e.ns->gets()) gets->Mapped(session);
    }
    keys.push_back(key);
    fds.push_back(std::move(fd));
  }
  return Status::OK();
}

std::vector<SessionId> SegmentTracker::Retire(const Namespace* ns, uint32_t pool, uint32_t id) {
  std::vector<SessionId> holders;
  uint64_t key = Key(pool, id);
  for (auto& [session, e] : sessions_) {
    if (e.ns != ns || e.sent.erase(key) == 0) continue;
    holders.push_back(session);
    e.holding.insert(key);
    Held& held = held_.try_emplace({ns, key}, Held{e.ns, {}}).first->second;
    held.by.insert(session);
  }
  return holders;
}

void SegmentTracker::Dropped(SessionId session, const wire::SegmentsRetired& dropped) {
  auto it = sessions_.find(session);
  if (it == sessions_.end() || dropped.ids() == nullptr) return;
  for (uint32_t id : *dropped.ids()) {
    uint64_t key = Key(dropped.pool(), id);
    if (it->second.holding.erase(key) > 0) LetGo(session, it->second.ns, key);
  }
}

void SegmentTracker::Leave(SessionId session) {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  Entry e = std::move(it->second);
  sessions_.erase(it);
  for (uint64_t key : e.holding) LetGo(session, e.ns, key);
}

void SegmentTracker::LetGo(SessionId session, Namespace* ns, uint64_t key) {
  auto it = held_.find({ns, key});
  if (it == held_.end() || it->second.by.erase(session) == 0 || !it->second.by.empty()) return;
  held_.erase(it);
  released_(*ns, static_cast<uint32_t>(key >> 32), static_cast<uint32_t>(key));
}

}  // namespace depot
