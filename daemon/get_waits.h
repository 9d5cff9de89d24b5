// GetWaits holds the gets that wait: a get naming objects that are not created or not sealed
// yet is parked here, with the references it already took, until every object is sealed (then
// it is answered in full) or its timeout passes (then it is answered with what it has, Timeout
// for the rest). What waits is bounded per connection in gets (max_pending) and in the GUIDs they
// name (max_pending_guids), and per user in GUIDs (max_pending_guids_per_user): a parked GUID
// costs the daemon about kBytesPerGuid, so a connection or a user naming many missing objects
// cannot make it swell (2,048 GUIDs in each of 1,024 gets took about 250 MiB per connection).
//
// Not thread-safe: the daemon's single loop owns it; timers fire on that loop.
#ifndef DEPOT_DAEMON_GET_WAITS_H_
#define DEPOT_DAEMON_GET_WAITS_H_

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "daemon/object_table.h"
#include "daemon/peer.h"

namespace depot {

// One get, from its request until its reply.
struct GetWait {
  SessionId session = 0;
  uid_t uid = 0;  // the session's user, whose parked GUIDs are counted together
  uint64_t request_id = 0;
  ObjectTable* table = nullptr;  // of the session's namespace
  std::vector<Guid> guids;
  std::vector<const StoredObject*> acquired;  // per guid; nullptr while missing
  std::vector<Status> errors;                 // per guid, for results that will not come
  size_t missing = 0;
  std::unique_ptr<boost::asio::steady_timer> timer;

  // Gives back every reference the get took: nothing is handed over.
  void ReleaseAll() const;
};

struct GetWaitLimits {
  uint32_t gets_per_session = 1024;    // max_pending
  uint32_t guids_per_session = 16384;  // max_pending_guids
  uint32_t guids_per_user = 65536;     // max_pending_guids_per_user
};

class GetWaits {
 public:
  // What one parked GUID costs, roughly: its entry in the get's three vectors (a Guid, a
  // pointer, a Status) and its node and bucket in waiting_on_, with the allocator's overhead.
  // Measured: 1,024 gets of 2,048 GUIDs grew the daemon by about 250 MiB, 125 bytes a GUID.
  static constexpr uint64_t kBytesPerGuid = 128;

  // `answer` replies to a get that is complete or out of time (and is handed its references).
  using AnswerFn = std::function<void(GetWait&)>;

  GetWaits(boost::asio::io_context& io, GetWaitLimits limits, AnswerFn answer)
      : io_(io), limits_(limits), answer_(std::move(answer)) {}

  // Answers `w` now when nothing is missing, else parks it (moving it in) until the missing
  // objects are sealed or `timeout_ms` passes (-1: no limit). QuotaExceeded naming the limit,
  // with `w` untouched, when its session already has max_pending gets waiting, or when its GUIDs
  // would take its session past max_pending_guids or its user past max_pending_guids_per_user.
  Status Park(GetWait& w, int64_t timeout_ms);

  // `guid` was sealed in `table`: the gets waiting for it there take a reference, and those now
  // complete are answered.
  void Wake(ObjectTable& table, const Guid& guid);

  // `guid` in `table` will not come (its restore from disk failed): the gets waiting for it
  // there get `why` for it, and those now complete are answered.
  void Fail(ObjectTable& table, const Guid& guid, const Status& why);

  // The session ended: its parked gets are forgotten, unanswered.
  void DropSession(SessionId session);

  size_t size() const { return waits_.size(); }
  // GUIDs named by the parked gets, in all and by user.
  uint64_t guids() const { return guids_; }
  const std::unordered_map<uid_t, uint64_t>& guids_by_user() const { return per_user_; }

 private:
  void Answer(uint64_t wait_id);
  // Takes the gets waiting for `guid` in `table` out of the index, and calls `each` on every
  // result of theirs still waiting for it; answers those left with nothing missing.
  void Settle(ObjectTable& table, const Guid& guid,
              const std::function<void(GetWait&, size_t)>& each);
  // Removes a parked get and its index entries; nullopt when it is already gone.
  std::optional<GetWait> Take(uint64_t wait_id);

  struct Parked {
    size_t gets = 0;
    uint64_t guids = 0;
  };

  boost::asio::io_context& io_;
  GetWaitLimits limits_;
  AnswerFn answer_;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, GetWait> waits_;
  std::unordered_multimap<Guid, uint64_t> waiting_on_;  // guid -> wait id
  std::unordered_map<SessionId, Parked> per_session_;   // what each session has parked
  std::unordered_map<uid_t, uint64_t> per_user_;        // GUIDs each user has parked (none: absent)
  uint64_t guids_ = 0;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_GET_WAITS_H_
