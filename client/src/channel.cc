#include "client/src/channel.h"

#include <fmt/format.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "proto/fd_passing.h"

namespace depot::internal {
namespace {

constexpr auto kSpin = std::chrono::microseconds(50);

Status FromError(const wire::ErrorReply& e) { return proto::ToStatus(e.code(), e.message()); }

// `fd` really holds the segment `info` describes: a daemon that claimed more than the file holds
// would make this process fault (SIGBUS) on the bytes past its end. A device chunk's fd is
// checked when it is a file (a stand-in); a CUDA handle has no size to check.
Status CheckSegmentFd(const wire::SegmentInfo& info, int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return Status::ProtocolError(
        fmt::format("depotd sent an fd for segment {} that cannot be inspected: {}", info.id(),
                    std::strerror(errno)));
  }
  bool file = S_ISREG(st.st_mode);
  if (info.pool() == 0 && !file) {
    return Status::ProtocolError(
        fmt::format("depotd sent an fd for host segment {} that is not a memory file", info.id()));
  }
  if (file && static_cast<uint64_t>(st.st_size) < info.size()) {
    return Status::ProtocolError(
        fmt::format("depotd claimed {} bytes for segment {}, but its fd holds {}", info.size(),
                    info.id(), st.st_size));
  }
  return Status::OK();
}

}  // namespace

Channel::Channel(UniqueFd fd, std::string path, SegmentMap& segments)
    : fd_(std::move(fd)), path_(std::move(path)), segments_(segments) {}

Status Channel::ForkedError() const {
  return Status::Disconnected(
      fmt::format("this connection to depotd at {} was made before this process was forked: a "
                  "forked child must connect a Client of its own (the parent's connection, and "
                  "the objects it holds, stay the parent's)",
                  path_));
}

Status Channel::Send(const std::vector<uint8_t>& bytes, bool* peer_closed) {
  if (forked()) return ForkedError();
  std::lock_guard lk(send_mu_);
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd_.get(), bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (peer_closed) *peer_closed = errno == EPIPE || errno == ECONNRESET;
      return Status::Disconnected(
          fmt::format("lost the connection to depotd at {}: {}", path_, std::strerror(errno)));
    }
    sent += static_cast<size_t>(n);
  }
  return Status::OK();
}

Result<Message> Channel::Call(proto::MsgType type, flatbuffers::FlatBufferBuilder& fbb,
                              std::vector<uint8_t> ahead) {
  if (forked()) return ForkedError();
  uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
  Slot slot;
  {
    std::lock_guard lk(mu_);
    if (!broken_.ok()) return broken_;
    pending_[id] = &slot;
  }
  std::vector<uint8_t> bytes = std::move(ahead);
  std::vector<uint8_t> request = proto::Encode(static_cast<uint16_t>(type), id, fbb);
  bytes.insert(bytes.end(), request.begin(), request.end());
  bool peer_closed = false;
  Status sent = Send(bytes, &peer_closed);
  if (!sent.ok() && !peer_closed) {
    std::lock_guard lk(mu_);
    Fail(sent);
  }
  // When the daemon closed the connection, what it said before closing (an error saying why)
  // is still there to read: the wait below reads it, or the end of the stream.
  Status st = Wait(id, slot);
  if (!st.ok()) return st;
  if (slot.message.type() == static_cast<uint16_t>(proto::MsgType::kError)) {
    return FromError(*proto::Body<wire::ErrorReply>(slot.message.body));
  }
  if (slot.message.type() != proto::ReplyType(type)) {
    return Break(Status::ProtocolError(fmt::format("depotd answered a {} with a {}",
                                                   proto::TypeName(static_cast<uint16_t>(type)),
                                                   proto::TypeName(slot.message.type()))));
  }
  return std::move(slot.message);
}

Status Channel::Wait(uint64_t id, Slot& slot) {
  std::unique_lock lk(mu_);
  while (!slot.done) {
    if (reading_) {
      cv_->wait(lk);
      continue;
    }
    reading_ = true;
    lk.unlock();
    Status st = ReadSome();
    lk.lock();
    reading_ = false;
    if (!st.ok()) Fail(st);
    cv_->notify_all();  // replies for others, or the reader role for the next waiter
  }
  pending_.erase(id);
  return slot.status;
}

Result<Message> Channel::NextEvent(std::chrono::milliseconds timeout) {
  if (forked()) return ForkedError();
  std::optional<std::chrono::steady_clock::time_point> deadline;
  if (timeout.count() >= 0) deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock lk(mu_);
  while (events_.empty()) {
    if (!broken_.ok()) return broken_;
    if (reading_) {
      if (!deadline) {
        cv_->wait(lk);
      } else if (cv_->wait_until(lk, *deadline) == std::cv_status::timeout && events_.empty()) {
        return Status::Timeout("no event before the timeout");
      }
      continue;
    }
    reading_ = true;
    lk.unlock();
    Status st = ReadSome(deadline);
    lk.lock();
    reading_ = false;
    cv_->notify_all();
    if (st.IsTimeout()) return st;
    if (!st.ok()) Fail(st);
  }
  Message m = std::move(events_.front());
  events_.pop_front();
  return m;
}

Status Channel::Break(const Status& why) {
  std::lock_guard lk(mu_);
  Fail(why);
  return why;
}

void Channel::Fail(const Status& st) {
  if (broken_.ok()) broken_ = st;
  for (auto& [id, slot] : pending_) {
    if (!slot->done) {
      slot->done = true;
      slot->status = broken_;
    }
  }
  cv_->notify_all();
}

Status Channel::ReadSome(std::optional<std::chrono::steady_clock::time_point> deadline) {
  proto::FrameReader::Frame frame;
  std::string err;
  while (true) {
    bool dispatched = false;
    while (true) {
      proto::FrameReader::Cut cut = reader_.Next(frame, err);
      if (cut == proto::FrameReader::Cut::kPartial) break;
      if (cut == proto::FrameReader::Cut::kBadHeader) {
        return Status::ProtocolError(fmt::format("from depotd at {}: {}", path_, err));
      }
      taken_ += sizeof(proto::Header) + frame.header.length;
      if (Status st = Dispatch(frame.header, frame.body, taken_); !st.ok()) return st;
      dispatched = true;
    }
    if (dispatched) return Status::OK();
    if (deadline) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline -
                                                               std::chrono::steady_clock::now());
      pollfd p{fd_.get(), POLLIN, 0};
      int ready = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
      if (ready == 0) return Status::Timeout("no event before the timeout");
      if (ready < 0 && errno != EINTR) {
        return Status::Disconnected(fmt::format("poll on {}: {}", path_, std::strerror(errno)));
      }
      if (ready < 0) continue;
    }
    std::vector<UniqueFd> fds;
    std::span<uint8_t> space = reader_.Space();
    // A reply usually comes within a few microseconds. Going to sleep and being woken costs far
    // more than that when the daemon runs on another CPU (the wake of a halted vCPU), so look
    // for it a little while first, yielding so that a daemon sharing this CPU can run.
    ssize_t n = -1;
    auto spin_until = std::chrono::steady_clock::now() + kSpin;
    do {
      n = proto::RecvWithFds(fd_.get(), space, fds, MSG_DONTWAIT);
      if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) break;
      ::sched_yield();
    } while (std::chrono::steady_clock::now() < spin_until);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      n = proto::RecvWithFds(fd_.get(), space, fds, 0);
    }
    for (auto& fd : fds) fds_.emplace_back(received_ + std::max<ssize_t>(n, 1) - 1, std::move(fd));
    if (n == 0) {
      return Status::Disconnected(fmt::format("depotd at {} closed the connection", path_));
    }
    if (n < 0) {
      return Status::Disconnected(
          fmt::format("lost the connection to depotd at {}: {}", path_, std::strerror(errno)));
    }
    reader_.Filled(static_cast<size_t>(n));
    received_ += static_cast<uint64_t>(n);
  }
}

Status Channel::Dispatch(const proto::Header& h, std::span<const uint8_t> body, uint64_t end) {
  // The fds that came with this message's bytes: only its own segments may take them. Taken out
  // first, so that whatever this message turns out to be they are closed rather than left for a
  // later reply.
  std::vector<UniqueFd> fds;
  while (!fds_.empty() && fds_.front().first < end) {
    fds.push_back(std::move(fds_.front().second));
    fds_.pop_front();
  }
  if (!proto::VerifyBody(h.type, body)) {
    return Status::ProtocolError(
        fmt::format("depotd sent a malformed {}", proto::TypeName(h.type)));
  }
  const flatbuffers::Vector<flatbuffers::Offset<wire::SegmentInfo>>* infos = nullptr;
  if (h.type == proto::ReplyType(proto::MsgType::kCreate) ||
      h.type == proto::ReplyType(proto::MsgType::kLease)) {
    infos = proto::Body<wire::CreateReply>(body)->segments();
  } else if (h.type == proto::ReplyType(proto::MsgType::kGet)) {
    infos = proto::Body<wire::GetReply>(body)->segments();
  }
  size_t named = infos == nullptr ? 0 : infos->size();
  // A hello's fds are the index's, the slots' and the put ring's (Connection::Open checks which);
  // an index reply's, the index's when it says one rides.
  bool index = h.type == proto::ReplyType(proto::MsgType::kHello) ||
               h.type == proto::ReplyType(proto::MsgType::kIndex);
  if (h.type == proto::ReplyType(proto::MsgType::kHello)) {
    const auto* hello = proto::Body<wire::HelloReply>(body);
    named = (hello->index_sets() > 0 ? 2 : 0) + (hello->put_ring_bytes() > 0 ? 1 : 0);
  } else if (index) {
    named = proto::Body<wire::IndexReply>(body)->index_fd() ? 1 : 0;
  }
  if (fds.size() != named) {
    return Status::ProtocolError(fmt::format("depotd sent {} fds with a {} that names {} segments",
                                             fds.size(), proto::TypeName(h.type), named));
  }
  if (h.type == static_cast<uint16_t>(proto::MsgType::kError) && h.request_id == 0) {
    // An error about the connection itself (too many clients, for one): it ends the connection.
    return FromError(*proto::Body<wire::ErrorReply>(body));
  }
  if (h.type == static_cast<uint16_t>(proto::MsgType::kEvent)) {
    Message event;
    event.header = h;
    event.body.assign(body.begin(), body.end());
    std::lock_guard lk(mu_);
    events_.push_back(std::move(event));
    return Status::OK();
  }
  if (h.type == static_cast<uint16_t>(proto::MsgType::kSegmentsRetired)) {
    // Told at once, so that the daemon counts the memory free again. A send that fails means
    // the connection is gone, and with it every hold this process had.
    std::vector<uint8_t> dropped = segments_.Retire(*proto::Body<wire::SegmentsRetired>(body));
    if (!dropped.empty()) (void)Send(dropped);  // failed: see above
    return Status::OK();
  }
  Message msg;
  msg.header = h;
  if (index) {
    msg.index_fds = std::move(fds);  // checked against the sizes claimed where they are mapped
  } else {
    for (size_t i = 0; i < named; ++i) {
      const wire::SegmentInfo* info = infos->Get(i);
      if (Status st = CheckSegmentFd(*info, fds[i].get()); !st.ok()) return st;
    }
    for (size_t i = 0; i < named; ++i) {
      const wire::SegmentInfo* info = infos->Get(i);
      SegmentFd segment{info->pool(), info->id(), info->size(), std::move(fds[i])};
      if (info->dedicated()) {
        msg.dedicated.push_back(std::move(segment));
      } else {
        segments_.AddShared(std::move(segment));
      }
    }
  }
  msg.body.assign(body.begin(), body.end());
  std::lock_guard lk(mu_);
  auto it = pending_.find(h.request_id);
  if (it != pending_.end() && !it->second->done) {
    it->second->message = std::move(msg);
    it->second->done = true;
  }
  return Status::OK();
}

}  // namespace depot::internal
