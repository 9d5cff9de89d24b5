// EventBus fans out what happens in the store (objects created, sealed, deleted, evicted, freed;
// clients connecting and leaving) to the sessions that subscribed (`depotctl watch`). A session
// sees the events of its own namespace only. A subscriber that stops reading never makes the
// daemon hold events without bound: past a backlog, its events are counted as dropped and the
// count rides with the next event it gets. An event costs in proportion to the subscribers, not
// to the sessions: a thousand connected clients that never subscribed cost nothing.
//
// Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_EVENT_BUS_H_
#define DEPOT_DAEMON_EVENT_BUS_H_

#include <cstdint>
#include <set>
#include <unordered_map>

#include "daemon/object_table.h"
#include "daemon/peer.h"
#include "proto/wire.h"

namespace depot {

class EventBus {
 public:
  // A greeted session, known so that events it causes can name its process; `scope` is its
  // namespace (any pointer that compares equal for sessions that see each other's objects).
  void Join(SessionId session, Peer* peer, const PeerCredentials& creds, const void* scope);
  void Leave(SessionId session) {
    members_.erase(session);
    subscribers_.erase(session);
  }
  void Subscribe(SessionId session);
  bool subscribed(SessionId session) const;

  // Sends `kind` to every subscriber in `scope`. `object` is null for client events; `cause` is
  // the session whose request or disconnect caused it (0: the daemon itself).
  void Emit(wire::EventKind kind, const StoredObject* object, SessionId cause, const void* scope);

  // The event kind of an object table transition.
  static wire::EventKind KindOf(TableEvent e);

 private:
  struct Member {
    Peer* peer;
    int32_t pid;
    uint32_t uid;
    const void* scope;
    bool subscribed = false;
    uint64_t dropped = 0;  // since the last event delivered
  };
  std::unordered_map<SessionId, Member> members_;
  std::set<SessionId> subscribers_;  // of members_
};

}  // namespace depot

#endif  // DEPOT_DAEMON_EVENT_BUS_H_
