#include "client/src/link.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <unordered_set>

#include "client/src/guid_requests.h"

namespace depot::internal {
namespace {

constexpr auto kRetryEvery = std::chrono::milliseconds(20);
// How long a daemon that hung up is given to exit before the watcher takes the hang-up for the
// end of this session alone (a daemon that lives on closed it on purpose, and the calls say why).
constexpr int kExitWaitMs = 2000;

// Whether the daemon of `conn`, which hung up, has exited, waiting up to kExitWaitMs (or until
// `wake` is readable). Its pid is the one its hello gave: the socket's peer credentials name the
// process that listened, which under socket activation is the service manager. True when that
// cannot be told (no pid, or no pidfd_open, or a pid of another pid namespace that names no
// process here: reconnecting to a daemon that lives on costs a connection, nothing more).
bool DaemonExited(const Connection& conn, int wake) {
  pid_t pid = conn.daemon_pid();
  if (pid <= 0) {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(conn.socket_fd(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return true;
    pid = cred.pid;
  }
  if (pid <= 0) return true;
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd.valid()) return true;  // exited already (ESRCH), or no way to watch it
  pollfd fds[2] = {{pidfd.get(), POLLIN, 0}, {wake, POLLIN, 0}};
  return ::poll(fds, 2, kExitWaitMs) > 0 && fds[0].revents != 0;
}

// Asks the daemon behind `conn` to hold each of `guids` for it (hold requests, in batches of
// proto::kMaxGuidsPerRequest): whether each is held. A hold is released by ReleaseHold.
std::vector<bool> Hold(Connection& conn, std::span<const Guid> guids) {
  return InBatches(guids, [&](std::span<const Guid> part) {
    std::vector<bool> held(part.size(), false);
    flatbuffers::FlatBufferBuilder fbb(64 + 16 * part.size());
    fbb.Finish(wire::CreateGuidsRequest(fbb, GuidVector(fbb, part)));
    auto reply = conn.Call(proto::MsgType::kHold, fbb);
    if (!reply.ok()) return held;  // a daemon without holds, or gone: none held
    const auto* results = proto::Body<wire::GuidsReply>(reply->body)->results();
    for (size_t i = 0; results != nullptr && i < results->size() && i < part.size(); ++i) {
      const wire::GuidResult* r = results->Get(i);
      held[i] = r->code() == wire::Code::Ok && r->guid() != nullptr &&
                proto::FromWire(*r->guid()) == part[i];
    }
    return held;
  });
}

}  // namespace

Result<std::shared_ptr<Link>> Link::Open(Options options) {
  auto conn = Connection::Open(options.path, options.name, options.trusted_daemon_uid);
  if (!conn.ok()) return conn.status();
  std::shared_ptr<Link> link(new Link(std::move(options)));
  link->Adopt(std::move(*conn));
  return link;
}

void Link::Adopt(std::shared_ptr<Connection> conn) {
  conn->set_on_first_hold([link = weak_from_this()] {
    if (auto l = link.lock()) l->StartWatcher();
  });
  now_.store(conn.get(), std::memory_order_release);
  connections_.push_back(std::move(conn));
}

void Link::StartWatcher() {
  std::lock_guard lk(mu_);
  if (watcher_.joinable() || stopping_ || made_.forked()) return;
  wake_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (wake_.valid()) watcher_ = std::thread([this] { Watch(); });
}

Link::~Link() {
  if (made_.forked()) {
    // The watcher is a thread of the parent's, which this process does not have.
    if (watcher_.joinable()) watcher_.detach();
    return;
  }
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_->notify_all();
  if (watcher_.joinable()) {
    uint64_t one = 1;
    (void)::write(wake_.get(), &one, sizeof one);
    watcher_.join();
  }
}

Result<Connection*> Link::Recover(Connection& conn, const Status& st) {
  if (!st.IsDisconnected() || conn.forked() || options_.reconnect_wait.count() <= 0) return st;
  std::unique_lock lk(mu_);
  auto next = Replace(lk, conn);
  if (!next.ok()) {
    return Status::Disconnected(
        fmt::format("{} (and reconnecting failed: {})", st.message(), next.status().message()));
  }
  return next;
}

Result<Connection*> Link::Replace(std::unique_lock<std::mutex>& lk, Connection& gone) {
  cv_->wait(lk, [&] { return !reconnecting_ || stopping_; });
  if (Connection* now = now_.load(std::memory_order_relaxed); now != &gone) return now;
  if (stopping_) return Status::Disconnected("the client is closing");
  auto start = std::chrono::steady_clock::now();
  bool failed_lately = failed_at_ && start - *failed_at_ < options_.reconnect_wait;
  auto deadline = failed_lately ? start : start + options_.reconnect_wait;
  reconnecting_ = true;
  Result<std::shared_ptr<Connection>> next = Status::Unavailable("not tried");
  for (;;) {
    lk.unlock();
    next = Connection::Open(options_.path, options_.name, options_.trusted_daemon_uid);
    lk.lock();
    // Only a daemon not listening yet, or one going away as it answered (the last one's socket
    // may take a connect as it dies), is waited for: one that refuses this process, or speaks
    // another protocol, will not change its mind.
    bool wait = next.status().IsUnavailable() || next.status().IsDisconnected();
    if (next.ok() || !wait || stopping_ || std::chrono::steady_clock::now() >= deadline) {
      break;
    }
    cv_->wait_for(lk, kRetryEvery, [&] { return stopping_; });
  }
  std::vector<std::shared_ptr<Holding>> held;
  if (next.ok()) {
    failed_at_.reset();
    Carry(gone, std::move(*next), held);
  } else {
    failed_at_ = std::chrono::steady_clock::now();
  }
  reconnecting_ = false;
  cv_->notify_all();
  lk.unlock();
  held.clear();  // a Holding that goes now takes mu_
  TryResume();
  lk.lock();
  if (!next.ok()) return next.status();
  return now_.load(std::memory_order_relaxed);
}

void Link::Carry(Connection& gone, std::shared_ptr<Connection> next,
                 std::vector<std::shared_ptr<Holding>>& held) {
  if (pinned_) (void)next->PinHostMemory();
  // No get through `gone` gives an Object from here on: what is read below is all this process
  // maps, the Objects of `gone` and of every connection before it.
  gone.Leave();
  for (const auto& c : connections_) {
    auto its = c->Holdings();
    held.insert(held.end(), std::make_move_iterator(its.begin()),
                std::make_move_iterator(its.end()));
  }
  std::vector<Guid> guids;
  std::unordered_set<Guid> named;  // a GUID held through two connections is held once
  guids.reserve(held.size());
  for (const auto& h : held) {
    if (named.insert(h->guid).second) guids.push_back(h->guid);
  }
  std::vector<bool> ok = Hold(*next, guids);
  std::unordered_set<Guid> kept;
  for (size_t i = 0; i < guids.size(); ++i) {
    if (ok[i]) kept.insert(guids[i]);
  }
  carried_.clear();
  uncarried_ = 0;
  for (const auto& h : held) {
    h->named = true;
    h->carried = kept.contains(h->guid);
    if (h->carried) {
      ++carried_[h->guid];
    } else {
      ++uncarried_;
    }
  }
  gone.HungUp();  // no put writes into its lease any more
  gone.Supersede(weak_from_this(), next);
  resume_.reset();
  if (next->resumes() && gone.session_id() != 0) resume_ = gone.session_id();
  Adopt(std::move(next));
  reconnects_.fetch_add(1, std::memory_order_relaxed);
}

void Link::DropCarried(const Holding& h) {
  bool resume = false;
  {
    std::lock_guard lk(mu_);
    if (!h.named) return;  // never named to a daemon (dropped as it was made: Connection::Leave)
    if (!h.carried) {
      resume = --uncarried_ == 0 && resume_;
    } else if (auto it = carried_.find(h.guid); it != carried_.end() && --it->second == 0) {
      carried_.erase(it);
      now_.load(std::memory_order_relaxed)->ReleaseHold(h.guid);
    }
  }
  if (resume) TryResume();
}

void Link::TryResume() {
  Connection* now = nullptr;
  uint64_t session = 0;
  {
    std::lock_guard lk(mu_);
    if (!resume_ || stopping_ || made_.forked() || uncarried_ > 0) return;
    for (const auto& c : connections_) {
      if (c->open_drafts() > 0) return;
    }
    session = *resume_;
    resume_.reset();
    now = now_.load(std::memory_order_relaxed);
  }
  // Refused when the daemon does not wait for that session (its grace period is over, or it could
  // not tell who was connected): its grace period then runs its course, as without a resume.
  (void)now->Resume(session);
}

Status Link::PinHostMemory() {
  std::lock_guard lk(mu_);
  pinned_ = true;
  return now().PinHostMemory();
}

void Link::Watch() {
  std::unique_lock lk(mu_);
  while (!stopping_) {
    Connection* watched = now_.load(std::memory_order_relaxed);
    lk.unlock();
    // POLLRDHUP alone: replies (POLLIN) are the callers' to read, and do not wake this.
    pollfd fds[2] = {{watched->socket_fd(), POLLRDHUP, 0}, {wake_.get(), POLLIN, 0}};
    int n = ::poll(fds, 2, -1);
    bool hung_up = n > 0 && fds[0].revents != 0;
    if (hung_up) watched->HungUp();
    bool gone = hung_up && DaemonExited(*watched, wake_.get());
    bool holds = gone && watched->Holds();
    lk.lock();
    if (stopping_ || !hung_up || now_.load(std::memory_order_relaxed) != watched) continue;
    if (gone && options_.reconnect_wait.count() > 0 && (holds || !carried_.empty())) {
      if (Replace(lk, *watched).ok()) continue;
    }
    // Nothing held, the session ended on purpose, or no daemon came back: a call reconnects
    // when it finds the daemon gone.
    cv_->wait(lk, [&] { return stopping_ || now_.load(std::memory_order_relaxed) != watched; });
  }
}

}  // namespace depot::internal
