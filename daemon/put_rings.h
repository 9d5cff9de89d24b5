// PutRings is the sessions' put rings (PutRing) and when the daemon reads them (docs/design.md,
// "Puts without a message"). A put written into a ring sends no message, so the daemon takes the
// rings' records:
//   - of one session, before it handles any request of that session (Take): its own later
//     requests see its puts;
//   - of every polled session, before a get, delete, contains or stat that names a missing object
//     (TakePolled; the rings that are not polled rang their doorbell, whose message the drain
//     reads first): once a put returns, a request that starts later finds it;
//   - of every session before a list or a status (TakeAll);
//   - of every polled session, on a timer every kPollInterval, so that puts reach the table, the
//     index and the LRU soon even when nobody asks for them. In turns (TakeTurn): at most
//     kTurnRecords of a ring and kTurnTime in all, the next turn posted behind the requests that
//     came meanwhile while records are left, so that a request of another connection waits for
//     one turn, not for every record of every busy ring (64 KiB each: milliseconds).
//   - of a session that closes, before its references go;
//   - of every polled session, in a spin of the loop (Spin: a look at each polled ring's head,
//     then sched_yield, then again) for a while after a request missed an object that a ring held
//     (NoteHandOff): a process gets what others put as soon as they return, so the daemon takes
//     each put before the get comes, and that get finds it in the shared index. The spin stops
//     when no put comes for kSpinWindow, and does not start again for kBackOff once its yields
//     show a shared CPU (SharedCpu): there it would take time from the clients it serves.
// Polling is per ring: a ring is polled from its doorbell (Poll) or from any take that found a
// record in it, until kIdlePolls polls in a row find it empty; then its word tells its client to
// ring again, in a new epoch. So the timer, the spin and a miss's drain look only at rings that
// puts came to lately: a thousand idle connections cost them nothing.
// While a get waits for an object (WaitingFn), the rings of its user's sessions are not shown as
// polled, so that every put of theirs rings the doorbell and the get is answered at once, not at
// the next poll. Only its user's: a get parked forever must not make every other user's puts send
// a message (a put of another user still reaches it within a poll).
//
// Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_PUT_RINGS_H_
#define DEPOT_DAEMON_PUT_RINGS_H_

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>

#include "daemon/peer.h"
#include "daemon/put_ring.h"
#include "daemon/shared_cpu.h"

namespace depot {

class PutRings {
 public:
  static constexpr std::chrono::microseconds kPollInterval{1000};
  static constexpr int kIdlePolls = 100;
  // After a hand-off (NoteHandOff): how long the rings are watched closely, and for how long
  // without a put found before the watch ends.
  static constexpr std::chrono::milliseconds kHandOffWindow{10};
  static constexpr std::chrono::microseconds kSpinWindow{200};
  // Once the spin's yields show the CPU shared (SharedCpu), it ends, and starts again no sooner
  // than kBackOff later.
  static constexpr std::chrono::milliseconds kBackOff{100};
  // A turn of the timer's takes (TakeTurn): at most this many records of each ring, and no ring
  // begun once this much time has passed.
  static constexpr uint64_t kTurnRecords = 32;
  static constexpr std::chrono::microseconds kTurnTime{250};

  // Takes one put of a session (a body copied out of its ring, not yet verified; whether the
  // session holds it already).
  using TakeFn = std::function<Status(SessionId, std::span<const uint8_t>, bool held)>;
  // A session's ring is broken, or one of its puts was refused: the session must close.
  using FailFn = std::function<void(SessionId, const Status&)>;

  // Whether some get of `uid` waits for an object now.
  using WaitingFn = std::function<bool(uid_t)>;

  PutRings(boost::asio::io_context& io, TakeFn take, FailFn fail, WaitingFn waiting)
      : timer_(io), take_(std::move(take)), fail_(std::move(fail)), waiting_(std::move(waiting)) {}
  PutRings(const PutRings&) = delete;
  PutRings& operator=(const PutRings&) = delete;

  // Makes `session`'s ring (sent to it at hello), a session of `uid`; the memfd's error.
  Result<const PutRing*> Join(SessionId session, uid_t uid);
  void Leave(SessionId session);
  PutRing* Find(SessionId session);

  // Takes what `session`'s ring holds now (at most `most` records); the error when it broke (the
  // caller closes the session).
  Status Take(SessionId session, uint64_t most = UINT64_MAX);
  // Takes what every ring holds now; a session whose ring breaks goes to the FailFn. Whether any
  // ring held a record.
  bool TakeAll();
  // TakeAll of the polled rings only.
  bool TakePolled();
  // A request missed an object that a ring held (TakeAll found it): a process waits for another's
  // puts. The rings are watched closely for a while (Spin).
  void NoteHandOff();
  // The doorbell of `session`: polls its ring from now on, until it stays empty for a while.
  void Poll(SessionId session);
  // A get of `uid` was parked: that user's puts ring the doorbell from now on (until a poll
  // finds no get waiting).
  void NoteParkedGet(uid_t uid);

 private:
  struct Ring {
    std::unique_ptr<PutRing> ring;
    uid_t uid;
    bool polled = false;
    uint64_t epoch = 0;  // times its polling stopped
    int idle_polls = 0;  // polls in a row that found it empty
  };

  void Arm();
  void Tick();
  // One turn of takes from the polled rings that hold records: at most kTurnRecords of each, the
  // ring after the one where the last turn ended first, until kTurnTime has passed. Another turn
  // is posted while records are left.
  void TakeTurn();
  void PostTurn();
  void Spin();
  void PostSpin();
  bool AnyPending() const;  // of the polled rings
  // Takes the rings of `sessions` that hold a record, polling each from then on. Whether any did.
  bool TakeFrom(const std::vector<SessionId>& sessions);
  void SetPolled(SessionId session, Ring& r, bool polled);
  void Publish(const Ring& r) { r.ring->SetPolled(Word(r)); }
  void PublishUser(uid_t uid);  // every ring of `uid`
  uint64_t Word(const Ring& r) const;

  boost::asio::steady_timer timer_;
  TakeFn take_;
  FailFn fail_;
  WaitingFn waiting_;
  std::map<SessionId, Ring> rings_;
  std::set<SessionId> polled_;                  // the rings polled now
  std::map<uid_t, std::set<SessionId>> users_;  // the rings of each user
  bool armed_ = false;                          // the timer waits
  bool turn_posted_ = false;                    // a TakeTurn waits on the loop
  SessionId turn_end_ = 0;                      // the ring the last turn ended at
  std::set<uid_t> urgent_;  // the users some of whose gets wait: their puts ring
  // The spin after a hand-off (NoteHandOff).
  bool spinning_ = false;
  std::chrono::steady_clock::time_point eager_until_{};       // NoteHandOff's window
  std::chrono::steady_clock::time_point last_found_{};        // the spin's last find
  std::chrono::steady_clock::time_point shared_cpu_until_{};  // no spin before then
  SharedCpu shared_cpu_;                                      // what this spin's yields show
  // Posted spins and turns hold it weakly: one that runs after this object went does nothing.
  std::shared_ptr<PutRings*> self_ = std::make_shared<PutRings*>(this);
};

}  // namespace depot

#endif  // DEPOT_DAEMON_PUT_RINGS_H_
