// ParkedCreates counts the creates that wait for objects to be written to disk (SpillStore::
// MakeRoomFor): each holds a copy of its request until it is asked again, and a request may be
// up to max_message_size, so what they hold is bounded per connection in count (max_pending) and
// in bytes (max_pending_bytes), and per user in bytes (max_parked_bytes_per_user).
//
// Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_PARKED_CREATES_H_
#define DEPOT_DAEMON_PARKED_CREATES_H_

#include <sys/types.h>

#include <cstdint>
#include <unordered_map>

#include "daemon/peer.h"
#include "depot/status.h"

namespace depot {

struct ParkedCreateLimits {
  uint32_t per_session = 1024;                      // max_pending
  uint64_t bytes_per_session = uint64_t{64} << 20;  // max_pending_bytes
  uint64_t bytes_per_user = uint64_t{256} << 20;    // max_parked_bytes_per_user
};

class ParkedCreates {
 public:
  explicit ParkedCreates(ParkedCreateLimits limits) : limits_(limits) {}

  // Counts a create of `bytes` (its copied request) from `session` of `uid` as waiting, or
  // QuotaExceeded naming the limit it would pass (nothing counted).
  Status Admit(SessionId session, uid_t uid, uint64_t bytes);
  // The create counted by Admit was asked again (or dropped): its copy is gone.
  void Release(SessionId session, uid_t uid, uint64_t bytes);

  uint64_t bytes() const { return bytes_; }
  const std::unordered_map<uid_t, uint64_t>& bytes_by_user() const { return per_user_; }

 private:
  struct Parked {
    uint32_t creates = 0;
    uint64_t bytes = 0;
  };

  ParkedCreateLimits limits_;
  std::unordered_map<SessionId, Parked> per_session_;  // absent: nothing waiting
  std::unordered_map<uid_t, uint64_t> per_user_;       // absent: nothing waiting
  uint64_t bytes_ = 0;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_PARKED_CREATES_H_
