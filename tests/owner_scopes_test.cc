// Owner-scoped objects (CreateOptions::owner_scoped): deleted when the connection that created
// them closes, whether it closes cleanly or its process is killed; others' objects, and views
// readers hold, are untouched. And daemon/owner_scopes.h's memory stays bounded.
#include "daemon/owner_scopes.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "daemon/object_table.h"
#include "tests/daemon_fixture.h"

using namespace depot;
using namespace depot::test;
using namespace std::chrono_literals;

namespace {

CreateOptions OwnerScoped() {
  CreateOptions o;
  o.owner_scoped = true;
  return o;
}

}  // namespace

TEST_CASE("owner-scoped objects go with their creator's connection even when it is killed",
          "[owner_scopes]") {
  Daemon d;
  Client observer = d.Connect();
  Channel made;
  pid_t owner = Spawn([&] {
    auto c = Client::Connect({d.socket(), "owner"});
    if (!c.ok()) return 1;
    auto scoped = c->Put(Pattern(1 << 20, 1), OwnerScoped());
    auto kept = c->Put(Pattern(100, 2));
    auto unsealed = c->Create({100}, OwnerScoped());
    if (!scoped.ok() || !kept.ok() || !unsealed.ok()) return 2;
    made.Send(scoped->ToString() + " " + kept->ToString());
    ::pause();
    return 0;
  });
  std::string guids = made.Receive();
  Guid scoped = *Guid::Parse(guids.substr(0, guids.find(' ')));
  Guid kept = *Guid::Parse(guids.substr(guids.find(' ') + 1));
  auto view = observer.Get(scoped);  // a reader holds it across its owner's death
  REQUIRE(view.ok());
  CHECK(observer.Stat(scoped).ok());

  ::kill(owner, SIGKILL);
  Wait(owner);
  // Stat asks the daemon (Contains would answer from the reference this client holds).
  REQUIRE(WaitFor([&] { return observer.Stat(scoped).status().IsNotFound(); }));
  CHECK(*observer.Contains(kept));  // not owner-scoped: stays
  CHECK(observer.GetStatus()->objects_creating == 0);
  CHECK(view->frame(0)[7] == Pattern(1 << 20, 1)[7]);  // the reader's view still reads
}

TEST_CASE("owner-scoped objects go at a clean close but ones deleted or retaken stay",
          "[owner_scopes]") {
  Daemon d;
  Client observer = d.Connect();
  Guid scoped, deleted_early;
  {
    Client c = d.Connect();
    scoped = *c.Put(Pattern(100, 1), OwnerScoped());
    deleted_early = *c.Put(Pattern(100, 2), OwnerScoped());
    REQUIRE(c.Delete(deleted_early).ok());
    // Another connection takes the freed GUID: not the closing connection's to delete.
    CreateOptions retake;
    retake.guid = deleted_early;
    REQUIRE(observer.Put(Pattern(100, 3), retake).ok());
  }
  REQUIRE(WaitFor([&] { return !*observer.Contains(scoped); }));
  CHECK(*observer.Contains(deleted_early));
}

TEST_CASE("owner_scopes: a session's list is pruned of objects gone", "[owner_scopes]") {
  ObjectTable table([](const StoredObject&) {}, [] { return int64_t{0}; });
  OwnerScopes scopes;
  constexpr SessionId kSession = 7;
  for (uint64_t i = 1; i <= 10000; ++i) {
    Guid g{i, i};
    NewObject n;
    n.guid = g;
    n.frames.push_back(Location{.segment = 1, .offset = 0, .size = 10});
    n.creator = kSession;
    REQUIRE(table.Create(std::move(n)).ok());
    REQUIRE(table.Seal(kSession, g).ok());
    scopes.Add(kSession, g, table);
    if (i % 100 != 0) REQUIRE(table.Delete(g).ok());  // one in a hundred stays
  }
  CHECK(scopes.remembered(kSession) <= 2 * 100 + 64);
  scopes.Close(kSession, table);
  CHECK(scopes.remembered(kSession) == 0);
  CHECK(table.counts().sealed == 0);  // the ones that stayed went at the close
}
