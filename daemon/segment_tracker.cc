#include "daemon/segment_tracker.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

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
    if (!seg.dedicated) e.sent[key] |= kind;
    keys.push_back(key);
    fds.push_back(std::move(fd));
  }
  return Status::OK();
}

std::vector<SessionId> SegmentTracker::Retire(const Namespace* ns, uint32_t pool, uint32_t id) {
  std::vector<SessionId> holders;
  for (auto& [session, e] : sessions_) {
    if (e.ns == ns && e.sent.erase(Key(pool, id)) > 0) holders.push_back(session);
  }
  return holders;
}

}  // namespace depot
