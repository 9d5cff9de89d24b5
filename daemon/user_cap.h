// UserCap counts something each user holds of the daemon's (connections that have not said hello,
// objects held through depotd) and bounds it per user, so that no user can grow the daemon
// without bound or take what every other user shares: a count one user can raise has a per-user
// cap, with its error (QuotaExceeded naming the key that sets it) and its refusals counted for
// the metrics. Not thread-safe: the daemon's loop owns it.
#ifndef DEPOT_DAEMON_USER_CAP_H_
#define DEPOT_DAEMON_USER_CAP_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <unordered_map>

#include "depot/status.h"

namespace depot {

class UserCap {
 public:
  // `what` names what is counted, as in "user 1000 already has 64 <what>"; `key` is the
  // configuration key of `per_user`.
  UserCap(uint64_t per_user, std::string what, std::string key)
      : per_user_(per_user), what_(std::move(what)), key_(std::move(key)) {}

  // One more for `uid`; QuotaExceeded (counted in refused()) when it has per_user() already, and
  // then nothing is counted.
  Status Take(uid_t uid);
  // `n` that Take counted for `uid` are given back.
  void Give(uid_t uid, uint64_t n = 1);

  uint64_t per_user() const { return per_user_; }
  uint64_t refused() const { return refused_; }
  // What the user with the most holds.
  uint64_t top_user() const;

 private:
  uint64_t per_user_;
  std::string what_;
  std::string key_;
  uint64_t refused_ = 0;
  std::unordered_map<uid_t, uint64_t> held_;  // users with any; none at 0
};

}  // namespace depot

#endif  // DEPOT_DAEMON_USER_CAP_H_
