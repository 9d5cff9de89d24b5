#include "daemon/put_rings.h"

#include <fmt/format.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/post.hpp>
#include <string>
#include <utility>
#include <vector>

#include "proto/put_ring_layout.h"

namespace depot {

Result<const PutRing*> PutRings::Join(SessionId session, uid_t uid) {
  auto ring =
      PutRing::Create("putring-" + std::to_string(::getpid()) + "-" + std::to_string(session));
  if (!ring.ok()) return ring.status();
  const PutRing* out = ring->get();
  Ring& r = rings_[session] = Ring{std::move(*ring), uid};
  users_[uid].insert(session);
  Publish(r);  // not polled: its first put rings
  return out;
}

void PutRings::Leave(SessionId session) {
  auto it = rings_.find(session);
  if (it == rings_.end()) return;
  polled_.erase(session);
  if (auto user = users_.find(it->second.uid); user != users_.end()) {
    user->second.erase(session);
    if (user->second.empty()) users_.erase(user);
  }
  rings_.erase(it);
}

PutRing* PutRings::Find(SessionId session) {
  auto it = rings_.find(session);
  return it == rings_.end() ? nullptr : it->second.ring.get();
}

Status PutRings::Take(SessionId session, uint64_t most) {
  PutRing* ring = Find(session);
  if (ring == nullptr || !ring->Pending()) return Status::OK();
  // Also on the timer, outside any request: an exception here ends this session, not the loop.
  try {
    return ring->Take([this, session](std::span<const uint8_t> body,
                                      bool held) { return take_(session, body, held); },
                      most);
  } catch (const std::exception& e) {
    spdlog::error("session {}: taking its put ring failed ({})", session, e.what());
    return Status::ProtocolError(
        fmt::format("depotd failed while taking the put ring ({})", e.what()));
  }
}

bool PutRings::TakeAll() {
  std::vector<SessionId> all;
  all.reserve(rings_.size());
  for (const auto& [session, r] : rings_) all.push_back(session);
  return TakeFrom(all);
}

bool PutRings::TakePolled() { return TakeFrom({polled_.begin(), polled_.end()}); }

bool PutRings::TakeFrom(const std::vector<SessionId>& sessions) {
  // By id, not by iterator: a put may answer a get, and a failed session may close meanwhile.
  std::vector<SessionId> pending;
  for (SessionId session : sessions) {
    auto it = rings_.find(session);
    if (it == rings_.end() || !it->second.ring->Pending()) continue;
    pending.push_back(session);
    it->second.idle_polls = 0;
    if (!it->second.polled) SetPolled(session, it->second, true);  // puts come to it
  }
  for (SessionId session : pending) {
    if (Status st = Take(session); !st.ok()) fail_(session, st);
  }
  return !pending.empty();
}

void PutRings::NoteHandOff() {
  auto now = std::chrono::steady_clock::now();
  if (now < shared_cpu_until_) return;
  eager_until_ = now + kHandOffWindow;
  last_found_ = now;
  if (spinning_) return;
  spinning_ = true;
  shared_cpu_.Begin(now);
  PostSpin();
}

void PutRings::PostSpin() {
  boost::asio::post(timer_.get_executor(), [self = std::weak_ptr<PutRings*>(self_)] {
    if (auto rings = self.lock()) (*rings)->Spin();
  });
}

void PutRings::Spin() {
  auto now = std::chrono::steady_clock::now();
  if (AnyPending()) {
    TakeTurn();
    last_found_ = now;
  }
  if (now >= eager_until_ || now - last_found_ >= kSpinWindow) {
    spinning_ = false;
    return;
  }
  // The loop looks at the sockets between two spins (a posted handler makes it poll them without
  // waiting), so requests are answered as before.
  auto before = std::chrono::steady_clock::now();
  ::sched_yield();
  if (shared_cpu_.Yielded(before, std::chrono::steady_clock::now())) {
    spinning_ = false;
    shared_cpu_until_ = now + kBackOff;
    return;
  }
  PostSpin();
}

void PutRings::Poll(SessionId session) {
  auto it = rings_.find(session);
  if (it == rings_.end()) return;
  it->second.idle_polls = 0;
  if (!it->second.polled) SetPolled(session, it->second, true);
}

void PutRings::Arm() {
  if (armed_ || polled_.empty()) return;
  armed_ = true;
  timer_.expires_after(kPollInterval);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;  // the rings are going
    armed_ = false;
    Tick();
  });
}

bool PutRings::AnyPending() const {
  for (SessionId session : polled_) {
    if (rings_.at(session).ring->Pending()) return true;
  }
  return false;
}

void PutRings::NoteParkedGet(uid_t uid) {
  if (urgent_.insert(uid).second) PublishUser(uid);
}

void PutRings::Tick() {
  std::vector<uid_t> calm;
  for (uid_t uid : urgent_) {
    if (!waiting_(uid)) calm.push_back(uid);
  }
  for (uid_t uid : calm) {
    urgent_.erase(uid);
    PublishUser(uid);
  }
  TakeTurn();
  // A ring left empty for kIdlePolls polls stops being polled, in a new epoch: its client's next
  // put rings. Then one more look: a client that published before it saw the word fall reads the
  // word after its publication (both sides fence), so either it rings or this look finds its put.
  std::vector<SessionId> idle;
  for (SessionId session : polled_) {
    Ring& r = rings_.at(session);
    if (!r.ring->Pending() && ++r.idle_polls >= kIdlePolls) idle.push_back(session);
  }
  for (SessionId session : idle) SetPolled(session, rings_.at(session), false);
  if (!idle.empty()) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    TakeFrom(idle);
  }
  Arm();
}

void PutRings::TakeTurn() {
  auto start = std::chrono::steady_clock::now();
  // By id, not by iterator: a put may answer a get, and a failed session may close meanwhile.
  std::vector<SessionId> order(polled_.upper_bound(turn_end_), polled_.end());
  order.insert(order.end(), polled_.begin(), polled_.upper_bound(turn_end_));
  for (SessionId session : order) {
    auto it = rings_.find(session);
    if (it == rings_.end() || !it->second.ring->Pending()) continue;
    it->second.idle_polls = 0;
    turn_end_ = session;
    if (Status st = Take(session, kTurnRecords); !st.ok()) fail_(session, st);
    if (std::chrono::steady_clock::now() - start >= kTurnTime) break;
  }
  if (AnyPending()) PostTurn();
}

void PutRings::PostTurn() {
  if (std::exchange(turn_posted_, true)) return;
  boost::asio::post(timer_.get_executor(), [self = std::weak_ptr<PutRings*>(self_)] {
    if (auto rings = self.lock()) {
      (*rings)->turn_posted_ = false;
      (*rings)->TakeTurn();
    }
  });
}

void PutRings::SetPolled(SessionId session, Ring& r, bool polled) {
  if (r.polled && !polled) ++r.epoch;
  r.polled = polled;
  r.idle_polls = 0;
  if (polled) {
    polled_.insert(session);
  } else {
    polled_.erase(session);
  }
  Publish(r);
  Arm();
}

uint64_t PutRings::Word(const Ring& r) const {
  uint64_t state = urgent_.contains(r.uid) ? put_ring::kUrgent
                   : r.polled              ? put_ring::kPolling
                                           : put_ring::kIdle;
  return r.epoch << 2 | state;
}

void PutRings::PublishUser(uid_t uid) {
  auto user = users_.find(uid);
  if (user == users_.end()) return;
  for (SessionId session : user->second) Publish(rings_.at(session));
}

}  // namespace depot
