// Puts without a message (docs/design.md, "Puts without a message"): puts written into the
// session's put ring send (almost) no messages, yet a get started elsewhere once a put returned
// finds it, and a putter killed with -9 loses none; a deleted put's block goes back warm to its
// putter's lease; a get of an own put still in the ring is served from the put and holds it; and
// hostile rings, each of which closes only its own connection and harms nobody. Real daemon, real
// processes; to keep puts in the ring for sure, the test stops the daemon (SIGSTOP) around them.
#include <fmt/format.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "proto/put_ring_layout.h"
#include "proto/wire.h"
#include "tests/daemon_fixture.h"
#include "tests/other_users.h"
#include "tests/raw_connection.h"
#include "tests/raw_ring.h"

namespace depot::test {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr int kProtocolErrorCode = static_cast<int>(Status::Code::kProtocolError);

FrameInfo PlaceOf(Client& c, const Guid& guid) {
  auto info = c.Stat(guid);
  REQUIRE(info.ok());
  REQUIRE(info->frames.size() == 1);
  return info->frames[0];
}

// The value of one series of the daemon's metrics; fails the test when absent.
double Metric(Client& c, const std::string& series) {
  auto text = c.Metrics();
  REQUIRE(text.ok());
  size_t at = text->find("\n" + series + " ");
  INFO(series);
  REQUIRE(at != std::string::npos);
  return std::stod(text->substr(at + series.size() + 2));
}

// Whether process `pid` is stopped (state T in /proc/PID/stat).
bool Stopped(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string line;
  std::getline(in, line);
  size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'T';
}

// Stops the daemon `pid` (SIGSTOP) from construction until Resume or the end of the scope, so
// that what clients write into their rings stays there. A stopped daemon would hang whatever
// waits on it, so a watchdog resumes it after `limit` whatever happens; Stopped then says false.
// Used from one thread; the watchdog is a thread of its own, woken by Resume.
class Paused {
 public:
  explicit Paused(pid_t pid, std::chrono::milliseconds limit = std::chrono::seconds(5))
      : pid_(pid) {
    REQUIRE(::kill(pid_, SIGSTOP) == 0);
    REQUIRE(WaitFor([&] { return test::Stopped(pid_); }));
    watchdog_ = std::thread([this, limit] {
      std::unique_lock lk(mu_);
      cv_.wait_for(lk, limit, [this] { return resumed_; });
      ::kill(pid_, SIGCONT);
    });
  }
  ~Paused() { Resume(); }
  Paused(const Paused&) = delete;
  Paused& operator=(const Paused&) = delete;

  void Resume() {
    if (!watchdog_.joinable()) return;
    {
      std::lock_guard lk(mu_);
      resumed_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
  }
  // Whether the daemon is stopped still: nothing the test did waited on it.
  bool Stopped() const { return test::Stopped(pid_); }

 private:
  pid_t pid_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool resumed_ = false;
  std::thread watchdog_;
};

// The series that counts the requests of `type` ("put" counts the puts taken from rings too).
std::string Requests(const std::string& type) {
  return fmt::format("depot_request_duration_seconds_count{{type=\"{}\"}}", type);
}

TEST_CASE("puts into the ring send almost no messages, yet a get elsewhere finds each at once",
          "[put][ring]") {
  Daemon d;
  constexpr int kPuts = 200;
  Channel guids;
  // The first put takes a lease and rings the doorbell (nobody polls the rings yet); so may the
  // puts after it until the daemon, woken by that doorbell, says it polls: a round trip on the
  // same connection comes after the doorbells, so then it does. The puts after that come while
  // the daemon polls, and send nothing.
  pid_t putter = Spawn([&] {
    Client c = d.Connect();
    auto first = c.Put(Pattern(1024, 0));
    if (!first.ok() || !c.GetStatus().ok()) return 1;
    guids.Send(first->ToString());
    for (int i = 1; i <= kPuts; ++i) {
      auto id = c.Put(Pattern(1024, i));
      if (!id.ok()) return 1;
      guids.Send(id->ToString());
    }
    return 0;
  });
  Client reader = d.Connect();
  int found = 0;
  double doorbells = 0;
  for (int i = 0; i <= kPuts; ++i) {
    auto id = Guid::Parse(guids.Receive());
    REQUIRE(id);
    auto got = reader.Get(*id, kNoWait);
    REQUIRE(got.ok());
    found += Holds(*got, Pattern(1024, i));
    if (i == 0) doorbells = Metric(reader, Requests("puts-written"));
  }
  CHECK(found == kPuts + 1);
  CHECK(Wait(putter) == 0);
  CHECK(Metric(reader, Requests("put")) == kPuts + 1);
  CHECK(Metric(reader, Requests("lease")) == 1);
  CHECK(doorbells >= 1);
  // Polling stops only after 100 ms without puts: a putter stalled that long may ring again.
  CHECK(Metric(reader, Requests("puts-written")) - doorbells <= 5);
}

TEST_CASE("puts that returned survive their putter's kill -9", "[put][ring]") {
  Daemon d;
  constexpr int kPuts = 100;
  Channel leased, go, guids;
  pid_t putter = Spawn([&] {
    Client c = d.Connect();
    if (!c.Put(Pattern(1000, 0)).ok()) return 1;  // takes the lease: no round trip after it
    leased.Send("leased");
    if (go.Receive() != "go") return 2;
    // Sizes that fit the 4 MiB lease and records that fit the ring: no put waits on the daemon.
    for (int i = 1; i <= kPuts; ++i) {
      auto id = c.Put(Pattern(1000 + 300 * i, i));
      if (!id.ok()) return 3;
      guids.Send(id->ToString());
    }
    ::raise(SIGKILL);
    return 4;
  });
  REQUIRE(leased.Receive() == "leased");
  std::vector<Guid> ids;
  {
    Paused paused(d.pid());
    go.Send("go");
    for (int i = 1; i <= kPuts; ++i) {
      auto id = Guid::Parse(guids.Receive());
      REQUIRE(id);
      ids.push_back(*id);
    }
    int status = Wait(putter);
    CHECK(WIFSIGNALED(status));
    CHECK(paused.Stopped());  // the puts were in the ring, not taken, when the putter died
  }
  Client reader = d.Connect();
  int found = 0;
  for (int i = 1; i <= kPuts; ++i) {
    auto got = reader.Get(ids[i - 1], kNoWait);
    REQUIRE(got.ok());
    found += Holds(*got, Pattern(1000 + 300 * i, i));
  }
  CHECK(found == kPuts);
  CHECK(StatusOf(reader).objects_sealed == kPuts + 1);
  CHECK(WaitFor([&] { return StatusOf(reader).leased == 0; }));
}

TEST_CASE("a deleted put's block goes back warm to its putter's next put of about its size",
          "[put][ring]") {
  Daemon d({"--capacity", "256MiB", "--user-quota-bytes", "20MiB"});
  std::optional<Client> c(d.Connect());
  Client other = d.Connect();
  // Deletes `guid` (no Object holds it) and waits until it is freed.
  auto remove = [&](const Guid& guid) {
    REQUIRE(c->Delete(guid).ok());
    CHECK(WaitFor([&] {
      StoreStatus st = StatusOf(other);
      return st.objects_deleted == 0 && st.objects_sealed == 0;
    }));
  };
  auto first = c->Put(Pattern(kMiB, 1));
  REQUIRE(first.ok());
  FrameInfo place = PlaceOf(other, *first);
  const std::byte* address = nullptr;
  {
    auto got = c->Get(*first, kNoWait);
    REQUIRE(got.ok());
    CHECK(Holds(*got, Pattern(kMiB, 1)));
    address = got->frame(0).data();
  }
  remove(*first);

  // The same size again: the same block, at the same address in this process.
  auto again = c->Put(Pattern(kMiB, 2));
  REQUIRE(again.ok());
  FrameInfo reused = PlaceOf(other, *again);
  CHECK(reused.segment == place.segment);
  CHECK(reused.offset == place.offset);
  {
    auto got = c->Get(*again, kNoWait);
    REQUIRE(got.ok());
    CHECK(Holds(*got, Pattern(kMiB, 2)));
    CHECK(got->frame(0).data() == address);
  }
  remove(*again);

  // A block more than twice a put's size is not that put's: 1 KiB goes elsewhere...
  auto small = c->Put(Pattern(1024, 3));
  REQUIRE(small.ok());
  FrameInfo elsewhere = PlaceOf(other, *small);
  CHECK((elsewhere.segment != place.segment || elsewhere.offset != place.offset));
  // ...while 600 KiB (more than half of it) takes it.
  auto most = c->Put(Pattern(600 << 10, 4));
  REQUIRE(most.ok());
  FrameInfo warm = PlaceOf(other, *most);
  CHECK(warm.segment == place.segment);
  CHECK(warm.offset == place.offset);
  {
    auto got = other.Get(*most, kNoWait);
    REQUIRE(got.ok());
    CHECK(Holds(*got, Pattern(600 << 10, 4)));
  }
  REQUIRE(c->Delete(*small).ok());
  REQUIRE(c->Delete(*most).ok());
  // Nothing stays counted once the putter is gone: objects, leases, the user's quota.
  c.reset();
  CHECK(WaitFor([&] {
    StoreStatus st = StatusOf(other);
    return st.clients == 1 && st.objects_sealed == 0 && st.objects_deleted == 0;
  }));
  StoreStatus st = StatusOf(other);
  CHECK(st.used == 0);
  CHECK(st.leased == 0);
  // The user's quota is whole again: an object of all of it fits, and no more.
  CHECK(other.Put(Pattern(20 * kMiB + 1, 5)).status().IsQuotaExceeded());
  CHECK(other.Put(Pattern(20 * kMiB, 6)).ok());
}

TEST_CASE("a get of an own put still in the ring is served from the put and holds it",
          "[put][ring]") {
  Daemon d;
  Client c = d.Connect();
  Client other = d.Connect();
  REQUIRE(c.Put(Pattern(1000, 0)).ok());  // takes the lease
  std::vector<std::byte> bytes = Pattern(5000, 1);
  Result<Guid> id = Status::NotFound("not put");
  std::optional<Object> held;
  {
    Paused paused(d.pid());
    id = c.Put(bytes);
    REQUIRE(id.ok());
    auto got = c.Get(*id, kNoWait);
    CHECK(paused.Stopped());  // served without the daemon: from the put
    REQUIRE(got.ok());
    held.emplace(std::move(*got));
  }
  CHECK(Holds(*held, bytes));
  // Deleted by another process: the daemon took the put with a reference for this connection.
  REQUIRE(RunChild([&] { return d.Connect().Delete(*id).ok() ? 0 : 1; }) == 0);
  CHECK(StatusOf(other).objects_deleted == 1);
  CHECK(Holds(*held, bytes));
  held.reset();
  CHECK(WaitFor([&] { return StatusOf(other).objects_deleted == 0; }));
  StoreStatus st = StatusOf(other);
  CHECK(st.objects_sealed == 1);  // the first put's
  CHECK(st.used == 1024);

  SECTION("and a holder killed with -9 frees it") {
    Channel leased, go, guids;
    pid_t holder = Spawn([&] {
      Client mine = d.Connect();
      if (!mine.Put(Pattern(1000, 2)).ok()) return 1;
      leased.Send("leased");
      if (go.Receive() != "go") return 2;
      auto put = mine.Put(bytes);
      if (!put.ok()) return 3;
      auto got = mine.Get(*put, kNoWait);
      if (!got.ok() || !Holds(*got, bytes)) return 4;
      guids.Send(put->ToString());
      ::pause();
      return 0;
    });
    REQUIRE(leased.Receive() == "leased");
    std::optional<Guid> guid;
    {
      Paused paused(d.pid());
      go.Send("go");
      guid = Guid::Parse(guids.Receive());
      CHECK(paused.Stopped());
    }
    REQUIRE(guid);
    REQUIRE(other.Delete(*guid).ok());
    CHECK(StatusOf(other).objects_deleted == 1);
    ::kill(holder, SIGKILL);
    Wait(holder);
    CHECK(WaitFor([&] { return StatusOf(other).objects_deleted == 0; }));
    st = StatusOf(other);
    CHECK(st.objects_sealed == 2);  // the two first puts
    CHECK(st.used == 2048);
    CHECK(st.leased == 4 * kMiB - 1024);  // this process's lease; the holder's went with it
  }
}

// A message of `type` with an empty body (a ping, a doorbell).
std::vector<uint8_t> Empty(proto::MsgType type, uint64_t request_id) {
  flatbuffers::FlatBufferBuilder fbb(16);
  fbb.Finish(wire::CreateEmptyReply(fbb));
  return proto::Encode(static_cast<uint16_t>(type), request_id, fbb);
}

// A release of the ring holds on `guids`.
std::vector<uint8_t> ReleaseOf(const std::vector<Guid>& guids) {
  flatbuffers::FlatBufferBuilder fbb(128);
  std::vector<wire::Guid> wire_guids;
  for (const Guid& g : guids) wire_guids.push_back(proto::ToWire(g));
  fbb.Finish(wire::CreateReleaseRequest(fbb, 0, fbb.CreateVectorOfStructs(wire_guids)));
  return proto::Encode(static_cast<uint16_t>(proto::MsgType::kRelease), 0, fbb);
}

// Whether a ping on `r` is answered (the connection works): true at its pong.
bool Pongs(Raw& r, uint64_t request_id) {
  r.Write(Empty(proto::MsgType::kPing, request_id));
  proto::Header h;
  std::vector<uint8_t> body;
  while (r.Read(h, body)) {
    if (h.request_id == request_id) return h.type == proto::ReplyType(proto::MsgType::kPing);
  }
  return false;
}

// A daemon Alice and Mallory may use, with `args` besides.
Daemon StartForOthers(std::vector<std::string> args = {}) {
  args.insert(args.end(),
              {"--allow-users", fmt::format("{},{}", kAlice, kMallory), "--segment-size", "8MiB"});
  return StartOpen(std::move(args));
}

// What Mallory writes into its ring.
enum class Scribble {
  kHeadBeyond,      // a head further than the ring's size past the tail
  kHeadUnaligned,   // a head inside a word
  kZeroLength,      // a record of no body
  kLongerThanHead,  // a record longer than what is published
  kGarbage,         // a body that does not verify as a put
  kNoLease,         // a valid put, with no lease taken
  kOutsideLease,    // a valid put whose frame runs past its lease's end
  kVictimFrame,     // a valid put of a frame of Alice's object
  kHeldAlicesGuid,  // a held put that names Alice's object
};
// How the daemon comes to take Mallory's ring.
enum class Trigger { kPing, kDoorbell, kOthersMiss };

TEST_CASE("hostile rings close their own connection and harm nobody", "[put][ring][hostile]") {
  NeedRoot();
  Daemon d = StartForOthers();
  std::vector<std::byte> bytes = Pattern(5000, 7);
  REQUIRE(RunAs(kAlice, kAlice, {}, [&] { return d.Connect().Put(bytes).ok() ? 0 : 1; }) == 0);
  Client root = d.Connect();
  auto listed = root.List();
  REQUIRE(listed.ok());
  REQUIRE(listed->objects.size() == 1);
  Guid alice = listed->objects[0].guid;
  FrameInfo victim = listed->objects[0].frames.at(0);
  // Root's own puts hold a lease while the test runs: a get of a missing object drains the rings
  // only while some lease exists.
  REQUIRE(root.Put(Pattern(1000, 8)).ok());

  for (Scribble scribble :
       {Scribble::kHeadBeyond, Scribble::kHeadUnaligned, Scribble::kZeroLength,
        Scribble::kLongerThanHead, Scribble::kGarbage, Scribble::kNoLease, Scribble::kOutsideLease,
        Scribble::kVictimFrame, Scribble::kHeldAlicesGuid}) {
    for (Trigger trigger : {Trigger::kPing, Trigger::kDoorbell, Trigger::kOthersMiss}) {
      INFO("scribble " << static_cast<int>(scribble) << ", trigger " << static_cast<int>(trigger));
      Channel written;
      pid_t mallory = Spawn([&] {
        if (::setgroups(0, nullptr) != 0 || ::setresgid(kMallory, kMallory, kMallory) != 0 ||
            ::setresuid(kMallory, kMallory, kMallory) != 0) {
          return 100;
        }
        Raw r(d.socket());
        RawRing ring(r);
        if (trigger == Trigger::kOthersMiss) {
          // Puts came to this ring lately (its doorbell, answered before the ping): the daemon
          // polls it, and another client's miss takes it.
          r.Write(Empty(proto::MsgType::kPutsWritten, 0));
          r.Write(Empty(proto::MsgType::kPing, 4));
          proto::Header h{};
          std::vector<uint8_t> pong;
          if (!r.Read(h, pong)) return 101;
        }
        auto frame = [](uint64_t offset, uint64_t size, uint32_t segment) {
          return wire::FrameLocation(offset, size, segment, 0);
        };
        std::vector<uint8_t> garbage(64, 0xa5);
        switch (scribble) {
          case Scribble::kHeadBeyond:
            ring.Publish(put_ring::kRecordBytes + 8);
            break;
          case Scribble::kHeadUnaligned:
            ring.Write(0, 4, garbage);
            ring.Publish(12);
            break;
          case Scribble::kZeroLength:
            ring.Write(0, 0, {});
            ring.Publish(put_ring::kHeaderBytes);
            break;
          case Scribble::kLongerThanHead:
            ring.Write(0, 4096, garbage);
            ring.Publish(put_ring::RecordSpan(garbage.size()));
            break;
          case Scribble::kGarbage:
            ring.Append(garbage);
            break;
          case Scribble::kNoLease:
            ring.Append(PutBody(Guid::Random(), {frame(0, 64, 1)}));
            break;
          case Scribble::kOutsideLease: {
            wire::FrameLocation lease = r.Lease(4 * kMiB);
            ring.Append(PutBody(Guid::Random(),
                                {frame(lease.offset() + lease.size() - 64, 128, lease.segment())}));
            break;
          }
          case Scribble::kVictimFrame:
            r.Lease(4 * kMiB);
            ring.Append(PutBody(Guid::Random(), {frame(victim.offset, 64, victim.segment)}));
            break;
          case Scribble::kHeldAlicesGuid: {
            wire::FrameLocation lease = r.Lease(4 * kMiB);
            ring.Append(PutBody(alice, {frame(lease.offset(), 64, lease.segment())}),
                        put_ring::kHeld);
            break;
          }
        }
        // The daemon's poll may have taken the ring and closed the connection already: then the
        // trigger finds it closed, and the error is read all the same.
        switch (trigger) {
          case Trigger::kPing:
            r.TryWrite(Empty(proto::MsgType::kPing, 5));
            break;
          case Trigger::kDoorbell:
            r.TryWrite(Empty(proto::MsgType::kPutsWritten, 0));
            break;
          case Trigger::kOthersMiss:
            // As a client does after it publishes: the word read after a fence says whether
            // the daemon still polls the ring, or its doorbell must ring.
            std::atomic_thread_fence(std::memory_order_seq_cst);
            if ((ring.Word(put_ring::kPolled).load() & put_ring::kStateMask) !=
                put_ring::kPolling) {
              r.TryWrite(Empty(proto::MsgType::kPutsWritten, 0));
            }
            written.Send("written");
        }
        return static_cast<int>(r.ReadFinalError().code());
      });
      if (trigger == Trigger::kOthersMiss) {
        REQUIRE(written.Receive() == "written");
        CHECK(root.Get(Guid::Random(), kNoWait).status().IsNotFound());
      }
      int status = Wait(mallory);
      REQUIRE(WIFEXITED(status));
      CHECK(WEXITSTATUS(status) == kProtocolErrorCode);
      // The daemon lives and serves others; Alice's object is whole.
      auto got = root.Get(alice, kNoWait);
      REQUIRE(got.ok());
      CHECK(Holds(*got, bytes));
      auto id = root.Put(Pattern(3000, 9));
      REQUIRE(id.ok());
      auto back = root.Get(*id, kNoWait);
      REQUIRE(back.ok());
      CHECK(Holds(*back, Pattern(3000, 9)));
      REQUIRE(root.Delete(*id).ok());
    }
  }
  // Mallory's leases went with her connections; only Alice's object and root's first put stay.
  CHECK(WaitFor([&] {
    StoreStatus st = StatusOf(root);
    return st.clients == 1 && st.objects_sealed == 2 && st.objects_deleted == 0;
  }));
}

TEST_CASE("ring records past a put that took the whole lease close their connection only",
          "[put][ring][hostile]") {
  NeedRoot();
  std::string mode = GENERATE("shared", "per_user");
  uint64_t past = GENERATE(0, 64);  // the second frame's offset past the lease's start
  INFO(mode << " namespaces, second frame at +" << past);
  Daemon d = StartForOthers({"--namespaces", mode, "--keep-warm", "0"});
  std::vector<std::byte> bytes = Pattern(5000, 7);
  REQUIRE(RunAs(kAlice, kAlice, {}, [&] { return d.Connect().Put(bytes).ok() ? 0 : 1; }) == 0);
  int code = RunAs(kMallory, kMallory, {}, [&] {
    Raw r(d.socket());
    RawRing ring(r);
    wire::FrameLocation lease = r.Lease(4 * kMiB);
    std::vector<uint8_t> first = PutBody(Guid::Random(), {lease});
    std::vector<uint8_t> second = PutBody(
        Guid::Random(), {wire::FrameLocation(lease.offset() + past, 64, lease.segment(), 0)});
    ring.Write(0, first.size(), first);
    uint64_t at = put_ring::RecordSpan(first.size());
    ring.Write(at, second.size(), second);
    ring.Publish(at + put_ring::RecordSpan(second.size()));
    r.TryWrite(Empty(proto::MsgType::kPutsWritten, 0));
    return static_cast<int>(r.ReadFinalError().code());
  });
  CHECK(code == kProtocolErrorCode);
  // The daemon lives, Mallory's one object is alone on its block, and Alice's is whole before
  // and after Mallory's is deleted (and her segment given back).
  Client root = d.Connect();
  StoreStatus st = StatusOf(root);
  CHECK(st.leased == 0);
  CHECK(st.used < 5 * kMiB);
  CHECK(RunAs(kAlice, kAlice, {}, [&] { return OwnObjectHolds(d, kAlice, bytes); }) == 0);
  CHECK(RunAs(kMallory, kMallory, {}, [&] { return DeleteOwnObjects(d, kMallory); }) == 1);
  CHECK(WaitFor([&] { return StatusOf(root).used < 64 * 1024; }));
  CHECK(RunAs(kAlice, kAlice, {}, [&] { return OwnObjectHolds(d, kAlice, bytes); }) == 0);
}

TEST_CASE("another user's get parked forever does not make a user's puts ring the doorbell",
          "[put][ring][hostile]") {
  NeedRoot();
  Daemon d = StartForOthers();
  constexpr int kPuts = 200;
  // Mallory parks gets that wait forever for objects nobody will put.
  Channel parked, done;
  pid_t mallory = Spawn([&] {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(kMallory, kMallory, kMallory) != 0 ||
        ::setresuid(kMallory, kMallory, kMallory) != 0) {
      return 100;
    }
    Raw r(d.socket());
    r.Hello();
    flatbuffers::FlatBufferBuilder fbb;
    std::vector<wire::Guid> missing = {proto::ToWire(Guid::Random())};
    fbb.Finish(wire::CreateGetRequest(fbb, fbb.CreateVectorOfStructs(missing), -1));
    r.Write(proto::Encode(static_cast<uint16_t>(proto::MsgType::kGet), 7, fbb));
    r.Write(Empty(proto::MsgType::kPing, 8));  // answered once the get above is parked
    proto::Header h;
    std::vector<uint8_t> body;
    while (r.Read(h, body) && h.request_id != 8) {
    }
    parked.Send("parked");
    done.Receive();
    return 0;
  });
  REQUIRE(parked.Receive() == "parked");
  Client root = d.Connect();
  double before = Metric(root, Requests("puts-written"));
  int code = RunAs(kAlice, kAlice, {}, [&] {
    Client c = d.Connect();
    for (int i = 0; i < kPuts; ++i) {
      if (!c.Put(Pattern(1024, static_cast<uint32_t>(i))).ok()) return 1;
    }
    return 0;
  });
  CHECK(code == 0);
  // Each put returned once its record was in the ring; the daemon takes the last of them on its
  // next poll or when her connection closes, which may come after root's question.
  CHECK(WaitFor([&] { return Metric(root, Requests("put")) == kPuts; }));
  // Alice's puts go through her ring with a doorbell now and then (the first, and after the
  // polling stops), not one per put as they would to wake a get of hers.
  CHECK(Metric(root, Requests("puts-written")) - before <= 10);
  done.Send("done");
  CHECK(Wait(mallory) == 0);
}

TEST_CASE("scribbles on a ring's flags and return words break nothing", "[put][ring][hostile]") {
  NeedRoot();
  Daemon d = StartForOthers();
  Client root = d.Connect();
  Guid held = Guid::Random();
  Guid flagged = Guid::Random();
  int rc = RunAs(kMallory, kMallory, {}, [&] {
    Raw r(d.socket());
    RawRing ring(r);
    wire::FrameLocation lease = r.Lease(4 * kMiB);
    // A held put, and one with the daemon's flag and bits nobody uses already set: both are puts.
    std::vector<uint8_t> first =
        PutBody(held, {wire::FrameLocation(lease.offset(), 64, lease.segment(), 0)});
    std::vector<uint8_t> second =
        PutBody(flagged, {wire::FrameLocation(lease.offset() + 64, 64, lease.segment(), 0)});
    ring.Write(0, first.size() | put_ring::kHeld, first);
    uint64_t at = put_ring::RecordSpan(first.size());
    ring.Write(at, second.size() | put_ring::kTaken | (uint64_t{0xabcd} << 40), second);
    ring.Publish(at + put_ring::RecordSpan(second.size()));
    ring.Word(put_ring::kTail).store(12345);  // the daemon's word, which it never reads
    if (!Pongs(r, 5)) return 1;
    // Returns the daemon will not write while the client claims to have taken more than exist.
    ring.Word(put_ring::kReturnTail).store(~uint64_t{0});
    flatbuffers::FlatBufferBuilder fbb(64);
    wire::Guid g = proto::ToWire(flagged);
    fbb.Finish(wire::CreateGuidsRequest(fbb, fbb.CreateVectorOfStructs(&g, 1)));
    r.Write(proto::Encode(static_cast<uint16_t>(proto::MsgType::kDelete), 6, fbb));
    // Releases of the held put twice, and of an object it does not hold.
    r.Write(ReleaseOf({held, held, Guid::Random()}));
    if (!Pongs(r, 7)) return 2;
    return ring.Word(put_ring::kReturnHead).load() == 0 ? 0 : 3;
  });
  CHECK(rc == 0);
  // The held put was released (once), the other deleted and freed, not handed back: nothing
  // leaks once Mallory is gone.
  CHECK(WaitFor([&] {
    StoreStatus st = StatusOf(root);
    return st.clients == 1 && st.leased == 0 && st.objects_deleted == 0;
  }));
  auto info = root.Stat(held);
  REQUIRE(info.ok());
  CHECK(info->refcount == 0);
  CHECK(root.Stat(flagged).status().IsNotFound());
  StoreStatus st = StatusOf(root);
  CHECK(st.objects_sealed == 1);
  CHECK(st.used == 64);
}

}  // namespace
}  // namespace depot::test
