// Memory kept across a crash of depotd: a real daemon hands its segments and catalog to a
// descriptor store (here the test plays systemd's part of it: it listens on NOTIFY_SOCKET, keeps
// what FDSTORE=1 hands it, drops what FDSTOREREMOVE=1 names, and passes what it kept to the next
// daemon as LISTEN_FDS/LISTEN_FDNAMES), is killed with SIGKILL, and the next one serves the same
// objects from the same pages. scripts/systemd-check does the same under a real systemd.
#include "daemon/kept_memory.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "common/unique_fd.h"
#include "tests/daemon_fixture.h"
#include "tests/fd_store_stand_in.h"
#include "tests/kept_service.h"
#include "tests/other_users.h"

using namespace depot;
using namespace depot::test;
using namespace std::chrono_literals;

TEST_CASE("After a kill -9, the next depotd serves every sealed object from the kept memory",
          "[kept]") {
  std::string dir = TempDir();
  FdStoreStandIn store(dir + "/notify");
  std::vector<Put> puts;
  Put deleted;
  {
    Service first(dir, store);
    Client c = first.Connect();
    for (size_t size : {100, 4096, 65536, 1 << 20, 16 << 20}) {
      puts.push_back(PutFrames(c, {size}, static_cast<uint32_t>(size)));
    }
    CreateOptions named;
    named.name = "three frames";
    const std::byte metadata[] = {std::byte{1}, std::byte{2}};
    named.metadata = metadata;
    puts.push_back(PutFrames(c, {10, 0, 3 << 20}, 77, named));
    deleted = PutFrames(c, {5000}, 5);
    REQUIRE(c.Delete(deleted.guid).ok());
    auto draft = c.Create({1000});  // never sealed: not an object
    REQUIRE(draft.ok());
    auto st = StatusOf(c);
    CHECK(st.keep_memory);
    store.Drain(1s);
    CHECK(store.Count("depot.catalog.") == 1);
    CHECK(store.Count("depot.seg.") >= 1);
    first.Kill();
  }
  store.Drain();
  Service second(dir, store);
  Client c = second.Connect();
  CheckAllAdopted(c, second, puts);
  auto named = c.Get(puts.back().guid);
  REQUIRE(named.ok());
  REQUIRE(named->metadata().size() == 2);
  CHECK(named->metadata()[1] == std::byte{2});
  CHECK(c.Get(deleted.guid).status().IsNotFound());
  CHECK(second.Log().find("served again") != std::string::npos);
  // The next daemon stored a catalog of its own and forgot the last one.
  store.Drain(1s);
  CHECK(store.Count("depot.catalog.") == 1);
  CHECK(store.Dup("depot.catalog.4294967295.2").valid());
  // The last daemon's ring was taken and forgotten; this one's connection has its own.
  CHECK(store.Count("depot.ring.") == 1);
  std::filesystem::remove_all(dir);
}

TEST_CASE("A put that returned before the daemon took it from the ring survives a kill -9",
          "[kept]") {
  std::string dir = TempDir();
  FdStoreStandIn store(dir + "/notify");
  std::vector<Put> puts;
  {
    Service first(dir, store);
    Client c = first.Connect();
    puts.push_back(PutFrames(c, {1000}, 1));  // takes a lease: later puts need no reply
    StatusOf(c);
    store.Drain(1s);
    // The daemon reads nothing from here on: these puts return with their records in the ring.
    REQUIRE(::kill(first.pid, SIGSTOP) == 0);
    for (uint32_t i = 0; i < 5; ++i) puts.push_back(PutFrames(c, {100 + i * 1000}, 10 + i));
    first.Kill();
  }
  store.Drain();
  Service second(dir, store);
  Client c = second.Connect();
  CheckAllAdopted(c, second, puts);
  std::filesystem::remove_all(dir);
}

TEST_CASE("A kept entry that does not check out is dropped, and the rest are served", "[kept]") {
  std::string dir = TempDir();
  FdStoreStandIn store(dir + "/notify");
  Put good, bad;
  {
    Service first(dir, store);
    Client c = first.Connect();
    good = PutFrames(c, {1000}, 1);
    bad = PutFrames(c, {2000}, 2);
    Crash(first, c, store);  // once the daemon has taken both puts from the ring
  }
  store.Drain();
  // Damage the second entry's frame size in the catalog, as a torn write would.
  UniqueFd catalog = store.Dup("depot.catalog.");
  REQUIRE(catalog.valid());
  void* map = ::mmap(nullptr, 4096 + 2 * 128, PROT_READ | PROT_WRITE, MAP_SHARED, catalog.get(), 0);
  REQUIRE(map != MAP_FAILED);
  static_cast<uint8_t*>(map)[4096 + 128 + 104] ^= 0x10;
  ::munmap(map, 4096 + 2 * 128);
  Service second(dir, store);
  Client c = second.Connect();
  auto st = StatusOf(c);
  CHECK(st.adopted_objects == 1);
  CHECK(st.adoption_dropped == 1);
  CheckSame(c, good);
  CHECK(c.Get(bad.guid).status().IsNotFound());
  std::filesystem::remove_all(dir);
}

TEST_CASE("A mapping held across a crash never changes while the kept segments are closed",
          "[kept]") {
  std::string dir = TempDir();
  FdStoreStandIn store(dir + "/notify");
  std::optional<Service> first(std::in_place, dir, store);
  Client old_client = first->Connect(0ms);  // never connects again: it keeps the period going
  Put held = PutFrames(old_client, {1 << 20}, 9);
  Put other = PutFrames(old_client, {1 << 20}, 10);  // keeps the segment in use
  auto view = old_client.Get(held.guid);
  REQUIRE(view.ok());
  Crash(*first, old_client, store);
  first.reset();
  store.Drain();
  Service second(dir, store);
  Client c = second.Connect();
  uint64_t closed = StatusOf(c).kept_closed_bytes;
  CHECK(closed > 0);
  REQUIRE(c.Delete(held.guid).ok());
  // New objects go elsewhere while the kept segment is closed, however many there are.
  for (int i = 0; i < 100; ++i) PutFrames(c, {1 << 20}, 1000 + i);
  CHECK(std::memcmp(view->frame(0).data(), held.frames[0].data(), held.frames[0].size()) == 0);
  CheckSame(c, other);
  CHECK(StatusOf(c).kept_closed_bytes == closed);
  std::filesystem::remove_all(dir);
}

TEST_CASE("A client carries on across a kill -9, and what it held is held by the next daemon",
          "[kept][reconnect]") {
  std::string dir = TempDir();
  FdStoreStandIn store(dir + "/notify");
  std::optional<Service> first(std::in_place, dir, store);
  Client c = first->Connect();
  Put held = PutFrames(c, {1 << 20}, 9);
  Put other = PutFrames(c, {1 << 20}, 10);
  auto view = c.Get(held.guid);
  REQUIRE(view.ok());
  Crash(*first, c, store);
  first.reset();
  store.Drain();
  Service second(dir, store, {"--restart-grace-ms", "300"});
  Client d = second.Connect();
  // `c` makes no call: its watcher saw the daemon go, reconnected, and named what it holds.
  auto holders = [&] {
    auto info = d.Stat(held.guid);
    return info.ok() ? info->refcount : 0;
  };
  INFO(second.Log());
  REQUIRE(WaitFor([&] { return holders() == 1; }, 10s));
  CHECK(d.Stat(other.guid)->refcount == 0);
  // Deleted, and the grace period over: memory that is free again is reused, but not the held
  // object's, whatever is put.
  REQUIRE(d.Delete(held.guid).ok());
  REQUIRE(WaitFor([&] { return StatusOf(d).kept_closed_bytes == 0; }, 10s));
  for (int i = 0; i < 150; ++i) PutFrames(d, {1 << 20}, 1000 + i);
  CHECK(std::memcmp(view->frame(0).data(), held.frames[0].data(), held.frames[0].size()) == 0);
  // The client's own calls go to the next daemon, with nothing to do on its part.
  CheckSame(c, other);
  CheckSame(d, PutFrames(c, {5000}, 77));
  CHECK(c.Get(held.guid).status().IsNotFound());
  // The hold goes with the last Object.
  CHECK(StatusOf(d).objects_deleted == 1);
  view = Status::NotFound("let go");
  CHECK(WaitFor([&] { return StatusOf(d).objects_deleted == 0; }, 10s));
  std::filesystem::remove_all(dir);
}

TEST_CASE("A put cut off by a kill -9 is made once, on the next daemon", "[kept][reconnect]") {
  std::string dir = TempDir();
  FdStoreStandIn store(dir + "/notify");
  std::optional<Service> first(std::in_place, dir, store);
  Client c = first->Connect();
  Put small = PutFrames(c, {1000}, 1);
  StatusOf(c);
  store.Drain(1s);
  // The daemon reads nothing from here on: a large put (a create, then a seal) waits for it.
  REQUIRE(::kill(first->pid, SIGSTOP) == 0);
  Put big;
  big.frames.push_back(Pattern(8 << 20, 5));
  Result<Guid> put = Status::Unavailable("not yet");
  std::thread putter([&] { put = c.Put(big.frames[0]); });
  std::this_thread::sleep_for(300ms);
  first->Kill();
  first.reset();
  store.Drain();
  Service second(dir, store);
  putter.join();
  INFO(put.status().ToString() << "\n" << second.Log());
  REQUIRE(put.ok());
  big.guid = *put;
  Client d = second.Connect();
  CheckSame(d, big);
  CheckSame(d, small);
  CHECK(StatusOf(d).objects_sealed == 2);
  // A put into the lease of the daemon that went: made on the next one, once.
  Put later = PutFrames(c, {2000}, 3);
  CheckSame(d, later);
  CHECK(StatusOf(d).objects_sealed == 3);
  std::filesystem::remove_all(dir);
}

TEST_CASE("Kept segments open to new objects once the grace period has passed", "[kept]") {
  std::string dir = TempDir();
  FdStoreStandIn store(dir + "/notify");
  Put kept;
  {
    Service first(dir, store);
    Client c = first.Connect();
    kept = PutFrames(c, {4096}, 3);
    Crash(first, c, store);
  }
  store.Drain();
  Service second(dir, store, {"--restart-grace-ms", "200"});
  Client c = second.Connect();
  CHECK(WaitFor([&] { return StatusOf(c).kept_closed_bytes == 0; }, 10s));
  INFO(second.Log());
  CHECK(second.Log().find("grace period ended") != std::string::npos);
  CheckSame(c, kept);
  std::filesystem::remove_all(dir);
}

TEST_CASE("An owner-scoped object whose process did not come back goes when the grace period ends",
          "[kept][reconnect]") {
  std::string dir = TempDir();
  FdStoreStandIn store(dir + "/notify");
  std::optional<Service> first(std::in_place, dir, store);
  Client c = first->Connect();
  // Another process makes the object, owner-scoped, and keeps its connection until it is killed.
  auto [maker, guid] = SpawnScopedMaker(first->socket, Pattern(4096, 31));
  auto view = c.Get(guid);
  REQUIRE(view.ok());
  std::vector<std::byte> before(view->frame(0).begin(), view->frame(0).end());
  // A process that lives on and never reconnects: the grace period runs its course.
  pid_t idle = SpawnConnected(first->socket, 1);
  Crash(*first, c, store);
  first.reset();
  ::kill(maker, SIGKILL);  // its process is gone before the next daemon starts
  Wait(maker);
  store.Drain();
  Service second(dir, store, {"--restart-grace-ms", "300"});
  Client d = second.Connect();
  INFO(second.Log());
  CHECK(d.Stat(guid).ok());  // during the grace period, it is there
  CHECK(WaitFor([&] { return d.Stat(guid).status().IsNotFound(); }, 10s));
  CHECK(second.Log().find("1 owner-scoped objects deleted") != std::string::npos);
  // `c` held it across the crash: its mapping is unchanged, and the object goes with it.
  CHECK(std::memcmp(view->frame(0).data(), before.data(), before.size()) == 0);
  CHECK(StatusOf(d).objects_deleted == 1);
  view = Status::NotFound("let go");
  CHECK(WaitFor([&] { return StatusOf(d).objects_deleted == 0; }, 10s));
  ::kill(idle, SIGKILL);
  Wait(idle);
  std::filesystem::remove_all(dir);
}

// `scoped`, owner-scoped and made through `c` before a kill -9, on `second`: `c` connects again
// on its first call and finds it whole after the grace period; it stays while another connection
// of this process is open, and goes with the last one.
void CheckOrphanLivesWhileConnected(Service& second, std::optional<Client>& c, const Put& scoped) {
  REQUIRE(c->Stat(scoped.guid).ok());  // its first call connects again
  std::optional<Client> d(second.Connect());
  REQUIRE(WaitFor([&] { return StatusOf(*d).kept_closed_bytes == 0; }, 10s));  // grace over
  CheckSame(*c, scoped);
  c.reset();
  // `d` is a connection of the same process: the object stays while it is open.
  CHECK(d->Stat(scoped.guid).ok());
  d.reset();
  Client e = second.Connect();
  CHECK(WaitFor([&] { return e.Stat(scoped.guid).status().IsNotFound(); }, 10s));
}

TEST_CASE("An owner-scoped object kept across a kill -9 lives while its process is connected",
          "[kept][reconnect]") {
  std::string dir = TempDir();
  FdStoreStandIn store(dir + "/notify");
  std::optional<Service> first(std::in_place, dir, store);
  std::optional<Client> c(first->Connect());
  CreateOptions o;
  o.owner_scoped = true;
  Put scoped = PutFrames(*c, {4096}, 21, o);
  Crash(*first, *c, store);
  first.reset();
  store.Drain();
  Service second(dir, store, {"--restart-grace-ms", "200"});
  INFO(second.Log());
  CheckOrphanLivesWhileConnected(second, c, scoped);
  std::filesystem::remove_all(dir);
}

TEST_CASE("An owner-scoped put still in the ring at a kill -9 lives while its process is connected",
          "[kept][reconnect]") {
  std::string dir = TempDir();
  FdStoreStandIn store(dir + "/notify");
  std::optional<Service> first(std::in_place, dir, store);
  std::optional<Client> c(first->Connect());
  PutFrames(*c, {1000}, 1);  // takes a lease: later puts need no reply
  StatusOf(*c);
  store.Drain(1s);
  // The daemon reads nothing from here on: the put returns with its record in the ring.
  REQUIRE(::kill(first->pid, SIGSTOP) == 0);
  CreateOptions o;
  o.owner_scoped = true;
  Put scoped = PutFrames(*c, {3000}, 41, o);
  first->Kill();
  first.reset();
  store.Drain();
  Service second(dir, store, {"--restart-grace-ms", "200"});
  INFO(second.Log());
  auto info = c->Stat(scoped.guid);  // its first call connects again
  REQUIRE(info.ok());
  CHECK(info->creator_pid == ::getpid());  // the ring's name said whose it is
  CheckOrphanLivesWhileConnected(second, c, scoped);
  std::filesystem::remove_all(dir);
}

TEST_CASE("Objects kept across a kill -9 still count against their user's quota", "[kept]") {
  std::string dir = TempDir();
  FdStoreStandIn store(dir + "/notify");
  std::vector<std::string> quota{"--user-quota-objects", "3"};
  std::vector<StoreStatus::UserUsage> before;
  {
    Service first(dir, store, quota);
    Client c = first.Connect();
    PutFrames(c, {4096}, 1);
    PutFrames(c, {1000, 24}, 2);
    before = StatusOf(c).users;
    REQUIRE(before.size() == 1);
    CHECK(before[0].objects == 2);
    store.Drain(1s);
    first.Kill();
  }
  store.Drain();
  Service second(dir, store, quota);
  Client c = second.Connect();
  CHECK(StatusOf(c).users == before);
  PutFrames(c, {100}, 3);
  std::array<std::byte, 100> one_more{};
  auto refused = c.Put(one_more);
  INFO(refused.status().ToString());
  CHECK(refused.status().code() == Status::Code::kQuotaExceeded);
  std::filesystem::remove_all(dir);
}

TEST_CASE("Without a service manager nothing is kept and nothing is adopted", "[kept]") {
  Daemon d;
  Client c = d.Connect();
  auto st = StatusOf(c);
  CHECK_FALSE(st.keep_memory);
  CHECK(st.kept_descriptors == 0);
  CHECK(st.adopted_objects == 0);
}

TEST_CASE("With a spill directory too, crash after crash keeps every object in memory", "[kept]") {
  // The spill directory names the namespace from the first daemon on, so each later one makes
  // that namespace while reading the directory, before it adopts the kept memory.
  std::string dir = TempDir();
  FdStoreStandIn store(dir + "/notify");
  const std::vector<std::string> spill = {"--spill-dir", dir + "/spill"};
  std::vector<Put> puts;
  {
    Service first(dir, store, spill);
    Client c = first.Connect();
    for (uint32_t i = 0; i < 4; ++i) puts.push_back(PutFrames(c, {1000 + i * 50000}, i));
    Crash(first, c, store);
  }
  for (int crash = 1; crash <= 2; ++crash) {
    INFO("daemon " << crash + 1);
    Service next(dir, store, spill);
    Client c = next.Connect();
    CheckAllAdopted(c, next, puts);
    // The spill directory's census does not call them lost.
    CHECK(next.Log().find("in memory only come from the memory it kept") != std::string::npos);
    CHECK(next.Log().find("are lost") == std::string::npos);
    store.Drain(1s);
    // One catalog, stored once: the daemon's own, under a name the last one's removal left alone.
    CHECK(store.Count("depot.catalog.") == 1);
    CHECK(store.Dup("depot.catalog.4294967295." + std::to_string(crash + 1)).valid());
    puts.push_back(PutFrames(c, {3000}, 100 + crash));
    Crash(next, c, store);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "With a spill directory, objects read back after a clean stop and put since survive a kill -9",
    "[kept]") {
  // As under systemd: another user puts, and a third reads back what was written at the stop.
  std::string dir = TempDir();
  REQUIRE(::chmod(dir.c_str(), 0755) == 0);
  FdStoreStandIn store(dir + "/notify");
  const std::vector<std::string> args = {"--spill-dir", dir + "/spill", "--socket-mode", "0660"};
  constexpr uid_t kUser = 4242;
  const std::vector<std::byte> a = Pattern(9000000, 1), b = Pattern(9000000, 2);
  auto put_as_user = [&](const Service& s, const std::vector<std::byte>& bytes) {
    // A member of the socket's group (0), as the users of the depot group are.
    REQUIRE(RunAs(kUser, kUser, {0}, [&] {
              auto c = Client::Connect({.socket_path = s.socket, .reconnect_wait = 0ms});
              return c.ok() && c->Put(bytes).ok() ? 0 : 1;
            }) == 0);
  };
  auto same = [](Client& c, const std::vector<std::byte>& bytes) {
    auto page = c.List();
    REQUIRE(page.ok());
    for (const ObjectInfo& o : page->objects) {
      auto got = c.Get(o.guid);
      if (got.ok() && Holds(*got, bytes)) return true;
    }
    return false;
  };
  {
    Service first(dir, store, args);
    Client c = first.Connect();
    put_as_user(first, a);
    StatusOf(c);
    first.Kill(SIGTERM);  // a clean stop: every object written to disk
  }
  store.Drain();
  store.Clear();  // systemd empties the store of a service stopped for good
  {
    Service second(dir, store, args);
    Client c = second.Connect();
    CHECK(same(c, a));  // read back from disk into memory
    put_as_user(second, b);
    Crash(second, c, store);
  }
  store.Drain();
  Service third(dir, store, args);
  Client c = third.Connect();
  INFO(third.Log());
  CHECK(same(c, a));
  CHECK(same(c, b));
  auto st = StatusOf(c);
  CHECK(st.adoption_dropped == 0);
  CHECK(st.adopted_objects == 2);  // the one read back too: its copy in memory, not its file
  std::filesystem::remove_all(dir);
}
