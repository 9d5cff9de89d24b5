// OwnerScopes remembers, per session, the objects it created owner-scoped (CreateRequest's
// owner_scoped), and deletes those still there when the session closes: such an object lives no
// longer than the connection that made it, as a transfer between two processes should not
// outlive its sender.
//
// Memory is bounded by the live objects: a session's list is pruned of objects gone (deleted,
// evicted, aborted) whenever it has doubled since the last pruning, so a session that creates
// and deletes forever does not grow it.
//
// Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_OWNER_SCOPES_H_
#define DEPOT_DAEMON_OWNER_SCOPES_H_

#include <cstddef>
#include <unordered_map>
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

 private:
  struct Scope {
    std::vector<Guid> guids;
    size_t pruned_size = 0;  // the list's size after the last pruning
  };
  static bool StillOwned(const ObjectTable& table, SessionId session, const Guid& guid);

  std::unordered_map<SessionId, Scope> scopes_;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_OWNER_SCOPES_H_
