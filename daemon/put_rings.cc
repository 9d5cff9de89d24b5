#include "daemon/put_rings.h"

#include <fmt/format.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/post.hpp>
#include <string>
#include <vector>

#include "proto/put_ring_layout.h"

namespace depot {

Result<const PutRing*> PutRings::Join(SessionId session, uid_t uid) {
  auto ring =
      PutRing::Create("putring-" + std::to_string(::getpid()) + "-" + std::to_string(session));
  if (!ring.ok()) return ring.status();
  (*ring)->SetPolled(Word(uid));
  const PutRing* out = ring->get();
  rings_[session] = Ring{std::move(*ring), uid};
  return out;
}

PutRing* PutRings::Find(SessionId session) {
  auto it = rings_.find(session);
  return it == rings_.end() ? nullptr : it->second.ring.get();
}

Status PutRings::Take(SessionId session) {
  PutRing* ring = Find(session);
  if (ring == nullptr || !ring->Pending()) return Status::OK();
  // Also on the timer, outside any request: an exception here ends this session, not the loop.
  try {
    return ring->Take([this, session](std::span<const uint8_t> body, bool held) {
      return take_(session, body, held);
    });
  } catch (const std::exception& e) {
    spdlog::error("session {}: taking its put ring failed ({})", session, e.what());
    return Status::ProtocolError(
        fmt::format("depotd failed while taking the put ring ({})", e.what()));
  }
}

bool PutRings::TakeAll() {
  // By id, not by iterator: a put may answer a get, and a failed session may close meanwhile.
  std::vector<SessionId> pending;
  for (const auto& [session, r] : rings_) {
    if (r.ring->Pending()) pending.push_back(session);
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
  yields_ = yielded_to_ = 0;
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
    TakeAll();
    last_found_ = now;
  }
  if (now >= eager_until_ || now - last_found_ >= kSpinWindow) {
    spinning_ = false;
    return;
  }
  // The loop looks at the sockets between two spins (a posted handler makes it poll them without
  // waiting), so requests are answered as before.
  ::sched_yield();
  auto yielded = std::chrono::steady_clock::now() - now;
  ++yields_;
  if (yielded > kYieldedTo) ++yielded_to_;
  // Another process took a time slice meanwhile, or others ran at least as often as not: on a
  // shared CPU a spinning daemon takes time from the very clients it serves, or from anyone
  // else's work, and waits behind them for its turn, where a sleeping one is woken at once.
  if (yielded > kYieldedSlice || (yielded_to_ >= kYieldsToStop && 2 * yielded_to_ >= yields_)) {
    spinning_ = false;
    shared_cpu_until_ = now + kBackOff;
    return;
  }
  PostSpin();
}

void PutRings::Poll() {
  idle_polls_ = 0;
  if (polling_) return;
  SetPolled(true);
  Arm();
}

void PutRings::Arm() {
  timer_.expires_after(kPollInterval);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) Tick();
  });
}

bool PutRings::AnyPending() const {
  for (const auto& [session, r] : rings_) {
    if (r.ring->Pending()) return true;
  }
  return false;
}

void PutRings::NoteParkedGet(uid_t uid) {
  if (urgent_.insert(uid).second) Publish();
}

void PutRings::Tick() {
  if (std::erase_if(urgent_, [this](uid_t uid) { return !waiting_(uid); }) > 0) Publish();
  if (AnyPending()) {
    TakeAll();
    idle_polls_ = 0;
    return Arm();
  }
  if (++idle_polls_ < kIdlePolls) return Arm();
  // Stop, then look once more: a client that published before it saw the word fall reads the
  // word after its publication (both sides fence), so either it rings or this look finds its put.
  SetPolled(false);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (AnyPending()) {
    SetPolled(true);
    TakeAll();
    idle_polls_ = 0;
    Arm();
  }
}

void PutRings::SetPolled(bool polled) {
  if (polling_ && !polled) ++epoch_;
  polling_ = polled;
  Publish();
}

uint64_t PutRings::Word(uid_t uid) const {
  uint64_t state = urgent_.contains(uid) ? put_ring::kUrgent
                   : polling_            ? put_ring::kPolling
                                         : put_ring::kIdle;
  return epoch_ << 2 | state;
}

void PutRings::Publish() {
  for (const auto& [session, r] : rings_) r.ring->SetPolled(Word(r.uid));
}

}  // namespace depot
