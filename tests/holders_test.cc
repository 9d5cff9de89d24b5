// Who holds what: `depotctl stat` lists the processes holding an object and the one creating it,
// `depotctl ls --holder PID` what one process holds; both speak JSON; per-user namespaces keep
// another user's holdings out of sight.
#include <fmt/format.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <set>

#include "tests/daemon_fixture.h"
#include "tests/other_users.h"

using namespace depot;
using namespace depot::test;
using Catch::Matchers::Contains;

namespace {

// A child process that gets `guid` `times` times (without releasing) and creates one object it
// leaves unsealed, then waits until told to go; the parent learns the child's pid and the GUID
// it is creating.
struct Holder {
  pid_t pid = -1;
  Guid creating;
  Channel to_child, to_parent;

  Holder(const Daemon& d, const Guid& guid, int times) {
    pid = Spawn([&, guid, times] {
      Client c = d.Connect();
      std::vector<Object> held;
      for (int i = 0; i < times; ++i) {
        auto o = c.Get(guid);
        if (!o.ok()) return 1;
        held.push_back(std::move(*o));
      }
      auto draft = c.Create({4096});
      if (!draft.ok()) return 2;
      to_parent.Send(draft->guid().ToString());
      to_child.Receive();
      return 0;
    });
    creating = *Guid::Parse(to_parent.Receive());
  }
  ~Holder() {
    to_child.Send("go");
    Wait(pid);
  }
};

}  // namespace

TEST_CASE("stat lists the holders and the creator, ls --holder what one process holds",
          "[holders]") {
  Daemon d;
  Client c = d.Connect();
  auto guid = c.Put(Pattern(1000, 1), Named("held"));
  REQUIRE(guid.ok());
  Holder h(d, *guid, 1);

  std::string out;
  REQUIRE(Ctl(d, {"stat", guid->ToString()}, &out) == 0);
  INFO(out);
  CHECK_THAT(out, Contains(fmt::format("pid {:<8} holders_test", h.pid)));
  CHECK_THAT(out, Contains("references 1"));

  REQUIRE(Ctl(d, {"--json", "stat", guid->ToString()}, &out) == 0);
  CHECK_THAT(out, Contains(fmt::format("\"pid\":{},\"uid\":{},\"process\":\"holders_test\"", h.pid,
                                       ::getuid())));
  CHECK_THAT(out, Contains("\"references\":1"));

  // The object it is creating names it as creator, while it is connected.
  auto info = c.Stat(h.creating);
  REQUIRE(info.ok());
  CHECK(info->creator_pid == h.pid);
  CHECK(info->creator_session != 0);
  CHECK(info->creator_process == "holders_test");
  CHECK(info->holders.empty());

  REQUIRE(Ctl(d, {"ls", "--holder", std::to_string(h.pid)}, &out) == 0);
  CHECK_THAT(out, Contains(guid->ToString()));
  CHECK_THAT(out, Contains(h.creating.ToString()));
  REQUIRE(Ctl(d, {"--json", "ls", "--holder", std::to_string(h.pid)}, &out) == 0);
  CHECK_THAT(out, Contains("\"guid\":\"" + guid->ToString()));
  // This process holds nothing.
  REQUIRE(Ctl(d, {"--json", "ls", "--holder", std::to_string(::getpid())}, &out) == 0);
  CHECK(out == "[]\n");
  CHECK(Ctl(d, {"ls", "--holder", "x"}, &out) == 2);
}

TEST_CASE("references count a process's gets not yet released", "[holders]") {
  Daemon d;
  Client c = d.Connect();
  auto guid = c.Put(Pattern(10, 1));
  REQUIRE(guid.ok());
  Holder h(d, *guid, 1);
  // A second connection of this process, holding it through one get.
  Client mine = d.Connect();
  auto held = mine.Get(*guid);
  REQUIRE(held.ok());
  auto info = c.Stat(*guid);
  REQUIRE(info.ok());
  REQUIRE(info->holders.size() == 2);
  CHECK(info->refcount == 2);
  std::set<int32_t> pids{info->holders[0].pid, info->holders[1].pid};
  CHECK(pids == std::set<int32_t>{h.pid, ::getpid()});
  for (const auto& holder : info->holders) CHECK(holder.references == 1);
}

TEST_CASE("with per-user namespaces another user's holdings stay out of sight", "[holders]") {
  NeedRoot();
  Daemon d =
      StartOpen({"--namespaces", "per_user", "--allow-users", fmt::format("{},{}", kAlice, kBob)});
  // Alice holds an object of her own namespace.
  Channel ready, done;
  pid_t alice = Spawn([&] {
    // Every failure still tells the parent (an empty line), which would otherwise wait forever.
    ConnectOptions options;
    options.socket_path = d.socket();
    auto c = ::setresgid(kAlice, kAlice, kAlice) == 0 && ::setresuid(kAlice, kAlice, kAlice) == 0
                 ? Client::Connect(options)
                 : Result<Client>(Status::PermissionDenied("setresuid"));
    auto guid = c.ok() ? c->Put(Pattern(100, 1)) : Result<Guid>(c.status());
    auto held = guid.ok() ? c->Get(*guid) : Result<Object>(guid.status());
    ready.Send(held.ok() ? guid->ToString() : "");
    if (!held.ok()) return 1;
    done.Receive();
    return 0;
  });
  std::string guid = ready.Receive();
  REQUIRE_FALSE(guid.empty());
  // Bob asks about Alice's process and object: his namespace has neither.
  int rc = RunAs(kBob, kBob, {}, [&] {
    Client c = d.Connect();
    auto held = c.ListHeldBy(alice);
    if (!held.ok() || !held->objects.empty()) return 1;
    auto stat = c.Stat(*Guid::Parse(guid));
    return stat.status().code() == Status::Code::kNotFound ? 0 : 2;
  });
  CHECK(rc == 0);
  // Alice sees her own holding.
  rc = RunAs(kAlice, kAlice, {}, [&] {
    Client c = d.Connect();
    auto held = c.ListHeldBy(alice);
    if (!held.ok() || held->objects.size() != 1) return 1;
    auto stat = c.Stat(*Guid::Parse(guid));
    return stat.ok() && stat->holders.size() == 1 && stat->holders[0].pid == alice ? 0 : 2;
  });
  CHECK(rc == 0);
  done.Send("go");
  CHECK(Wait(alice) == 0);
}
