// Tests of the daemon's request handling (daemon/store.h) over time: gets that wait for a seal or
// a deadline, what a disconnect leaves behind, and what a full store evicts. A real Store driven
// through fake peers (tests/store_fixture.h); its timers run on the test's own io_context.
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "tests/store_fixture.h"

using namespace depot;
using namespace depot::test;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

using Codes = std::vector<std::string>;

// Ample for a 30 ms timer on a loaded machine; RunFor returns as soon as no timer is left.
constexpr auto kPatience = 5s;

}  // namespace

TEST_CASE("store: a get waits for the seal", "[store]") {
  StoreHarness h;
  FakeClient& creator = h.Hello();
  FakeClient& waiter = h.Hello();
  Guid g = CreatedGuid(h.Create(creator, {.guid = G(1)}));
  uint64_t unsealed = h.SendGet(waiter, {g}, -1);
  uint64_t uncreated = h.SendGet(waiter, {G(2)}, 60'000);
  CHECK(waiter.peer.received.empty());
  CHECK(h.StatusOf(creator).gets_waiting == 2);

  h.Seal(creator, g);
  std::optional<Message> answer = StoreHarness::Reply(waiter, unsealed);
  REQUIRE(answer);
  CHECK(ResultCodes(*answer) == Codes{"OK"});
  CHECK(answer->fds.size() == 1);
  CHECK(h.Stat(creator, g).As<wire::StatReply>()->info()->refcount() == 1);

  h.Put(creator, 100, false, G(2));  // a GUID not created yet when the get came
  answer = StoreHarness::Reply(waiter, uncreated);
  REQUIRE(answer);
  CHECK(ResultCodes(*answer) == Codes{"OK"});
  CHECK(h.StatusOf(creator).gets_waiting == 0);
}

TEST_CASE("store: the deadline of a get", "[store]") {
  StoreHarness h;
  FakeClient& c = h.Hello();
  Guid present = h.Put(c, 100);
  Guid unsealed = CreatedGuid(h.Create(c, {}));

  SECTION("a poll answers at once") {
    Message m = h.Get(c, {present, G(1), unsealed}, 0);
    CHECK(ResultCodes(m) == Codes{"OK", "NotFound", "Timeout"});
    CHECK_THAT(m.As<wire::GetReply>()->results()->Get(2)->message()->str(),
               Contains("not sealed yet"));
  }
  SECTION("a timeout answers what there is once the deadline passes") {
    constexpr auto kTimeout = 30ms;
    auto start = std::chrono::steady_clock::now();
    uint64_t id = h.SendGet(c, {present, G(1), unsealed}, kTimeout.count());
    CHECK_FALSE(StoreHarness::Reply(c, id));
    h.RunFor(kPatience);
    std::optional<Message> m = StoreHarness::Reply(c, id);
    REQUIRE(m);
    CHECK(std::chrono::steady_clock::now() - start >= kTimeout);
    CHECK(ResultCodes(*m) == Codes{"OK", "Timeout", "Timeout"});
    const auto* results = m->As<wire::GetReply>()->results();
    CHECK_THAT(results->Get(1)->message()->str(), Contains("was not created before the timeout"));
    CHECK_THAT(results->Get(2)->message()->str(), Contains("was not sealed before the timeout"));
    // The object that was there is held until released.
    CHECK(h.Stat(c, present).As<wire::StatReply>()->info()->refcount() == 1);
    h.Release(c, {Handles(*m)[0]});
    CHECK(h.Stat(c, present).As<wire::StatReply>()->info()->refcount() == 0);
    CHECK(h.StatusOf(c).gets_waiting == 0);
  }
  SECTION("a seal before the deadline answers, and the timer then does nothing") {
    uint64_t id = h.SendGet(c, {unsealed}, 30);
    h.Seal(c, unsealed);
    REQUIRE(StoreHarness::Reply(c, id));
    h.RunFor(kPatience);
    CHECK(c.peer.received.empty());
  }
  SECTION("a timeout below -1 is refused") {
    Message m = h.Get(c, {present}, -2);
    CHECK(m.code() == "InvalidArgument");
    CHECK(h.Stat(c, present).As<wire::StatReply>()->info()->refcount() == 0);
  }
}

TEST_CASE("store: closing a session forgets its waiting gets", "[store]") {
  StoreHarness h;
  FakeClient& c = h.Hello();
  FakeClient& waiter = h.Hello();
  Guid present = h.Put(c, 100);
  Guid g = CreatedGuid(h.Create(c, {}));
  h.SendGet(waiter, {present, g}, -1);  // holds `present` while it waits for `g`
  h.SendGet(waiter, {g}, 30);
  CHECK(h.StatusOf(c).gets_waiting == 2);
  CHECK(h.Stat(c, present).As<wire::StatReply>()->info()->refcount() == 1);
  h.Close(waiter);
  CHECK(h.StatusOf(c).gets_waiting == 0);
  CHECK(h.Stat(c, present).As<wire::StatReply>()->info()->refcount() == 0);
  h.Seal(c, g);
  h.RunFor(kPatience);
  CHECK(waiter.peer.received.empty());
  CHECK(h.Stat(c, g).As<wire::StatReply>()->info()->refcount() == 0);
}

TEST_CASE("store: max_pending waiting gets per connection", "[store]") {
  StoreHarness h({.max_pending = 2});
  FakeClient& c = h.Hello();
  FakeClient& other = h.Hello();
  Guid present = h.Put(c, 100);
  uint64_t first = h.SendGet(c, {G(1)}, -1);
  h.SendGet(c, {G(2)}, -1);
  Message m = h.Get(c, {present, G(3)}, -1);
  CHECK(m.code() == "QuotaExceeded");
  CHECK_THAT(m.message(), Contains("2 gets waiting") && Contains("max_pending"));
  // The refused get took no reference; a get that need not wait is still answered.
  CHECK(h.Stat(c, present).As<wire::StatReply>()->info()->refcount() == 0);
  CHECK(ResultCodes(h.Get(c, {present}, -1)) == Codes{"OK"});
  CHECK(ResultCodes(h.Get(c, {G(3)}, 0)) == Codes{"NotFound"});
  h.SendGet(other, {G(3)}, -1);  // a limit per connection

  h.Put(c, 100, false, G(1));
  REQUIRE(StoreHarness::Reply(c, first));
  h.SendGet(c, {G(3)}, -1);
  CHECK(h.Get(c, {G(4)}, -1).code() == "QuotaExceeded");
  CHECK(h.StatusOf(c).gets_waiting == 3);
}

TEST_CASE("store: waiting gets are bounded in GUIDs per connection and per user", "[store]") {
  constexpr uid_t kOther = 5001;
  StoreHarness h(
      {.max_pending_guids = 3, .max_pending_guids_per_user = 5, .allow_users = {kOther}});
  FakeClient& a = h.Hello();
  FakeClient& b = h.Hello();  // the same user
  FakeClient& other = h.Hello(kOther);
  uint64_t first = h.SendGet(a, {G(1), G(2)}, -1);
  Message m = h.Get(a, {G(3), G(4)}, -1);
  CHECK(m.code() == "QuotaExceeded");
  CHECK_THAT(m.message(), Contains("name 2 GUIDs") && Contains("(max_pending_guids)"));
  h.SendGet(a, {G(3)}, -1);  // up to the limit
  h.SendGet(b, {G(5), G(6)}, -1);
  m = h.Get(b, {G(7)}, -1);  // b has room, its user has not
  CHECK(m.code() == "QuotaExceeded");
  CHECK_THAT(m.message(), Contains("name 5 GUIDs") && Contains("(max_pending_guids_per_user)"));
  h.SendGet(other, {G(7), G(8)}, -1);  // another user has its own
  CHECK(h.StatusOf(a).gets_waiting == 4);
  // An answered get gives its GUIDs back.
  h.Put(other, 100, false, G(1));
  h.Put(other, 100, false, G(2));
  REQUIRE(StoreHarness::Reply(a, first));
  h.SendGet(a, {G(9), G(10)}, -1);
  m = h.Get(b, {G(11)}, -1);
  CHECK(m.code() == "QuotaExceeded");
  CHECK_THAT(m.message(), Contains("(max_pending_guids_per_user)"));
}

TEST_CASE("store: a user's connections are bounded, not the daemon's own user's", "[store]") {
  constexpr uid_t kOther = 5001;
  StoreHarness h({.max_sessions_per_user = 2, .allow_users = {kOther}});
  h.Hello(kOther);
  FakeClient& second = h.Hello(kOther);
  FakeClient& third = h.Connect(kOther);
  Status refused = h.SayHello(third);
  CHECK(refused.IsQuotaExceeded());
  CHECK_THAT(refused.message(),
             Contains("already has 2 connections") && Contains("(max_sessions_per_user)"));
  for (int i = 0; i < 3; ++i) h.Hello();  // the daemon's user has no limit
  h.Close(third);
  h.Close(second);
  h.Hello(kOther);  // a closed connection makes room
}

TEST_CASE("store: a disconnect aborts creates and drops references", "[store]") {
  StoreHarness h;
  FakeClient& keeper = h.Hello();
  FakeClient& c = h.Hello();
  Guid held = h.Put(keeper, 100 * kKiB);
  Guid unsealed = CreatedGuid(h.Create(c, {.sizes = {200 * kKiB}}));
  REQUIRE(ResultCodes(h.Get(c, {held})) == Codes{"OK"});
  CHECK(ResultCodes(h.Delete(keeper, {held})) == Codes{"OK"});
  StatusSummary s = h.StatusOf(keeper);
  CHECK(s.creating == 1);
  CHECK(s.deleted == 1);
  CHECK(s.used >= 300 * kKiB);

  h.Close(c);
  s = h.StatusOf(keeper);
  CHECK(s.creating == 0);
  CHECK(s.deleted == 0);
  CHECK(s.used == 0);
  CHECK(s.clients == 1);
  CHECK(h.Stat(keeper, unsealed).code() == "NotFound");
}

TEST_CASE("store: a full store evicts the least recently used", "[store]") {
  // Four segments of 256 KiB; objects of 200 KiB take one each.
  StoreHarness h({.capacity = kMiB, .segment_size = 256 * kKiB});
  FakeClient& c = h.Hello();
  constexpr uint64_t kSize = 200 * kKiB;

  SECTION("evictable objects, least recently used first; referenced ones stay") {
    std::vector<Guid> g;
    for (int i = 0; i < 4; ++i) g.push_back(h.Put(c, kSize, true));
    h.Release(c, Handles(h.Get(c, {g[0]})));  // g[0] is now the most recently used
    Guid e = h.Put(c, kSize, true);
    CHECK(ResultCodes(h.Contains(c, g)) == Codes{"OK", "NotFound", "OK", "OK"});
    CHECK(h.StatusOf(c).evictions == 1);

    h.Get(c, {g[2]});  // held (never released): not evictable while referenced
    Guid f = h.Put(c, kSize, true);
    CHECK(ResultCodes(h.Contains(c, {g[0], g[2], g[3], e, f})) ==
          Codes{"OK", "OK", "NotFound", "OK", "OK"});
    CHECK(h.StatusOf(c).evictions == 2);

    Message all = h.Get(c, {g[0], e, f});
    Message m = h.Create(c, {.sizes = {kSize}, .evictable = true});
    CHECK(m.code() == "StoreFull");
    CHECK(h.StatusOf(c).evictions == 2);
    h.Release(c, Handles(all));
    CHECK(h.Create(c, {.sizes = {kSize}}).code() == "OK");
    CHECK(h.StatusOf(c).evictions == 3);
  }
  SECTION("objects that are not evictable make the store full") {
    for (int i = 0; i < 4; ++i) h.Put(c, kSize);
    Message m = h.Create(c, {.sizes = {kSize}});
    CHECK(m.code() == "StoreFull");
    CHECK_THAT(m.message(), Contains("cannot allocate"));
    CHECK(h.StatusOf(c).evictions == 0);
  }
  SECTION("a create that cannot fit even in an empty store evicts nothing") {
    // Two frames of 600 KiB never fit in 1 MiB: the evictable object stays.
    Guid victim = h.Put(c, 100 * kKiB, true);
    Message m = h.Create(c, {.sizes = {600 * kKiB, 600 * kKiB}});
    CHECK(m.code() == "StoreFull");
    CHECK_THAT(m.message(), Contains("1.2 MiB") && Contains("capacity of 1.0 MiB"));
    CHECK(h.StatusOf(c).evictions == 0);
    CHECK(ResultCodes(h.Contains(c, {victim})) == Codes{"OK"});
  }
  SECTION("the spare segment an empty store keeps gives way to an object that needs its room") {
    h.Delete(c, {h.Put(c, 100 * kKiB)});
    CHECK(h.StatusOf(c).used == 0);
    CHECK(h.StatusOf(c).segments == 1);  // the spare
    // 900 KiB needs a large segment of its own; the spare holds 256 KiB of the 1 MiB budget. It is
    // given back, but this session maps it: its bytes count until the session has dropped it, and
    // the create waits for that.
    uint64_t id = h.SendCreate(c, {.sizes = {900 * kKiB}});
    CHECK_FALSE(StoreHarness::Reply(c, id));
    CHECK(h.StatusOf(c).retired_held == 256 * kKiB);
    CHECK(h.DropRetired(c) == 1);
    h.RunFor(std::chrono::milliseconds(50));  // less than the wait's bound: the drop woke it
    std::optional<Message> created = StoreHarness::Reply(c, id);
    REQUIRE(created);
    CHECK(created->code() == "OK");
  }
}
