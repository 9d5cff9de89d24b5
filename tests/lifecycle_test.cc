// What happens to objects over time: waiting gets, timeouts, deletes while held, clients that
// die, a full pool, eviction, and a daemon that goes away.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <optional>
#include <thread>

#include "tests/daemon_fixture.h"

using namespace depot;
using namespace depot::test;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t kMiB = 1 << 20;

}  // namespace

TEST_CASE("a get waits for an object that is created later", "[lifecycle]") {
  Daemon d;
  Client c = d.Connect();
  Guid later = Guid::Random();
  Result<Object> got = Status::Unavailable("not yet");
  std::thread waiter([&] { got = c.Get(later, 30s); });
  Client watcher = d.Connect();
  REQUIRE(WaitFor([&] { return StatusOf(watcher).gets_waiting == 1; }));

  // Another process creates it, and the get still waits until the seal.
  Channel created, sealed;
  pid_t producer = Spawn([&] {
    auto p = Client::Connect({d.socket(), "producer"});
    CreateOptions opts;
    opts.guid = later;
    auto draft = p->Create({4096}, opts);
    if (!draft.ok()) return 1;
    std::memset(draft->frame(0).data(), 7, 4096);
    created.Send("created");
    sealed.Receive();
    return draft->Seal().ok() ? 0 : 2;
  });
  REQUIRE(created.Receive() == "created");
  CHECK(StatusOf(watcher).gets_waiting == 1);
  CHECK(StatusOf(watcher).objects_creating == 1);
  sealed.Send("seal");
  waiter.join();
  CHECK(WEXITSTATUS(Wait(producer)) == 0);
  INFO(got.status().ToString());
  REQUIRE(got.ok());
  CHECK(got->frame(0)[4095] == std::byte{7});
  CHECK(StatusOf(watcher).gets_waiting == 0);
}

TEST_CASE("a get that waits in vain ends with Timeout", "[lifecycle]") {
  Daemon d;
  Client c = d.Connect();
  Guid never = Guid::Random();
  auto start = std::chrono::steady_clock::now();
  auto got = c.Get(never, 200ms);
  auto elapsed = std::chrono::steady_clock::now() - start;
  CHECK(got.status().IsTimeout());
  CHECK(got.status().message().find(never.ToString()) != std::string::npos);
  CHECK(elapsed >= 200ms);
  CHECK(c.Get(never).status().IsNotFound());  // a poll says NotFound

  // A multi-GUID get with a timeout returns what exists and Timeout for the rest.
  auto id = c.Put(Pattern(10, 1));
  REQUIRE(id.ok());
  Guid ids[] = {*id, never};
  auto results = c.Get(ids, 50ms);
  CHECK(results[0].ok());
  CHECK(results[1].status().IsTimeout());
  CHECK(StatusOf(c).gets_waiting == 0);
}

TEST_CASE("a deleted object stays readable by the process that holds it", "[lifecycle]") {
  Daemon d;
  Client c = d.Connect();
  auto data = Pattern(2 * kMiB, 5);
  auto id = c.Put(data);
  REQUIRE(id.ok());
  uint64_t used = StatusOf(c).used;
  REQUIRE(used >= data.size());

  Channel holding, deleted, result;
  pid_t reader = Spawn([&] {
    auto r = Client::Connect({d.socket(), "reader"});
    auto obj = r->Get(*id);
    if (!obj.ok()) return 1;
    holding.Send("holding");
    deleted.Receive();
    // The GUID is gone, the bytes are not.
    bool same = std::memcmp(obj->frame(0).data(), data.data(), data.size()) == 0;
    return same ? 0 : 2;
  });
  REQUIRE(holding.Receive() == "holding");
  REQUIRE(c.Delete(*id).ok());
  CHECK(c.Delete(*id).IsNotFound());
  CHECK(!*c.Contains(*id));
  CHECK(c.Get(*id).status().IsNotFound());
  auto s = StatusOf(c);
  CHECK(s.objects_deleted == 1);
  CHECK(s.used == used);  // still held: not freed
  deleted.Send("deleted");
  CHECK(WEXITSTATUS(Wait(reader)) == 0);
  REQUIRE(WaitFor([&] { return StatusOf(c).used == 0; }));
  CHECK(StatusOf(c).objects_deleted == 0);
}

// The process that deletes an object it still holds must not be answered from its own cache:
// to it, too, the object is gone, while the views it took stay valid.
TEST_CASE("an object deleted by the process that holds it reads as deleted there", "[lifecycle]") {
  Daemon d;
  Client c = d.Connect();
  auto data = Pattern(256 << 10, 6);
  auto id = c.Put(data);
  REQUIRE(id.ok());
  auto held = c.Get(*id);
  REQUIRE(held.ok());
  REQUIRE(*c.Contains(*id));
  REQUIRE(c.Delete(*id).ok());
  CHECK_FALSE(*c.Contains(*id));
  CHECK(c.Get(*id).status().IsNotFound());
  CHECK(c.Get(std::span<const Guid>(&*id, 1), kNoWait).front().status().IsNotFound());
  CHECK(std::memcmp(held->frame(0).data(), data.data(), data.size()) == 0);
  // The same GUID made again is the new object, not the one this process still holds.
  CreateOptions o;
  o.guid = *id;
  REQUIRE(c.Put(Pattern(1000, 7), o).ok());
  auto again = c.Get(*id);
  REQUIRE(again.ok());
  CHECK(again->frame(0).size() == 1000);
  CHECK(held->frame(0).size() == data.size());
}

TEST_CASE("a client killed with SIGKILL gives back its references and unsealed objects",
          "[lifecycle]") {
  Daemon d;
  Client c = d.Connect();
  auto kept = c.Put(Pattern(kMiB, 1));
  REQUIRE(kept.ok());
  uint64_t baseline = StatusOf(c).used;

  Channel ready;
  pid_t victim = Spawn([&] {
    auto v = Client::Connect({d.socket(), "victim"});
    auto obj = v->Get(*kept);                  // a reference
    auto draft = v->Create({8 * kMiB, kMiB});  // an unsealed create
    auto big = v->Create({100 * kMiB});        // one in a segment of large objects
    if (!obj.ok() || !draft.ok() || !big.ok()) return 1;
    ready.Send("ready");
    ::pause();
    return 0;
  });
  REQUIRE(ready.Receive() == "ready");
  auto before = StatusOf(c);
  CHECK(before.objects_creating == 2);
  CHECK(before.used >= baseline + 109 * kMiB);
  auto held = c.Stat(*kept);
  REQUIRE(held.ok());
  CHECK(held->refcount == 1);

  ::kill(victim, SIGKILL);
  Wait(victim);
  REQUIRE(WaitFor([&] {
    auto s = StatusOf(c);
    return s.objects_creating == 0 && s.used == baseline && s.clients == 1;
  }));
  CHECK(c.Stat(*kept)->refcount == 0);
  // The memory is usable again at once.
  CHECK(c.Put(Pattern(100 * kMiB, 2)).ok());
}

TEST_CASE("a full pool of objects that cannot be evicted answers StoreFull and loses nothing",
          "[lifecycle]") {
  Daemon d({"--capacity", "8MiB", "--segment-size", "8MiB"});
  Client c = d.Connect();
  auto a = c.Put(Pattern(3 * kMiB, 1));
  auto b = c.Put(Pattern(3 * kMiB, 2));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  auto third = c.Put(Pattern(3 * kMiB, 3));
  REQUIRE(third.status().IsStoreFull());
  CHECK(third.status().message().find("3.0 MiB") != std::string::npos);
  CHECK(third.status().message().find("8.0 MiB") != std::string::npos);
  auto too_big = c.Create({9 * kMiB});
  CHECK(too_big.status().IsStoreFull());
  // Nothing was dropped to make room.
  auto got_a = c.Get(*a);
  REQUIRE(got_a.ok());
  CHECK(std::memcmp(got_a->frame(0).data(), Pattern(3 * kMiB, 1).data(), 3 * kMiB) == 0);
  CHECK(c.Get(*b).ok());
  CHECK(StatusOf(c).evictions == 0);
}

TEST_CASE("evictable objects are evicted least recently used first", "[lifecycle]") {
  Daemon d({"--capacity", "8MiB", "--segment-size", "8MiB"});
  Client c = d.Connect();
  CreateOptions evictable;
  evictable.evictable = true;
  auto first = c.Put(Pattern(3 * kMiB, 1), evictable);
  auto second = c.Put(Pattern(3 * kMiB, 2), evictable);
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  {
    auto touch = c.Get(*first);
    REQUIRE(touch.ok());
  }  // first is now the most recently used

  auto third = c.Put(Pattern(3 * kMiB, 3), evictable);
  REQUIRE(third.ok());
  CHECK(!*c.Contains(*second));  // the least recently used one made room
  CHECK(*c.Contains(*first));
  auto s = StatusOf(c);
  CHECK(s.evictions == 1);
  CHECK(s.evicted_bytes == 3 * kMiB);

  // A referenced object is never evicted, even when it is the least recently used.
  Client other = d.Connect();
  auto pinned = other.Get(*first);
  REQUIRE(pinned.ok());
  auto fourth = c.Put(Pattern(3 * kMiB, 4), evictable);
  REQUIRE(fourth.ok());
  CHECK(*c.Contains(*first));
  CHECK(!*c.Contains(*third));
  CHECK(std::memcmp(pinned->frame(0).data(), Pattern(3 * kMiB, 1).data(), 3 * kMiB) == 0);

  // With every evictable object pinned, a put that does not fit is StoreFull.
  auto pin_fourth = other.Get(*fourth);
  REQUIRE(pin_fourth.ok());
  CHECK(c.Put(Pattern(3 * kMiB, 5), evictable).status().IsStoreFull());
}

TEST_CASE("clients waiting in a get see Disconnected when the daemon stops for good",
          "[lifecycle]") {
  Daemon d;
  constexpr auto kWait = 2s;
  auto connected = Client::Connect(
      {.socket_path = d.socket(), .client_name = "lifecycle_test", .reconnect_wait = kWait});
  REQUIRE(connected.ok());
  Client c = std::move(*connected);
  Result<Object> got = Status::Unavailable("not yet");
  std::thread waiter([&] { got = c.Get(Guid::Random(), kForever); });
  Client watcher = d.Connect();
  REQUIRE(WaitFor([&] { return StatusOf(watcher).gets_waiting == 1; }));
  int status = d.Stop(SIGTERM);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  waiter.join();
  // The get tried to reconnect for reconnect_wait, then said so.
  CHECK(got.status().IsDisconnected());
  CHECK_THAT(got.status().message(), Catch::Contains("reconnecting failed"));
  // A later call tries once more, without waiting for reconnect_wait again.
  auto start = std::chrono::steady_clock::now();
  CHECK(c.Put(Pattern(10, 1)).status().IsDisconnected());
  CHECK(std::chrono::steady_clock::now() - start < kWait);
}

TEST_CASE("with reconnect_wait 0 a client never reconnects", "[lifecycle]") {
  Daemon d;
  auto connected = Client::Connect(
      {.socket_path = d.socket(), .client_name = "lifecycle_test", .reconnect_wait = 0ms});
  REQUIRE(connected.ok());
  d.Stop(SIGTERM);
  Daemon again(d.socket(), {"--capacity", "256MiB"});
  CHECK(connected->Ping().IsDisconnected());
  CHECK(connected->Put(Pattern(10, 1)).status().IsDisconnected());
}

TEST_CASE("an empty large object's segment is kept warm and reused", "[lifecycle]") {
  Daemon d({"--capacity", "512MiB", "--segment-size", "16MiB", "--keep-warm", "64MiB"});
  Client c = d.Connect();
  auto big = c.Put(Pattern(64 * kMiB, 1));
  REQUIRE(big.ok());
  REQUIRE(c.Delete(*big).ok());
  auto s = StatusOf(c);
  CHECK(s.segments == 1);
  CHECK(s.reserved == 64 * kMiB);
  CHECK(s.used == 0);
  CHECK(s.warm == 64 * kMiB);
  CHECK(s.keep_warm == 64 * kMiB);
  // The next large object goes there: no new segment, and the bytes read back are its own.
  auto data = Pattern(60 * kMiB, 2);
  auto next = c.Put(data);
  REQUIRE(next.ok());
  CHECK(StatusOf(c).segments == 1);
  CHECK(StatusOf(c).reserved == 64 * kMiB);
  {
    auto obj = c.Get(*next);
    REQUIRE(obj.ok());
    auto bytes = obj->frame(0);
    CHECK(std::equal(bytes.begin(), bytes.end(), data.begin(), data.end()));
  }
  // Another while that one lives gets a segment of its own; once both are deleted, only the
  // limit's worth stays warm and the other segment is given back.
  auto more = c.Put(Pattern(32 * kMiB, 3));
  REQUIRE(more.ok());
  CHECK(StatusOf(c).segments == 2);
  CHECK(StatusOf(c).warm == 0);
  REQUIRE(c.Delete(*next).ok());
  REQUIRE(c.Delete(*more).ok());
  REQUIRE(WaitFor([&] { return StatusOf(c).used == 0; }));
  CHECK(StatusOf(c).reserved == 64 * kMiB);
  CHECK(StatusOf(c).segments == 1);
}

TEST_CASE("the pool makes the next segment ahead of the put that needs it", "[lifecycle]") {
  Daemon d({"--capacity", "512MiB", "--segment-size", "16MiB"});
  Client c = d.Connect();
  auto first = c.Put(Pattern(10 * kMiB, 1));
  REQUIRE(first.ok());
  // More than half of the one segment is used: the next is made on the daemon's helper thread.
  REQUIRE(WaitFor([&] { return StatusOf(c).segments == 2; }));
  CHECK(StatusOf(c).reserved == 32 * kMiB);
  // The put that needs it finds it ready: no third segment.
  auto data = Pattern(10 * kMiB, 2);
  auto second = c.Put(data);
  REQUIRE(second.ok());
  CHECK(StatusOf(c).segments == 2);
  auto obj = c.Get(*second);
  REQUIRE(obj.ok());
  auto bytes = obj->frame(0);
  CHECK(std::equal(bytes.begin(), bytes.end(), data.begin(), data.end()));
}

TEST_CASE("with keep_warm 0, empty segments are given back to the system", "[lifecycle]") {
  Daemon d({"--capacity", "512MiB", "--segment-size", "16MiB", "--keep-warm", "0"});
  Client c = d.Connect();
  auto big = c.Put(Pattern(64 * kMiB, 1));
  REQUIRE(big.ok());
  auto s = StatusOf(c);
  CHECK(s.segments == 1);
  CHECK(s.reserved == 64 * kMiB);
  {
    auto obj = c.Get(*big);
    REQUIRE(obj.ok());
    REQUIRE(c.Delete(*big).ok());
    CHECK(StatusOf(c).reserved == 64 * kMiB);  // still mapped by this process
  }
  REQUIRE(WaitFor([&] { return StatusOf(c).reserved == 0; }));
  CHECK(StatusOf(c).segments == 0);
}

TEST_CASE("a subscriber sees every transition in order", "[lifecycle]") {
  Daemon d({"--capacity", "8MiB", "--segment-size", "8MiB"});
  Client c = d.Connect();
  auto sub = c.Subscribe();
  REQUIRE(sub.ok());
  auto next = [&] {
    auto e = sub->Next(10s);
    INFO(e.status().ToString());
    REQUIRE(e.ok());
    return *e;
  };
  CreateOptions evictable;
  evictable.evictable = true;
  auto a = c.Put(Pattern(5 * kMiB, 1), evictable);
  REQUIRE(a.ok());
  auto e = next();
  CHECK(e.kind == Event::Kind::kCreated);
  CHECK(e.guid == *a);
  CHECK(e.size == 5 * kMiB);
  CHECK(e.pid == ::getpid());
  CHECK(next().kind == Event::Kind::kSealed);

  auto b = c.Put(Pattern(5 * kMiB, 2), evictable);  // evicts a to make room
  REQUIRE(b.ok());
  e = next();
  CHECK(e.kind == Event::Kind::kEvicted);
  CHECK(e.guid == *a);
  CHECK(next().kind == Event::Kind::kCreated);
  CHECK(next().kind == Event::Kind::kSealed);

  {
    auto held = c.Get(*b);
    REQUIRE(held.ok());
    REQUIRE(c.Delete(*b).ok());
    CHECK(next().kind == Event::Kind::kDeleted);
  }  // the last holder lets go: its memory is freed
  e = next();
  CHECK(e.kind == Event::Kind::kFreed);
  CHECK(e.guid == *b);

  // A client that dies mid-create: connected, created, aborted, disconnected.
  Channel ready;
  pid_t victim = Spawn([&] {
    auto v = Client::Connect({d.socket(), "victim"});
    auto draft = v->Create({4096});
    ready.Send(draft.ok() ? "ready" : "failed");
    ::pause();
    return 0;
  });
  REQUIRE(ready.Receive() == "ready");
  ::kill(victim, SIGKILL);
  Wait(victim);
  e = next();
  CHECK(e.kind == Event::Kind::kClientConnected);
  CHECK(e.pid == victim);
  CHECK(next().kind == Event::Kind::kCreated);
  e = next();
  CHECK(e.kind == Event::Kind::kAborted);
  CHECK(e.pid == victim);
  CHECK(next().kind == Event::Kind::kClientDisconnected);

  // Nothing else happened.
  CHECK(sub->Next(50ms).status().IsTimeout());
}

TEST_CASE("a dropped object is released promptly even by an idle client", "[lifecycle]") {
  // Releases wait briefly to ride with the next request; a client that sends nothing more must
  // still let go within a moment.
  Daemon d;
  Client c = d.Connect();
  Client watcher = d.Connect();
  auto id = c.Put(Pattern(1 << 20, 1));
  REQUIRE(id.ok());
  {
    auto obj = c.Get(*id);
    REQUIRE(obj.ok());
    REQUIRE(watcher.Stat(*id)->refcount == 1);
  }
  auto start = std::chrono::steady_clock::now();
  REQUIRE(WaitFor([&] { return watcher.Stat(*id)->refcount == 0; }, 2s));
  CHECK(std::chrono::steady_clock::now() - start < 1s);

  // Releases that ride with a request are processed before it.
  {
    auto obj = c.Get(*id);
    REQUIRE(obj.ok());
  }
  REQUIRE(c.Delete(*id).ok());  // carries the release: the memory goes with the delete
  CHECK(c.GetStatus()->used == 0);
}

// A spare segment this client maps is given back to make room for its own large object; its
// bytes count until the client has unmapped it, which it does on the notice that comes with
// the refusal, and then tries the create once more.
TEST_CASE("a client's own spare segment gives way to its large object", "[lifecycle]") {
  Daemon d({"--capacity", "8MiB", "--segment-size", "4MiB"});
  Client c = d.Connect();
  auto small = c.Put(Pattern(kMiB, 1));
  REQUIRE(small.ok());
  REQUIRE(c.Delete(*small).ok());  // its segment stays, empty, as the spare; c maps it
  REQUIRE(WaitFor([&] { return StatusOf(c).used == 0; }));
  auto big = c.Put(Pattern(6 * kMiB, 2));  // a dedicated segment: needs the spare's room
  REQUIRE(big.ok());
  auto st = StatusOf(c);
  CHECK(st.retired_held == 0);
  CHECK(st.reserved == 6 * kMiB);
}

// Two 1 MiB segments, none kept warm: object `a` fills most of the first, `b` the second. A
// reader maps the first (it got `a`, then let go), and `a` is deleted: the first segment is given
// back, but counted until the reader says it unmapped it, which it does when it next reads its
// socket. A create of as much then needs that memory.
struct RetiredHeldByReader {
  static constexpr size_t kSize = 3 * kMiB / 4;
  Daemon d{{"--capacity", "2MiB", "--segment-size", "1MiB", "--keep-warm", "0"}};
  std::optional<Client> reader;
  Client creator = d.Connect();

  RetiredHeldByReader() {
    Guid a;
    {
      Client p = d.Connect();  // its mappings go with it
      a = *p.Put(Pattern(kSize, 1));
      REQUIRE(p.Put(Pattern(kSize, 2)).ok());
    }
    reader.emplace(d.Connect());
    REQUIRE(reader->Get(a).ok());
    (void)StatusOf(*reader);  // its release reaches the daemon
    REQUIRE(creator.Delete(a).ok());
    REQUIRE(StatusOf(creator).retired_held == 1 * kMiB);
  }
};

TEST_CASE("a create waits for the memory a reader is letting go of", "[lifecycle]") {
  RetiredHeldByReader s;
  // The reader reads its socket again a moment after the create began: it unmaps the segment,
  // and the create that waited for it succeeds.
  std::thread wakes([&] {
    std::this_thread::sleep_for(50ms);
    (void)s.reader->GetStatus();
  });
  auto third = s.creator.Put(Pattern(s.kSize, 3));
  wakes.join();
  INFO(third.status().ToString());
  REQUIRE(third.ok());
  auto got = s.creator.Get(*third);
  REQUIRE(got.ok());
  CHECK(std::memcmp(got->frame(0).data(), Pattern(s.kSize, 3).data(), s.kSize) == 0);
}

TEST_CASE("a reader that never unmaps a retired segment costs a create a bounded wait",
          "[lifecycle]") {
  RetiredHeldByReader s;
  auto start = std::chrono::steady_clock::now();
  auto third = s.creator.Put(Pattern(s.kSize, 3));
  INFO(third.status().ToString());
  CHECK(third.status().IsStoreFull());
  CHECK(third.status().message().find("in retired segments that clients have not unmapped") !=
        std::string::npos);
  CHECK(std::chrono::steady_clock::now() - start >= 250ms);
  // Once the reader goes, its segment comes back and the create fits.
  s.reader.reset();
  CHECK(WaitFor([&] { return s.creator.Put(Pattern(s.kSize, 3)).ok(); }));
}
