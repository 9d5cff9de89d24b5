// Who may connect (SO_PEERCRED against the allow lists), per-user namespaces, and quotas. The
// tests that need a second user run client processes under throwaway uids, which needs root; they
// skip, saying so, elsewhere.
#include <catch2/catch.hpp>

#include "tests/other_users.h"

using namespace depot;
using namespace depot::test;
using namespace std::chrono_literals;

namespace {

// The status code of connecting (0 when admitted), as a child's exit code.
int ConnectCode(const Daemon& d) {
  ConnectOptions o;
  o.socket_path = d.socket();
  auto c = Client::Connect(o);
  if (!c.ok()) {
    std::fprintf(stderr, "%s\n", c.status().ToString().c_str());
    return static_cast<int>(c.status().code());
  }
  return c->Ping().ok() ? 0 : 99;
}

constexpr int kDenied = static_cast<int>(Status::Code::kPermissionDenied);

}  // namespace

TEST_CASE("by default the daemon's user and the socket's group are admitted and others refused",
          "[access]") {
  NeedRoot();
  Daemon d = StartOpen({});
  CHECK(ConnectCode(d) == 0);                                        // root, the daemon's own user
  CHECK(RunAs(kAlice, 0, {}, [&] { return ConnectCode(d); }) == 0);  // the socket's group (0)
  CHECK(RunAs(kAlice, kAlice, {}, [&] { return ConnectCode(d); }) == kDenied);
  CHECK(RunAs(kAlice, kAlice, {0}, [&] { return ConnectCode(d); }) == 0);  // supplementary
  // The refusal is logged, naming the uid.
  CHECK(WaitFor(
      [&] { return d.Log().find("uid 41001 may not use this depotd") != std::string::npos; }));
}

TEST_CASE("allow lists admit the users and groups they name and nobody else", "[access]") {
  NeedRoot();
  Daemon d = StartOpen(
      {"--allow-users", std::to_string(kAlice), "--allow-groups", std::to_string(kStaff)});
  CHECK(RunAs(kAlice, kAlice, {}, [&] { return ConnectCode(d); }) == 0);
  CHECK(RunAs(kBob, kBob, {kStaff}, [&] { return ConnectCode(d); }) == 0);
  CHECK(RunAs(kBob, kBob, {}, [&] { return ConnectCode(d); }) == kDenied);
  // With lists given, the socket's group no longer admits by itself.
  CHECK(RunAs(kBob, 0, {}, [&] { return ConnectCode(d); }) == kDenied);
  // The refused client reads why.
  int rc = RunAs(kBob, kBob, {}, [&] {
    ConnectOptions o;
    o.socket_path = d.socket();
    auto c = Client::Connect(o);
    return !c.ok() && c.status().IsPermissionDenied() &&
                   c.status().message().find("uid 41002") != std::string::npos &&
                   c.status().message().find("allow_users") != std::string::npos
               ? 0
               : 1;
  });
  CHECK(rc == 0);
  // Other clients are not disturbed by refusals.
  CHECK(d.Connect().Put(Pattern(1000, 1)).ok());
}

TEST_CASE("per-user namespaces keep each user's objects and segments apart", "[access]") {
  NeedRoot();
  Daemon d = StartOpen({"--namespaces", "per_user", "--segment-size", "4MiB", "--allow-users",
                        std::to_string(kAlice) + "," + std::to_string(kBob)});
  const Guid guid = Guid::Random();
  auto put_as = [&](uid_t uid, uint32_t seed) {
    return RunAs(uid, uid, {}, [&] {
      Client c = d.Connect();
      CreateOptions o;
      o.guid = guid;
      auto id = c.Put(Pattern(200000, seed), o);  // above the inline limit: a mapped segment
      if (!id.ok()) {
        std::fprintf(stderr, "put as uid %u: %s\n", uid, id.status().ToString().c_str());
        return 1;
      }
      auto obj = c.Get(guid);
      if (!obj.ok()) return 2;
      // The bytes live in a segment of this user's namespace.
      std::string map = MappingOf(obj->frame(0).data());
      return map.find("-u" + std::to_string(uid) + "-") != std::string::npos ? 0 : 3;
    });
  };
  REQUIRE(put_as(kAlice, 1) == 0);
  // Bob sees nothing of Alice's, and the same GUID names an object of his own.
  int bob = RunAs(kBob, kBob, {}, [&] {
    Client c = d.Connect();
    if (!c.Get(guid, kNoWait).status().IsNotFound()) return 1;
    auto page = c.List();
    if (!page.ok() || !page->objects.empty()) return 2;
    if (!c.Stat(guid).status().IsNotFound()) return 3;
    if (!c.Delete(std::span<const Guid>(&guid, 1))[0].IsNotFound()) return 4;
    return 0;
  });
  CHECK(bob == 0);
  CHECK(put_as(kBob, 2) == 0);
  // Each reads its own bytes under the one GUID.
  for (auto [uid, seed] : {std::pair{kAlice, 1u}, std::pair{kBob, 2u}}) {
    int rc = RunAs(uid, uid, {}, [&, seed = seed] {
      auto obj = d.Connect().Get(guid, kNoWait);
      return obj.ok() &&
                     std::memcmp(obj->frame(0).data(), Pattern(200000, seed).data(), 200000) == 0
                 ? 0
                 : 1;
    });
    CHECK(rc == 0);
  }
  auto status = d.Connect().GetStatus();
  REQUIRE(status.ok());
  CHECK(status->per_user_namespaces);
  CHECK(status->objects_sealed == 2);
  CHECK(status->namespaces == 3);  // Alice's, Bob's, and root's own (this connection)
}

TEST_CASE("per-user namespaces refuse prefault at start-up", "[access]") {
  std::string err;
  CHECK(Run({DEPOTD_PATH, "--socket", TempDir() + "/s", "--capacity", "16MiB", "--prefault",
             "--namespaces", "per_user"},
            nullptr, &err) != 0);
  CHECK(err.find("prefault") != std::string::npos);
}

TEST_CASE("quotas per user and per connection give QuotaExceeded naming the limit", "[access]") {
  Daemon d({"--capacity", "64MiB", "--user-quota-objects", "3", "--user-quota-bytes", "4MiB",
            "--client-quota-objects", "2"});
  Client a = d.Connect();
  Client b = d.Connect();
  std::vector<Guid> made;
  for (int i = 0; i < 2; ++i) {
    auto id = a.Put(Pattern(1000, i));
    REQUIRE(id.ok());
    made.push_back(*id);
  }
  auto third = a.Put(Pattern(1000, 3));
  REQUIRE(third.status().IsQuotaExceeded());
  CHECK(third.status().message().find("client_quota_objects") != std::string::npos);

  auto from_b = b.Put(Pattern(1000, 4));  // the same user, another connection
  REQUIRE(from_b.ok());
  auto over_user = b.Put(Pattern(1000, 5));
  REQUIRE(over_user.status().IsQuotaExceeded());
  CHECK(over_user.status().message().find("uid " + std::to_string(::getuid())) !=
        std::string::npos);
  CHECK(over_user.status().message().find("user_quota_objects") != std::string::npos);

  // What is counted is what exists: a delete makes room again.
  REQUIRE(a.Delete(std::span<const Guid>(made.data(), 1))[0].ok());
  REQUIRE(b.Put(Pattern(1000, 6)).ok());

  // Bytes: one large create over the user's byte quota fails, and nothing is allocated for it.
  Client c = d.Connect();
  REQUIRE(a.Delete(std::span<const Guid>(made.data() + 1, 1))[0].ok());
  auto big = c.Create({uint64_t{5} << 20});
  REQUIRE(big.status().IsQuotaExceeded());
  CHECK(big.status().message().find("user_quota_bytes") != std::string::npos);

  auto st = c.GetStatus();
  REQUIRE(st.ok());
  CHECK(st->user_quota_objects == 3);
  CHECK(st->user_quota_bytes == uint64_t{4} << 20);
  CHECK(st->client_quota_objects == 2);
  REQUIRE(st->users.size() == 1);
  CHECK(st->users[0].uid == ::getuid());
  CHECK(st->users[0].objects == 2);
  CHECK(st->users[0].bytes == 2000);
  CHECK(st->errors[static_cast<size_t>(Status::Code::kQuotaExceeded)] == 3);
  auto clients = c.Clients();
  REQUIRE(clients.ok());
  uint64_t created = 0;
  for (const auto& k : *clients) created += k.created_objects;
  CHECK(created == 2);

  std::string out;
  REQUIRE(Run({DEPOTCTL_PATH, "--socket", d.socket(), "status"}, &out) == 0);
  CHECK(out.find("per user: 4.0 MiB, 3 objects; per connection: any size, 2 objects") !=
        std::string::npos);
}
