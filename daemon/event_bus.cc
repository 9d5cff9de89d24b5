#include "daemon/event_bus.h"

#include "common/wall_clock.h"

namespace depot {

void EventBus::Join(SessionId session, Peer* peer, const PeerCredentials& creds,
                    const void* scope) {
  members_.insert_or_assign(session, Member{peer, creds.pid, creds.uid, scope});
  subscribers_.erase(session);
}

void EventBus::Subscribe(SessionId session) {
  if (auto it = members_.find(session); it != members_.end()) {
    it->second.subscribed = true;
    subscribers_.insert(session);
  }
}

bool EventBus::subscribed(SessionId session) const {
  auto it = members_.find(session);
  return it != members_.end() && it->second.subscribed;
}

wire::EventKind EventBus::KindOf(TableEvent e) {
  static constexpr wire::EventKind kKinds[] = {wire::EventKind::Created, wire::EventKind::Sealed,
                                               wire::EventKind::Aborted, wire::EventKind::Deleted,
                                               wire::EventKind::Evicted, wire::EventKind::Freed,
                                               wire::EventKind::Spilled, wire::EventKind::Restored};
  return kKinds[static_cast<int>(e)];
}

void EventBus::Emit(wire::EventKind kind, const StoredObject* object, SessionId cause,
                    const void* scope) {
  constexpr size_t kMaxBacklog = 4096;
  if (subscribers_.empty()) return;
  auto cause_it = members_.find(cause);
  for (SessionId sid : subscribers_) {
    Member& m = members_.at(sid);
    if (m.scope != scope) continue;
    if (m.peer->Backlog() >= kMaxBacklog) {
      ++m.dropped;
      continue;
    }
    flatbuffers::FlatBufferBuilder fbb(256);
    flatbuffers::Offset<flatbuffers::String> name;
    if (object) name = fbb.CreateString(object->name().data(), object->name().size());
    wire::EventBuilder b(fbb);
    b.add_kind(kind);
    b.add_unix_ns(WallClockNs());
    wire::Guid g;
    if (object) {
      g = proto::ToWire(object->guid);
      b.add_guid(&g);
      b.add_name(name);
      b.add_size(object->size());
    }
    b.add_session_id(cause);
    if (cause_it != members_.end()) {
      b.add_pid(cause_it->second.pid);
      b.add_uid(cause_it->second.uid);
    }
    b.add_dropped(m.dropped);
    fbb.Finish(b.Finish());
    m.dropped = 0;
    m.peer->Send(proto::Encode(static_cast<uint16_t>(proto::MsgType::kEvent), 0, fbb), {});
  }
}

}  // namespace depot
