// internal::Link is what a Client and its copies share: the connection to depotd now and, once
// depotd has gone away (a crash, a restart, an upgrade), the one that replaced it.
//
// A call that finds the daemon gone asks Recover. It connects anew, trying for up to
// reconnect_wait while the service comes back (under systemd the socket stays open while the
// daemon restarts, and a connect waits in its queue), then names to the new daemon every object
// this process still maps (hold requests): each one the new daemon has is held for the new
// connection, so that it is not freed, evicted or reused under its mapping. The old connection's
// Objects stay valid (their bytes are the same pages, which the new daemon adopted from the kept
// memory); each segment of the old one is unmapped with its last Object, and each such Object's
// hold is released through the connection now when it goes (DropCarried).
//
// A watcher thread, started with the first Object this process holds, sees the daemon hang up
// at once. It stops puts into the lease of the old
// connection then (Connection::HungUp: the next daemon may give those bytes to another object
// once its grace period ends) and, once the daemon process has exited (a daemon that lives on
// ended this session on purpose), while this process holds objects, reconnects at once rather
// than at its next call: the new daemon keeps the freed memory of kept segments unused only for
// restart_grace_ms.
//
// Once everything this process maps is held again and no draft of an old connection is open, the
// Link tells the new daemon it is done with the old session (TryResume), so that the new
// daemon's grace period need not wait for this process.
//
// Every connection made stays until the Link goes (a thread may still be in a call on an old
// one); an old one keeps only its socket, its index mapping and its reference slots.
//
// Thread-safe. In a child forked since it was made, nothing reconnects: the calls answer
// Disconnected, saying the child must connect its own (Channel::ForkedError).
#ifndef DEPOT_CLIENT_SRC_LINK_H_
#define DEPOT_CLIENT_SRC_LINK_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "client/src/connection.h"
#include "common/fork_generation.h"
#include "common/unique_fd.h"
#include "depot/status.h"

namespace depot::internal {

class Link : public std::enable_shared_from_this<Link> {
 public:
  struct Options {
    std::string path;
    std::string name;
    std::optional<uid_t> trusted_daemon_uid;
    std::chrono::milliseconds reconnect_wait{0};  // 0: never reconnect
  };
  // Connects (Connection::Open). The watcher starts with the first Object held.
  static Result<std::shared_ptr<Link>> Open(Options options);
  ~Link();  // stops the watcher
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  Connection& now() const { return *now_.load(std::memory_order_acquire); }
  const Options& options() const { return options_; }

  // A call on `conn` answered `st`. When `st` says depotd went away (Disconnected, outside a
  // forked child, with reconnecting on): the connection that replaced `conn`, made now unless
  // another thread made it, or Disconnected saying why none could be. Otherwise `st`.
  Result<Connection*> Recover(Connection& conn, const Status& st);

  // A Holding of a superseded connection goes (Connection::Forget): when a reconnect carried
  // it, and it was the last of its GUID, the hold is released through the connection now; when
  // it was the last the new daemon did not have, a resume may be sent (TryResume).
  void DropCarried(const Holding& h);
  // Tells the daemon now that this process is done with the session of the daemon before
  // (Connection::Resume), once it holds again every object it maps and no draft of an old
  // connection is open; until then, and when the daemon does not understand it, nothing.
  void TryResume();

  // Connection::PinHostMemory, for the connections to come as well.
  Status PinHostMemory();

  // How many times this Link has reconnected.
  uint64_t reconnects() const { return reconnects_.load(std::memory_order_relaxed); }

 private:
  explicit Link(Options options) : options_(std::move(options)) {}
  // Replaces `gone` unless it has been replaced already; waits for a reconnect under way first.
  // Called with `lk` (of mu_) held; lets it go only while connecting.
  Result<Connection*> Replace(std::unique_lock<std::mutex>& lk, Connection& gone);
  // Names what this process still maps (the Objects of every connection so far) to `next` and
  // makes it the connection now, with mu_ held; a resume is due once nothing holds it back. `held`
  // keeps the Holdings of `gone` alive meanwhile (the caller lets them go after unlocking: a
  // Holding that goes takes mu_).
  void Carry(Connection& gone, std::shared_ptr<Connection> next,
             std::vector<std::shared_ptr<Holding>>& held);
  // Makes `conn` the connection now (with mu_ held, or before the Link is shared).
  void Adopt(std::shared_ptr<Connection> conn);
  void StartWatcher();  // once: the first Object held
  void Watch();         // the watcher thread

  const Options options_;
  ForkMark made_;
  std::atomic<Connection*> now_{nullptr};
  std::atomic<uint64_t> reconnects_{0};

  std::mutex mu_;                            // guards what follows
  ParentOwned<std::condition_variable> cv_;  // the connection changed, a reconnect ended, or stop
  std::vector<std::shared_ptr<Connection>> connections_;  // every one made, the one now last
  // Per GUID, the Holdings of superseded connections that the connection now holds for them;
  // and how many others are alive (the new daemon did not have their objects).
  std::unordered_map<Guid, uint32_t> carried_;
  size_t uncarried_ = 0;
  // The session of the daemon before, once the last reconnect found a daemon that understands
  // resumes, until one is sent.
  std::optional<uint64_t> resume_;
  bool reconnecting_ = false;
  bool pinned_ = false;
  bool stopping_ = false;
  // When a reconnect last failed: a call within reconnect_wait of it tries once, without waiting
  // again, so that a daemon stopped for good costs each later call one connect, not a wait.
  std::optional<std::chrono::steady_clock::time_point> failed_at_;
  UniqueFd wake_;  // an eventfd that wakes the watcher to stop
  std::thread watcher_;
};

}  // namespace depot::internal

#endif  // DEPOT_CLIENT_SRC_LINK_H_
