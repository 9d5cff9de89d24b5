// Tests for EventBus against its contract (daemon/event_bus.h): events go to the subscribers of
// the namespace they happened in, naming the session that caused them and its process; a
// subscriber that stops reading is not sent more past a backlog, and the next event it gets says
// how many it missed; a session that left gets nothing.
#include "daemon/event_bus.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "proto/wire.h"

namespace depot {
namespace {

// A session's far end: what it was sent, and a backlog the test sets.
class Subscriber : public Peer {
 public:
  void Send(std::vector<uint8_t> message, std::vector<UniqueFd>) override {
    sent.push_back(std::move(message));
  }
  size_t Backlog() const override { return backlog; }
  // The events sent, decoded.
  std::vector<const wire::Event*> Events() const {
    std::vector<const wire::Event*> out;
    for (const auto& m : sent) {
      proto::Header h;
      std::memcpy(&h, m.data(), sizeof h);
      REQUIRE(h.type == static_cast<uint16_t>(proto::MsgType::kEvent));
      REQUIRE(h.request_id == 0);
      std::span<const uint8_t> body(m.data() + sizeof h, m.size() - sizeof h);
      REQUIRE(proto::VerifyBody(h.type, body));
      out.push_back(proto::Body<wire::Event>(body));
    }
    return out;
  }

  std::vector<std::vector<uint8_t>> sent;
  size_t backlog = 0;
};

StoredObject Object(const std::string& name, uint64_t size) {
  Location frame{.segment = 1, .size = size};
  StoredObject o({&frame, 1}, name, {});
  o.guid = Guid{5, 6};
  return o;
}

// Two namespaces, as the scopes the bus compares.
const int kShared = 0;
const int kOther = 1;
const void* const kScope = &kShared;
const void* const kOtherScope = &kOther;

TEST_CASE("EventBus sends an event to the subscribers of its namespace, naming its cause",
          "[event_bus]") {
  EventBus bus;
  Subscriber watcher, quiet, elsewhere, cause;
  bus.Join(1, &watcher, {.pid = 11, .uid = 1000}, kScope);
  bus.Join(2, &quiet, {.pid = 22, .uid = 1000}, kScope);
  bus.Join(3, &elsewhere, {.pid = 33, .uid = 1001}, kOtherScope);
  bus.Join(4, &cause, {.pid = 44, .uid = 1002}, kScope);
  bus.Subscribe(1);
  bus.Subscribe(3);
  CHECK(bus.subscribed(1));
  CHECK_FALSE(bus.subscribed(2));
  CHECK_FALSE(bus.subscribed(9));
  StoredObject o = Object("frame", 4096);
  bus.Emit(wire::EventKind::Sealed, &o, 4, kScope);
  REQUIRE(watcher.Events().size() == 1);
  const wire::Event* e = watcher.Events()[0];
  CHECK(e->kind() == wire::EventKind::Sealed);
  CHECK(e->name()->str() == "frame");
  CHECK(e->size() == 4096);
  CHECK(e->guid()->hi() == 5);
  CHECK(e->session_id() == 4);
  CHECK(e->pid() == 44);
  CHECK(e->uid() == 1002);
  CHECK(e->dropped() == 0);
  CHECK(quiet.sent.empty());      // not subscribed
  CHECK(elsewhere.sent.empty());  // another namespace
  CHECK(cause.sent.empty());
  // A client event has no object; one the daemon caused (session 0) names no process.
  bus.Emit(wire::EventKind::ClientConnected, nullptr, 0, kScope);
  REQUIRE(watcher.Events().size() == 2);
  CHECK(watcher.Events()[1]->guid() == nullptr);
  CHECK(watcher.Events()[1]->pid() == 0);
  // Gone: nothing more.
  bus.Leave(1);
  CHECK_FALSE(bus.subscribed(1));
  bus.Emit(wire::EventKind::Deleted, &o, 4, kScope);
  CHECK(watcher.sent.size() == 2);
}

TEST_CASE("EventBus drops events for a subscriber that fell behind and says how many",
          "[event_bus]") {
  EventBus bus;
  Subscriber slow;
  bus.Join(1, &slow, {.pid = 11, .uid = 1000}, kScope);
  bus.Subscribe(1);
  StoredObject o = Object("x", 64);
  slow.backlog = 1u << 20;
  for (int i = 0; i < 5; ++i) bus.Emit(wire::EventKind::Created, &o, 0, kScope);
  CHECK(slow.sent.empty());
  slow.backlog = 0;
  bus.Emit(wire::EventKind::Sealed, &o, 0, kScope);
  bus.Emit(wire::EventKind::Deleted, &o, 0, kScope);
  auto events = slow.Events();
  REQUIRE(events.size() == 2);
  CHECK(events[0]->dropped() == 5);
  CHECK(events[1]->dropped() == 0);
}

TEST_CASE("EventBus names each table transition's event kind", "[event_bus]") {
  CHECK(EventBus::KindOf(TableEvent::kCreated) == wire::EventKind::Created);
  CHECK(EventBus::KindOf(TableEvent::kSealed) == wire::EventKind::Sealed);
  CHECK(EventBus::KindOf(TableEvent::kAborted) == wire::EventKind::Aborted);
  CHECK(EventBus::KindOf(TableEvent::kDeleted) == wire::EventKind::Deleted);
  CHECK(EventBus::KindOf(TableEvent::kEvicted) == wire::EventKind::Evicted);
  CHECK(EventBus::KindOf(TableEvent::kFreed) == wire::EventKind::Freed);
  CHECK(EventBus::KindOf(TableEvent::kSpilled) == wire::EventKind::Spilled);
  CHECK(EventBus::KindOf(TableEvent::kRestored) == wire::EventKind::Restored);
}

}  // namespace
}  // namespace depot
