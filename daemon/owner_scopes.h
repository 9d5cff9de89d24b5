// OwnerScopes remembers, per session, the objects it created owner-scoped (CreateRequest's
// owner_scoped), and deletes those still there when the session closes: such an object lives no
// longer than the connection that made it, as a transfer between two processes should not
// outlive its sender.
//
// After a crash of depotd the next one serves the owner-scoped objects it kept as *orphans*: their
// connections ended with the daemon, but the processes that made them may carry on (their
// library reconnects). An orphan lives as long as its process (pid and uid) has a connection:
// it is deleted when the grace period ends with none, or when the process's last connection
// closes (a holder keeps its mapping until it releases it). A process with several clients
// keeps its orphans until the last of them goes, since a new connection cannot tell which of
// them made an object.
//
// Memory is bounded by the live objects: a session's list is pruned of objects gone (deleted,
// evicted, aborted) whenever it has doubled since the last pruning, so a session that creates
// and deletes forever does not grow it.
//
// Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_OWNER_SCOPES_H_
#define DEPOT_DAEMON_OWNER_SCOPES_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "daemon/object_table.h"
#include "depot/guid.h"

namespace depot {

class OwnerScopes {
 public:
  // `session` created the object `guid` in `table`, owner-scoped.
  void Add(SessionId session, const Guid& guid, const ObjectTable& table);

  // `session` closed: deletes from `table` each of its owner-scoped objects that is still its
  // own (a GUID deleted and taken again by another session is left alone). Objects it was still
  // creating are the table's to abort (ObjectTable::DropSession).
  void Close(SessionId session, ObjectTable& table);

  // How many GUIDs are remembered for `session` (for tests).
  size_t remembered(SessionId session) const;

  // `o` is an owner-scoped object a previous daemon kept (adopted: no session created it).
  void Orphan(const StoredObject& o);
  // The processes (pid, uid) with orphans.
  std::vector<std::pair<int32_t, uint32_t>> Orphaned() const;
  bool HasOrphans(int32_t pid, uint32_t uid) const { return orphans_.contains({pid, uid}); }
  // Deletes from `table` the orphans of process `pid` of user `uid` still there, and forgets
  // them; how many it deleted.
  size_t DropOrphans(int32_t pid, uint32_t uid, ObjectTable& table);

 private:
  struct Scope {
    std::vector<Guid> guids;
    size_t pruned_size = 0;  // the list's size after the last pruning
  };
  static bool StillOwned(const ObjectTable& table, SessionId session, const Guid& guid);

  std::unordered_map<SessionId, Scope> scopes_;
  std::map<std::pair<int32_t, uint32_t>, std::vector<Guid>> orphans_;  // by creator (pid, uid)
};

}  // namespace depot

#endif  // DEPOT_DAEMON_OWNER_SCOPES_H_
