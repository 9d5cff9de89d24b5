// QuotaLedger counts what each user and each connection has created and not yet freed, and
// refuses a create that would pass a limit. Counts are kept whether or not limits are set, since
// `depotctl status` and `depotctl clients` show them.
//
// Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_QUOTA_LEDGER_H_
#define DEPOT_DAEMON_QUOTA_LEDGER_H_

#include <sys/types.h>

#include <cstdint>
#include <unordered_map>

#include "daemon/peer.h"
#include "depot/status.h"
#include "depot/store_status.h"

namespace depot {

// A limit on objects created and not yet freed: 0 is no limit.
struct Quota {
  uint64_t bytes = 0;
  uint64_t objects = 0;
  bool limited() const { return bytes != 0 || objects != 0; }
};

struct QuotaUsage {
  uint64_t bytes = 0;
  uint64_t objects = 0;
};

class QuotaLedger {
 public:
  QuotaLedger(Quota per_user, Quota per_client) : user_(per_user), client_(per_client) {}

  // QuotaExceeded, naming the limit and its config key, when `session` (of user `uid`) creating
  // one more object of `bytes` would pass a limit; OK otherwise.
  Status Check(uid_t uid, SessionId session, uint64_t bytes) const;

  // An object of `bytes` was created by `session` of user `uid`, or freed. A session already
  // forgotten is not counted.
  void Charge(uid_t uid, SessionId session, uint64_t bytes);
  void Credit(uid_t uid, SessionId session, uint64_t bytes);
  // An object a previous daemon stored, served again at start (from spill_dir or kept memory):
  // it counts against its user as before, and against no connection of this daemon.
  void ChargeRestored(uid_t uid, uint64_t bytes);

  // Bytes alone, for a lease (LeaseTable): its bytes count against the quota while it is held,
  // and each object put into it then counts one object more (CountObject) and takes over its
  // bytes, which are credited when it is freed.
  void ChargeBytes(uid_t uid, SessionId session, uint64_t bytes);
  void CreditBytes(uid_t uid, SessionId session, uint64_t bytes);
  void CountObject(uid_t uid, SessionId session);

  // The connection ended; what it created is still counted against its user until freed.
  void ForgetSession(SessionId session) { sessions_.erase(session); }

  QuotaUsage OfSession(SessionId session) const;
  // Adds the limits and each user's usage to a status.
  void Report(StoreStatus& status) const;
  // Users with objects (entries of users whose objects were all freed read as zero).
  const std::unordered_map<uid_t, QuotaUsage>& users() const { return users_; }
  const Quota& user_quota() const { return user_; }
  const Quota& client_quota() const { return client_; }

 private:
  Quota user_;
  Quota client_;
  // Entries stay when they reach zero: a user who puts and deletes in a loop would otherwise
  // cost an allocation per object.
  std::unordered_map<uid_t, QuotaUsage> users_;
  std::unordered_map<SessionId, QuotaUsage> sessions_;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_QUOTA_LEDGER_H_
