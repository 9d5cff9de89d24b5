// A hostile local user against depot: each test runs the attack from a real client process under
// a throwaway uid against a real daemon, then checks that the daemon still serves everyone and
// that every victim's object is intact. They need root to switch uids; they skip, saying so,
// elsewhere (CI runs them as root).
#include <catch2/catch.hpp>

#include "tests/other_users.h"

using namespace depot;
using namespace depot::test;

namespace {

constexpr int kDenied = static_cast<int>(Status::Code::kPermissionDenied);

// A daemon that Alice, Bob and Mallory may all use, in the shared namespace.
Daemon StartShared() {
  return StartOpen({"--allow-users", std::to_string(kAlice) + "," + std::to_string(kBob) + "," +
                                         std::to_string(kMallory)});
}

// The object's bytes are still what Pattern(size, seed) wrote.
bool Intact(const Daemon& d, const Guid& guid, size_t size, uint32_t seed) {
  auto obj = d.Connect().Get(guid);
  if (!obj.ok() || obj->size() != size) return false;
  auto want = Pattern(size, seed);
  return std::equal(want.begin(), want.end(), obj->frame(0).begin());
}

}  // namespace

TEST_CASE("another user cannot delete an object, while its creator, root and depotd's user can",
          "[hostile]") {
  NeedRoot();
  Daemon d = StartShared();
  Guid guid = PutAs(d, kAlice, 100000, 7);
  int mallory = RunAs(kMallory, kMallory, {}, [&] {
    Client c = d.Connect();
    Status st = c.Delete(guid);
    if (!st.IsPermissionDenied()) return 1;
    return st.message().find("created by uid 41001") != std::string::npos ? kDenied : 2;
  });
  CHECK(mallory == kDenied);
  CHECK(Intact(d, guid, 100000, 7));
  CHECK(RunAs(kAlice, kAlice, {}, [&] { return d.Connect().Delete(guid).ok() ? 0 : 1; }) == 0);
  Guid other = PutAs(d, kBob, 100000, 8);
  CHECK(d.Connect().Delete(other).ok());  // root administers the store
}

TEST_CASE("a proposed GUID taken first by another user is told apart by its creator", "[hostile]") {
  NeedRoot();
  Daemon d = StartShared();
  const Guid proposed = Guid::Random();
  // Mallory takes the GUID that Alice announced to Bob.
  CHECK(RunAs(kMallory, kMallory, {}, [&] {
          CreateOptions o;
          o.guid = proposed;
          return d.Connect().Put(Pattern(5000, 66), o).ok() ? 0 : 1;
        }) == 0);
  int alice = RunAs(kAlice, kAlice, {}, [&] {
    CreateOptions o;
    o.guid = proposed;
    return d.Connect().Put(Pattern(5000, 1), o).status().IsAlreadyExists() ? 0 : 1;
  });
  CHECK(alice == 0);
  // Bob, expecting Alice's object, sees whose it is before he trusts the bytes.
  int bob = RunAs(kBob, kBob, {}, [&] {
    auto obj = d.Connect().Get(proposed);
    if (!obj.ok()) return 1;
    return obj->creator_uid() == kMallory && obj->creator_pid() > 0 ? 0 : 2;
  });
  CHECK(bob == 0);
}
