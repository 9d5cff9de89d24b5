// Noisy neighbours: a client of another uid admitted to a shared namespace cannot make everyone's
// calls slow by what it writes into its own reference slots (the daemon reads every session's
// slots) nor by holding many leases (a get, contains, stat or delete that misses drains the lease
// holders first). Real daemon, attacker and victim as other uids; each test measures the
// victim's latencies before the attack and under it, in the same daemon.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "proto/index_layout.h"
#include "tests/other_users.h"
#include "tests/raw_connection.h"

namespace depot::test {
namespace {

constexpr int kSamples = 400;

// The median, in milliseconds, of `kSamples` calls of `op` (the tail is left to the machine's
// other load; what the daemon makes every call pay moves the median); -1 when a call fails.
double Median(const std::function<bool()>& op) {
  std::vector<double> ms;
  for (int i = 0; i < kSamples; ++i) {
    auto start = std::chrono::steady_clock::now();
    if (!op()) return -1;
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

bool ExitedOk(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

// Runs `fn` in a child as `uid`: its exit status, or why it failed on `channel` (which then
// carries "" or what `fn` sent).
pid_t SpawnAs(uid_t uid, Channel& channel, const std::function<int()>& fn) {
  return Spawn([&channel, uid, fn] {
    int rc = 100;
    try {
      if (::setresgid(uid, uid, uid) == 0 && ::setresuid(uid, uid, uid) == 0) rc = fn();
    } catch (...) {
      rc = 98;  // a REQUIRE of the raw connection's
    }
    if (rc != 0) channel.Send("failed: " + std::to_string(rc));
    return rc;
  });
}

struct Latencies {
  double ping = 0;
  double contains = 0;  // of a GUID that names nothing: a miss
  double stat = 0;
  double status = 0;
  double clients = 0;
};

// Alice's medians, measured in a process of hers, which also reads `kept` back.
Latencies MeasureAsAlice(const Daemon& d, const Guid& kept, size_t size, uint32_t seed) {
  Channel out;
  pid_t alice = SpawnAs(kAlice, out, [&] {
    Client a = d.Connect();
    Guid missing = Guid::Random();
    Latencies l;
    l.ping = Median([&] { return a.Ping().ok(); });
    l.contains = Median([&] {
      auto c = a.Contains(missing);
      return c.ok() && !*c;
    });
    l.stat = Median([&] { return a.Stat(kept).ok(); });
    l.status = Median([&] { return a.GetStatus().ok(); });
    l.clients = Median([&] { return a.Clients().ok(); });
    auto obj = a.Get(kept);
    if (!obj.ok() || !Holds(*obj, Pattern(size, seed))) return 2;
    std::ostringstream line;
    line << l.ping << " " << l.contains << " " << l.stat << " " << l.status << " " << l.clients;
    out.Send(line.str());
    return 0;
  });
  std::string got = out.Receive();
  INFO(got);
  REQUIRE(ExitedOk(Wait(alice)));
  std::istringstream line(got);
  Latencies l;
  line >> l.ping >> l.contains >> l.stat >> l.status >> l.clients;
  return l;
}

// Generous enough for sanitizers on two loaded cores; the old code's reads of every slot, or
// drains of every lease holder, passed it many times over.
// Under the sanitizers every scan costs several times more, for the old code as for the new: the
// floors grow with it (the old code's figures were 50-500 times the bounds' floors; a stat's
// compare of 512 Ki slots took 68 ms under ASan on two loaded cores).
double Bound(double baseline, double floor_ms) {
  double slower = *DEPOT_SANITIZE != '\0' ? 10 : 1;
  return std::max(10 * baseline, slower * floor_ms);
}

// Mallory's raw sessions: each says hello and keeps the connection open.
struct Sessions {
  std::vector<std::unique_ptr<Raw>> raw;
  // The fds from each hello: the index's, the slots', the put ring's.
  std::vector<UniqueFd> Open(const Daemon& d) {
    raw.push_back(std::make_unique<Raw>(d.socket()));
    std::vector<uint8_t> reply;
    return raw.back()->HelloWithFds(reply);
  }
};

}  // namespace

TEST_CASE("garbage in many sessions' slots and a pin held for ever slow nobody down",
          "[hostile][slots]") {
  NeedRoot();
  Daemon d = StartOpen({"--allow-users", std::to_string(kAlice) + "," + std::to_string(kMallory),
                        "--segment-size", "8MiB"});
  Guid kept = PutAs(d, kAlice, 50000, 1);
  Latencies before = MeasureAsAlice(d, kept, 50000, 1);

  // Mallory's object, put by a process that has gone: no session holds a reference on it. And
  // one that each of its sessions gets, so that the daemon reads their slots (a session that
  // was never sent a segment holds nothing through them).
  Guid mine = PutAs(d, kMallory, 5000, 8);
  Guid bait = PutAs(d, kMallory, 5000, 9);
  constexpr int kSessions = 500;
  Channel ready, done;
  pid_t mallory = SpawnAs(kMallory, ready, [&] {
    Client m = d.Connect();
    // Every slot of many sessions full of ids, each different: the first session's name every
    // object the daemon has made so far (ObjectTable's ids: a record number in the low word, its
    // generation above; records 0-255, generations 1-4), the others' nothing.
    Sessions s;
    for (int i = 0; i < kSessions; ++i) {
      std::vector<UniqueFd> fds = s.Open(d);
      if (fds.size() < 2) return 4;
      if (s.raw.back()->Get(bait) != proto::ReplyType(proto::MsgType::kGet)) return 6;
      void* p =
          ::mmap(nullptr, index::kSlotBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1].get(), 0);
      if (p == MAP_FAILED) return 5;
      auto* words = static_cast<uint64_t*>(p);
      for (uint64_t n = 0; n < index::kSlotCount; ++n) {
        words[index::kSlotsWord + n] =
            i == 0 ? (n / 256 + 1) << 32 | n % 256
                   : (uint64_t{1} << 62) + static_cast<uint64_t>(i) * index::kSlotCount + n;
      }
      words[index::kSlotHighWater] = index::kSlotCount;
      ::munmap(p, index::kSlotBytes);
    }
    // Its own object, deleted: a slot holds it, so it waits for the slot, for ever.
    if (!m.Delete(mine).ok()) return 3;
    ready.Send("ready");
    done.Receive();
    return 0;
  });
  REQUIRE(ready.Receive() == "ready");
  Client admin = d.Connect();
  CHECK(StatusOf(admin).objects_deleted == 1);  // Mallory's, held by its slot
  Latencies during = MeasureAsAlice(d, kept, 50000, 1);
  done.Send("done");
  CHECK(ExitedOk(Wait(mallory)));
  INFO(d.Log());
  INFO("median ms before / during: ping "
       << before.ping << " / " << during.ping << ", contains " << before.contains << " / "
       << during.contains << ", stat " << before.stat << " / " << during.stat << ", status "
       << before.status << " / " << during.status << ", clients " << before.clients << " / "
       << during.clients);
  // A stat compares the 512 Ki slots with one id, and clients reads them: a pass over 4 MiB.
  CHECK(during.ping < Bound(before.ping, 5));
  CHECK(during.contains < Bound(before.contains, 5));
  CHECK(during.stat < Bound(before.stat, 10));
  CHECK(during.status < Bound(before.status, 5));
  CHECK(during.clients < Bound(before.clients, 20));
  // Mallory gone, its pinned object is freed.
  CHECK(WaitFor([&] { return StatusOf(admin).objects_deleted == 0; }));
}

TEST_CASE("many leases held by another uid do not make misses slow", "[hostile][leases]") {
  NeedRoot();
  Daemon d = StartOpen({"--allow-users", std::to_string(kAlice) + "," + std::to_string(kMallory),
                        "--segment-size", "8MiB", "--max-clients", "4096",
                        "--max-sessions-per-user", "4096", "--capacity", "256MiB"});
  Guid kept = PutAs(d, kAlice, 50000, 2);
  Latencies before = MeasureAsAlice(d, kept, 50000, 2);

  constexpr int kSessions = 2000;
  Channel ready, done;
  pid_t mallory = SpawnAs(kMallory, ready, [&] {
    // The smallest leases (64 KiB, whatever they ask for), each on a session of its own, that
    // never put anything.
    Sessions s;
    for (int i = 0; i < kSessions; ++i) {
      s.Open(d);
      s.raw.back()->Lease(64);
    }
    ready.Send("ready");
    done.Receive();
    return 0;
  });
  REQUIRE(ready.Receive() == "ready");
  Latencies during = MeasureAsAlice(d, kept, 50000, 2);
  done.Send("done");
  CHECK(ExitedOk(Wait(mallory)));
  INFO(d.Log());
  INFO("median ms before / during: ping " << before.ping << " / " << during.ping << ", contains "
                                          << before.contains << " / " << during.contains);
  // A miss still looks at each put ring's head: 2000 loads.
  CHECK(during.ping < Bound(before.ping, 2));
  CHECK(during.contains < Bound(before.contains, 2));
}

}  // namespace depot::test
