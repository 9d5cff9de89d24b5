// Puts in one message (docs/design.md, "Puts in one message"): a put returns before the daemon
// has read it, yet a get that starts later finds it; leases run out, renew, leave gaps and end
// with their sessions; quotas; per-user namespaces; and hostile puts, each refused with the
// connection closed and nobody else harmed. Real daemon, real processes.
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "proto/wire.h"
#include "tests/daemon_fixture.h"
#include "tests/other_users.h"
#include "tests/raw_connection.h"

namespace depot::test {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST_CASE("a put returns before the daemon reads it, and a get started later elsewhere finds it",
          "[put]") {
  Daemon d;
  // Bursts of puts that the putter sends faster than the daemon reads them (it serves 64
  // messages of a connection per turn); right after each burst the reader asks for its last
  // object, and for its first, without waiting.
  constexpr int kBursts = 30;
  constexpr int kBurst = 300;
  Channel guids;
  pid_t putter = Spawn([&] {
    Client c = d.Connect();
    for (int b = 0; b < kBursts; ++b) {
      std::string first, last;
      for (int i = 0; i < kBurst; ++i) {
        // Mostly small puts, whose message is the whole put; now and then a larger one.
        auto id = c.Put(Pattern(i % 100 == 0 ? 256 << 10 : 1000, b * kBurst + i));
        if (!id.ok()) return 1;
        (i == 0 ? first : last) = id->ToString();
      }
      guids.Send(last + " " + first);
    }
    return 0;
  });
  Client reader = d.Connect();
  int found = 0;
  for (int b = 0; b < kBursts; ++b) {
    std::string line = guids.Receive();
    auto last = Guid::Parse(line.substr(0, 36));
    auto first = Guid::Parse(line.substr(37));
    REQUIRE(last);
    REQUIRE(first);
    // Each a different request that must not miss: a poll (no waiting), a contains, a stat.
    switch (b % 3) {
      case 0: {
        auto got = reader.Get(*last, kNoWait);
        REQUIRE(got.ok());
        found += Holds(*got, Pattern(1000, b * kBurst + kBurst - 1));
        break;
      }
      case 1: {
        auto has = reader.Contains(*last);
        REQUIRE(has.ok());
        found += *has;
        break;
      }
      default:
        found += reader.Stat(*last).ok();
    }
    auto got = reader.Get(*first, kNoWait);
    REQUIRE(got.ok());
    CHECK(Holds(*got, Pattern(256 << 10, b * kBurst)));
  }
  CHECK(Wait(putter) == 0);
  CHECK(found == kBursts);
}

TEST_CASE("leases run out and renew, and a put may end exactly at a lease's end", "[put]") {
  Daemon d;
  Client c = d.Connect();
  // The first put takes the smallest lease, 4 MiB: 64 puts of 64 KiB fill it exactly.
  std::vector<Guid> ids;
  for (int i = 0; i < 64; ++i) {
    auto id = c.Put(Pattern(64 << 10, i));
    REQUIRE(id.ok());
    ids.push_back(*id);
    if (i == 0) CHECK(StatusOf(c).leased == 4 * kMiB - (64 << 10));
  }
  CHECK(StatusOf(c).leased == 0);
  CHECK(StatusOf(c).used == 4 * kMiB);
  // The next one takes a new lease.
  auto next = c.Put(Pattern(64 << 10, 64));
  REQUIRE(next.ok());
  ids.push_back(*next);
  CHECK(StatusOf(c).leased == 4 * kMiB - (64 << 10));
  // Larger puts renew with larger leases (16 puts' worth), each lease's rest going back.
  for (int i = 0; i < 40; ++i) {
    auto id = c.Put(Pattern(200 << 10, 100 + i));
    REQUIRE(id.ok());
    ids.push_back(*id);
  }
  StoreStatus st = StatusOf(c);
  CHECK(st.objects_sealed == ids.size());
  CHECK(st.used == 65 * (64 << 10) + 40 * (200 << 10));  // objects only: leases are counted apart
  Client other = d.Connect();
  for (size_t i = 0; i < ids.size(); ++i) {
    auto got = other.Get(ids[i], kNoWait);
    REQUIRE(got.ok());
    CHECK(Holds(*got, i <= 64 ? Pattern(64 << 10, i) : Pattern(200 << 10, 100 + (i - 65))));
  }
}

// A daemon Alice, Bob and Mallory may use, each with segments of their own in its 64 MiB.
Daemon StartForOthers(std::vector<std::string> args) {
  args.insert(args.end(), {"--allow-users", fmt::format("{},{},{}", kAlice, kBob, kMallory),
                           "--segment-size", "8MiB"});
  return StartOpen(std::move(args));
}

// A raw client: hello, then a lease of `size`, whose one frame it returns.
wire::FrameLocation RawLease(Raw& r, uint64_t size) {
  r.Hello();
  return r.Lease(size);
}

// A put message of `frames` named `guid`.
std::vector<uint8_t> RawPut(const Guid& guid, const std::vector<wire::FrameLocation>& frames) {
  flatbuffers::FlatBufferBuilder fbb(256);
  BuildPut(fbb, guid, frames);
  return proto::Encode(static_cast<uint16_t>(proto::MsgType::kPut), 0, fbb);
}

TEST_CASE("a put that skips part of its lease gives the gap back", "[put]") {
  Daemon d;
  Client c = d.Connect();
  Raw r(d.socket());
  wire::FrameLocation lease = RawLease(r, 4 * kMiB);
  StoreStatus before = StatusOf(c);
  CHECK(before.leased == 4 * kMiB);
  Guid guid = Guid::Random();
  r.Write(RawPut(guid, {wire::FrameLocation(lease.offset() + 4096, 1000, lease.segment(), 0)}));
  REQUIRE(c.Get(guid, std::chrono::seconds(5)).ok());
  StoreStatus after = StatusOf(c);
  CHECK(before.leased - after.leased == 4096 + 1024);
  CHECK(after.used - before.used == 1024);  // the object's block; the gap went back
}

TEST_CASE("a lease past the quota is refused, and puts take the create path", "[put]") {
  SECTION("bytes") {
    Daemon d({"--capacity", "64MiB", "--user-quota-bytes", "3MiB"});
    Client c = d.Connect();
    auto small = c.Put(Pattern(1000, 1));
    REQUIRE(small.ok());
    CHECK(StatusOf(c).leased == 0);
    auto big = c.Put(Pattern(4 * kMiB, 2));
    REQUIRE(big.status().IsQuotaExceeded());
    CHECK(big.status().message().find("user_quota_bytes") != std::string::npos);
  }
  SECTION("objects") {
    Daemon d({"--capacity", "64MiB", "--client-quota-objects", "2"});
    Client c = d.Connect();
    REQUIRE(c.Put(Pattern(1000, 1)).ok());
    REQUIRE(c.Put(Pattern(100 << 10, 2)).ok());
    CHECK(StatusOf(c).leased == 0);
    auto third = c.Put(Pattern(1000, 3));
    REQUIRE(third.status().IsQuotaExceeded());
  }
  SECTION("a lease counts against the quota until it ends") {
    Daemon d({"--capacity", "64MiB", "--user-quota-bytes", "16MiB"});
    Client c = d.Connect();
    REQUIRE(c.Put(Pattern(1000, 1)).ok());
    StoreStatus st = StatusOf(c);
    REQUIRE(st.users.size() == 1);
    CHECK(st.users[0].objects == 1);
    CHECK(st.users[0].bytes == 4 * kMiB);  // the object's 1000 bytes and the lease's rest
  }
}

TEST_CASE("a pool too small for a put's lease takes it by create, holding no lease", "[put]") {
  // Leases are at most a sixteenth of the capacity: 128 KiB here.
  Daemon d({"--capacity", "2MiB", "--segment-size", "1MiB"});
  Client c = d.Connect();
  auto id = c.Put(Pattern(200 << 10, 1));
  REQUIRE(id.ok());
  StoreStatus st = StatusOf(c);
  CHECK(st.leased == 0);
  CHECK(st.used == 200 << 10);
  auto small = c.Put(Pattern(1000, 2));  // asked again after a second: until then, by create
  REQUIRE(small.ok());
  CHECK(StatusOf(c).leased == 0);
}

TEST_CASE("a process killed with a lease gives it back", "[put]") {
  Daemon d;
  Channel ready;
  pid_t child = Spawn([&] {
    Client c = d.Connect();
    if (!c.Put(Pattern(1000, 1)).ok()) return 1;
    ready.Send("ready");
    ::pause();
    return 0;
  });
  REQUIRE(ready.Receive() == "ready");
  Client c = d.Connect();
  CHECK(StatusOf(c).leased == 4 * kMiB - 1024);
  ::kill(child, SIGKILL);
  Wait(child);
  CHECK(WaitFor([&] { return StatusOf(c).clients == 1; }));
  StoreStatus st = StatusOf(c);
  CHECK(st.leased == 0);
  CHECK(st.used == 1024);  // the object it put stays
  CHECK(st.objects_sealed == 1);
}

// Set in a child by SIGUSR1: stop putting.
volatile sig_atomic_t stop_putting = 0;

TEST_CASE("memory running short takes back idle leases before it evicts, not a lease in use",
          "[put]") {
  // Leases of 4 MiB (a sixteenth of the capacity).
  Daemon d({"--capacity", "64MiB", "--segment-size", "16MiB"});
  constexpr int kIdle = 4;
  Channel ready;
  std::vector<std::unique_ptr<Channel>> go;
  std::vector<pid_t> idle;
  for (int i = 0; i < kIdle; ++i) {
    Channel& mine = *go.emplace_back(std::make_unique<Channel>());
    idle.push_back(Spawn([&, i] {
      Client c = d.Connect();
      auto first = c.Put(Pattern(1000, i));
      if (!first.ok()) return 1;
      ready.Send("idle");
      if (mine.Receive() != "go") return 2;
      // Its lease was taken back: this put takes a new one, or creates, and both objects hold.
      auto second = c.Put(Pattern(1000, 100 + i));
      if (!second.ok()) return 3;
      auto a = c.Get(*first);
      auto b = c.Get(*second);
      if (!a.ok() || !b.ok()) return 4;
      return Holds(*a, Pattern(1000, i)) && Holds(*b, Pattern(1000, 100 + i)) ? 0 : 5;
    }));
  }
  // One more puts, gets and deletes every few milliseconds until told to stop.
  pid_t busy = Spawn([&] {
    ::signal(SIGUSR1, [](int) { stop_putting = 1; });
    Client c = d.Connect();
    ready.Send("busy");
    for (uint32_t n = 0; !stop_putting; ++n) {
      auto id = c.Put(Pattern(1000, 1000 + n));
      if (!id.ok()) return 1;
      {
        auto got = c.Get(*id);
        if (!got.ok() || !Holds(*got, Pattern(1000, 1000 + n))) return 2;
      }
      if (!c.Delete(*id).ok()) return 3;
      ::usleep(2000);
    }
    return 0;
  });
  for (int i = 0; i <= kIdle; ++i) REQUIRE(!ready.Receive().empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // past the daemon's kLeaseIdle
  Client c = d.Connect();
  CHECK(StatusOf(c).leased >= (kIdle + 1) * (4 * kMiB - 1024));
  // Objects of 2 MiB by create (a GUID proposed), until the pool is full. Without the idle leases
  // taken back, 20 MiB of the 64 stay leased and nothing would be evicted (nothing may be).
  std::vector<Guid> mine;
  while (true) {
    CreateOptions o;
    o.guid = Guid::Random();
    auto id = c.Put(Pattern(2 * kMiB, static_cast<uint32_t>(mine.size())), o);
    if (!id.ok()) {
      CHECK(id.status().IsStoreFull());
      break;
    }
    mine.push_back(*id);
    REQUIRE(mine.size() < 32);
  }
  StoreStatus st = StatusOf(c);
  CHECK(st.leases_revoked == kIdle);  // the busy one's lease stays
  CHECK(st.leased <= 4 * kMiB);
  CHECK(st.evictions == 0);
  CHECK(mine.size() >= 24);
  INFO(mine.size() << " objects of 2 MiB fit");
  // Room for the idle ones' next puts; they put, and find their objects whole.
  for (int i = 0; i < 4; ++i) REQUIRE(c.Delete(mine[static_cast<size_t>(i)]).ok());
  for (auto& g : go) g->Send("go");
  for (pid_t pid : idle) CHECK(Wait(pid) == 0);
  ::kill(busy, SIGUSR1);
  CHECK(Wait(busy) == 0);
  for (size_t i = 4; i < mine.size(); ++i) {
    auto got = c.Get(mine[i]);
    REQUIRE(got.ok());
    CHECK(Holds(*got, Pattern(2 * kMiB, static_cast<uint32_t>(i))));
  }
}

TEST_CASE("with per-user namespaces each user puts into a lease of its own", "[put][hostile]") {
  NeedRoot();
  Daemon d = StartForOthers({"--namespaces", "per_user"});
  for (uid_t uid : {kAlice, kBob}) {
    int rc = RunAs(uid, uid, {}, [&] {
      Client c = d.Connect();
      auto id = c.Put(Pattern(1000, uid));
      if (!id.ok()) return 1;
      auto got = c.Get(*id, kNoWait);
      return got.ok() && Holds(*got, Pattern(1000, uid)) ? 0 : 2;
    });
    CHECK(rc == 0);
  }
  Client root = d.Connect();
  StoreStatus st = StatusOf(root);
  CHECK(st.namespaces == 3);  // Alice's, Bob's (their objects stay) and root's
  // Both processes ended, and their leases end when the daemon has handled their closes.
  CHECK(WaitFor([&] { return StatusOf(root).leased == 0; }));
}

// What Mallory's raw client sends after taking a lease (`lease`); `victim` is a frame of Alice's.
enum class Attack { kNoLease, kOutside, kOverlap, kOtherSegment, kReusedGuid, kTooManyFrames };

TEST_CASE("hostile puts are refused, close their connection and harm nobody", "[put][hostile]") {
  NeedRoot();
  Daemon d = StartForOthers({});
  auto attack = GENERATE(Attack::kNoLease, Attack::kOutside, Attack::kOverlap,
                         Attack::kOtherSegment, Attack::kReusedGuid, Attack::kTooManyFrames);
  // Alice's object, put through her lease.
  std::vector<std::byte> bytes = Pattern(5000, 7);
  REQUIRE(RunAs(kAlice, kAlice, {}, [&] { return d.Connect().Put(bytes).ok() ? 0 : 1; }) == 0);
  Client root = d.Connect();
  auto listed = root.List();
  REQUIRE(listed.ok());
  REQUIRE(listed->objects.size() == 1);
  Guid alice_guid = listed->objects[0].guid;
  FrameInfo victim = listed->objects[0].frames.at(0);

  int code = RunAs(kMallory, kMallory, {}, [&] {
    Raw r(d.socket());
    if (attack == Attack::kNoLease) {
      r.Hello();
      r.Write(RawPut(Guid::Random(), {wire::FrameLocation(0, 64, 1, 0)}));
      return static_cast<int>(r.ReadFinalError().code());
    }
    wire::FrameLocation lease = RawLease(r, 4 * kMiB);
    auto at = [&](uint64_t offset, uint64_t size, uint32_t segment) {
      return wire::FrameLocation(offset, size, segment, 0);
    };
    switch (attack) {
      case Attack::kOutside:
        r.Write(
            RawPut(Guid::Random(), {at(lease.offset() + lease.size() - 64, 128, lease.segment())}));
        break;
      case Attack::kOverlap:
        r.Write(RawPut(Guid::Random(), {at(lease.offset(), 4096, lease.segment())}));
        r.Write(RawPut(Guid::Random(), {at(lease.offset() + 1024, 64, lease.segment())}));
        break;
      case Attack::kOtherSegment:
        r.Write(RawPut(Guid::Random(), {at(victim.offset, 64, victim.segment)}));
        break;
      case Attack::kReusedGuid:
        r.Write(RawPut(alice_guid, {at(lease.offset(), 64, lease.segment())}));
        break;
      default:
        r.Write(RawPut(Guid::Random(), std::vector<wire::FrameLocation>(
                                           65, at(lease.offset(), 0, lease.segment()))));
    }
    return static_cast<int>(r.ReadFinalError().code());
  });
  CHECK(code == static_cast<int>(Status::Code::kProtocolError));
  // The daemon lives, Alice's object is whole, and Mallory's lease went with her connection.
  auto got = root.Get(alice_guid, kNoWait);
  REQUIRE(got.ok());
  CHECK(Holds(*got, bytes));
  CHECK(WaitFor([&] { return StatusOf(root).leased == 0; }));
}

// Where Mallory's second put lies, after a first put whose one frame took her whole lease.
enum class AfterWholeLease {
  kPastStart,   // 64 bytes in: once a split of a gap that does not exist, and depotd aborted
  kSameOffset,  // the first frame's own offset: once a second object on the same block
};

TEST_CASE("a put after one that took its whole lease is refused and harms nobody",
          "[put][hostile]") {
  NeedRoot();
  std::string mode = GENERATE("shared", "per_user");
  auto second = GENERATE(AfterWholeLease::kPastStart, AfterWholeLease::kSameOffset);
  INFO(mode << " namespaces, second put " << static_cast<int>(second));
  // keep_warm 0: a segment that falls empty is given back at once, so that a block shared by two
  // objects shows as soon as one of them goes.
  Daemon d = StartForOthers({"--namespaces", mode, "--keep-warm", "0"});
  std::vector<std::byte> bytes = Pattern(5000, 7);
  REQUIRE(RunAs(kAlice, kAlice, {}, [&] { return d.Connect().Put(bytes).ok() ? 0 : 1; }) == 0);

  int code = RunAs(kMallory, kMallory, {}, [&] {
    Raw r(d.socket());
    wire::FrameLocation lease = RawLease(r, 4 * kMiB);
    r.Write(RawPut(Guid::Random(), {lease}));  // the whole lease: accepted
    uint64_t offset = lease.offset() + (second == AfterWholeLease::kPastStart ? 64 : 0);
    r.Write(RawPut(Guid::Random(), {wire::FrameLocation(offset, 64, lease.segment(), 0)}));
    return static_cast<int>(r.ReadFinalError().code());
  });
  CHECK(code == static_cast<int>(Status::Code::kProtocolError));
  // The daemon lives; Mallory's first object is hers alone, on its own block: the accounts add
  // up, and deleting it (her segment then given back) frees what it held; Alice's object is whole
  // before and after.
  Client root = d.Connect();
  StoreStatus st = StatusOf(root);
  CHECK(st.leased == 0);
  CHECK(st.objects_sealed == 2);
  CHECK(st.used >= 4 * kMiB);
  CHECK(st.used < 5 * kMiB);
  CHECK(RunAs(kAlice, kAlice, {}, [&] { return OwnObjectHolds(d, kAlice, bytes); }) == 0);
  CHECK(RunAs(kMallory, kMallory, {}, [&] { return DeleteOwnObjects(d, kMallory); }) == 1);
  CHECK(WaitFor([&] { return StatusOf(root).used < 64 * 1024; }));
  CHECK(RunAs(kAlice, kAlice, {}, [&] { return OwnObjectHolds(d, kAlice, bytes); }) == 0);
  auto id = root.Put(Pattern(3000, 9));
  REQUIRE(id.ok());
  auto back = root.Get(*id, kNoWait);
  REQUIRE(back.ok());
  CHECK(Holds(*back, Pattern(3000, 9)));
}

TEST_CASE("a put over the metadata limit is refused before it is written, and no GUID returns",
          "[put]") {
  Daemon d;
  Client c = d.Connect();
  // Just over the limit (which the daemon would refuse in its ring, closing the connection), and
  // far over it (more than the ring holds).
  for (size_t size : {size_t{16 << 10} + 1, size_t{64 << 10}, size_t{70 << 10}}) {
    INFO(size << " bytes of metadata");
    std::vector<std::byte> metadata(size, std::byte{1});
    CreateOptions options;
    options.metadata = metadata;
    auto put = c.Put(Pattern(1000, 1), options);
    REQUIRE(!put.ok());
    CHECK(put.status().IsInvalidArgument());
    CHECK(put.status().message().find("max_metadata") != std::string::npos);
    // The same error on the create path.
    auto draft = c.Create(std::vector<uint64_t>{1000}, options);
    REQUIRE(!draft.ok());
    CHECK(draft.status().message() == put.status().message());
  }
  // The connection works, and nothing was stored.
  auto id = c.Put(Pattern(1000, 2));
  REQUIRE(id.ok());
  auto got = c.Get(*id, kNoWait);
  REQUIRE(got.ok());
  CHECK(Holds(*got, Pattern(1000, 2)));
  CHECK(StatusOf(c).objects_sealed == 1);
}

}  // namespace
}  // namespace depot::test
