// What one connection and one user can make depotd hold: gets waiting, bounded in the GUIDs they
// name per connection (max_pending_guids) and per user (max_pending_guids_per_user), and
// connections per user (max_sessions_per_user). The attacker runs as another uid in a process of
// its own; the daemon's memory is read from /proc/PID/status; a victim of a third uid is served
// meanwhile, and status and the metrics show each figure against its limit.
#include <fmt/format.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "common/unix_socket.h"
#include "daemon/parked_creates.h"
#include "proto/wire.h"
#include "tests/other_users.h"

using namespace depot;
using namespace depot::test;
using Catch::Matchers::Contains;
namespace fb = flatbuffers;

namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kPingId = 1'000'000;

bool SendAll(int fd, const std::vector<uint8_t>& bytes) {
  return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}

// Reads one message within 30 s (a loaded machine, sanitizers); false on timeout or end of stream.
bool ReadMessage(int fd, proto::Header& h, std::vector<uint8_t>& body) {
  timeval tv{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  auto read_exactly = [fd](uint8_t* p, size_t n) {
    while (n > 0) {
      ssize_t got = ::recv(fd, p, n, 0);
      if (got <= 0) return false;
      p += got;
      n -= static_cast<size_t>(got);
    }
    return true;
  };
  if (!read_exactly(reinterpret_cast<uint8_t*>(&h), sizeof h)) return false;
  body.resize(h.length);
  return read_exactly(body.data(), body.size());
}

std::vector<uint8_t> Hello() {
  fb::FlatBufferBuilder fbb(128);
  fbb.Finish(wire::CreateHelloRequest(fbb, proto::kProtocolVersion, fbb.CreateString("limits")));
  return proto::Encode(static_cast<uint16_t>(proto::MsgType::kHello), 1, fbb);
}

std::vector<uint8_t> Ping() {
  fb::FlatBufferBuilder fbb(64);
  fbb.Finish(wire::CreateEmptyReply(fbb));
  return proto::Encode(static_cast<uint16_t>(proto::MsgType::kPing), kPingId, fbb);
}

// A get that waits forever for kMaxGuidsPerRequest GUIDs nobody creates, numbered from `first`.
std::vector<uint8_t> GetOfMissing(uint64_t id, uint64_t first) {
  fb::FlatBufferBuilder fbb(64 << 10);
  std::vector<wire::Guid> ids;
  for (uint64_t i = 0; i < proto::kMaxGuidsPerRequest; ++i) {
    ids.push_back(proto::ToWire(Guid::FromRandomBits(0x11111111, first + i)));
  }
  fbb.Finish(wire::CreateGetRequest(fbb, fbb.CreateVectorOfStructs(ids), -1));
  return proto::Encode(static_cast<uint16_t>(proto::MsgType::kGet), id, fbb);
}

// `uid` puts an object and reads it back intact, from a process of its own.
int PutAndGetAs(const Daemon& d, uid_t uid, uint32_t seed) {
  return RunAs(uid, uid, {}, [&] {
    auto c = Client::Connect({d.socket(), "victim"});
    if (!c.ok()) return 1;
    auto bytes = Pattern(256 << 10, seed);
    auto guid = c->Put(bytes);
    if (!guid.ok()) return 2;
    auto obj = c->Get(*guid);
    return obj.ok() && Holds(*obj, bytes) ? 0 : 3;
  });
}

}  // namespace

TEST_CASE(
    "gets waiting are bounded in GUIDs per connection and per user, and the daemon stays small",
    "[limits]") {
  NeedRoot();
  // The default limits: 16,384 GUIDs a connection, 65,536 a user.
  Daemon d = StartOpen({"--allow-users", fmt::format("{},{}", kAlice, kMallory)});
  REQUIRE(PutAndGetAs(d, kAlice, 1) == 0);
  uint64_t before = ResidentOf(d.pid());
  REQUIRE(before > 0);
  // Four connections each send 256 gets of 2,048 missing GUIDs (their limit is 8 such gets), a
  // fifth 8 more (the user's limit is 32): unbounded, about 250 MiB of parked gets.
  constexpr int kFull = 4, kGets = 256, kLast = 8;
  Channel sent, done;
  pid_t attacker = Spawn([&] {
    return RunAs(kMallory, kMallory, {}, [&] {
      // Each connection's gets are all handled (up to its ping's reply) before the next one
      // starts, so that the refusals fall the same way on any machine.
      std::vector<UniqueFd> socks;
      uint64_t next = 1;
      int per_connection = 0, per_user = 0, other = 0;
      for (int c = 0; c <= kFull; ++c) {
        int s = socks.emplace_back(ConnectUnix(d.socket())).get();
        proto::Header h;
        std::vector<uint8_t> body;
        if (s < 0 || !SendAll(s, Hello()) || !ReadMessage(s, h, body)) return 1;
        for (int i = 0; i < (c < kFull ? kGets : kLast); ++i, next += proto::kMaxGuidsPerRequest) {
          if (!SendAll(s, GetOfMissing(2 + i, next))) return 2;
        }
        if (!SendAll(s, Ping())) return 2;
        while (ReadMessage(s, h, body) && h.request_id != kPingId) {
          std::string why = h.type == static_cast<uint16_t>(proto::MsgType::kError)
                                ? proto::Body<wire::ErrorReply>(body)->message()->str()
                                : "";
          if (why.find("(max_pending_guids)") != std::string::npos) {
            ++per_connection;
          } else if (why.find("(max_pending_guids_per_user)") != std::string::npos) {
            ++per_user;
          } else {
            ++other;
          }
        }
      }
      sent.Send(fmt::format("{} {} {}", per_connection, per_user, other));
      done.Receive();  // the gets stay parked while the daemon is measured
      return 0;
    });
  });
  // Every connection was refused past its limit, the last one by its user's, naming the limit.
  CHECK(sent.Receive() == fmt::format("{} 8 0", kFull * (kGets - 8)));
  uint64_t after = ResidentOf(d.pid());
  INFO("the daemon grew by " << (after - before) / kMiB << " MiB");
  // Under the sanitizers freed memory stays in their allocator's quarantine (each refused get's
  // 32 KiB body too), so the daemon's memory says nothing there; the refusals above bound it.
  if (*DEPOT_SANITIZE == '\0') CHECK(after < before + 64 * kMiB);  // 65,536 GUIDs, about 8 MiB
  // Another user is served meanwhile, and its objects read back intact.
  CHECK(PutAndGetAs(d, kAlice, 2) == 0);
  // Status and the metrics show what waits against the limits.
  Client admin = d.Connect();
  StoreStatus st = StatusOf(admin);
  CHECK(st.gets_waiting == 32);
  CHECK(st.pending_guids == 65536);
  CHECK(st.pending_guids_top_user == 65536);
  CHECK(st.max_pending_guids == 16384);
  CHECK(st.max_pending_guids_per_user == 65536);
  std::string out;
  CHECK(Ctl(d, {"status"}, &out) == 0);
  CHECK_THAT(out, Contains("65536 GUIDs in gets waiting (busiest user 65536; at most 16384 a "
                           "connection, 65536 a user)"));
  CHECK(Ctl(d, {"metrics"}, &out) == 0);
  CHECK_THAT(out, Contains(fmt::format("depot_user_pending_guids{{uid=\"{}\"}} 65536", kMallory)));
  done.Send("done");
  CHECK(Wait(attacker) == 0);
  // Gone with their connections.
  CHECK(WaitFor([&] { return StatusOf(admin).pending_guids == 0; }, std::chrono::seconds(30)));
  CHECK(PutAndGetAs(d, kAlice, 3) == 0);
}

TEST_CASE("one user's connections are bounded (max_sessions_per_user), with a clear refusal",
          "[limits]") {
  NeedRoot();
  constexpr int kLimit = 8;
  Daemon d = StartOpen({"--allow-users", fmt::format("{},{}", kAlice, kMallory),
                        "--max-sessions-per-user", std::to_string(kLimit)});
  Channel full, done;
  pid_t attacker = Spawn([&] {
    return RunAs(kMallory, kMallory, {}, [&] {
      std::vector<Client> clients;
      for (int i = 0; i < kLimit; ++i) {
        auto c = Client::Connect({d.socket(), "mallory"});
        if (!c.ok()) return 1;
        clients.push_back(std::move(*c));
      }
      auto refused = Client::Connect({d.socket(), "mallory"});
      full.Send(refused.ok() ? "connected" : refused.status().ToString());
      done.Receive();
      // One closed makes room for one more.
      clients.pop_back();
      bool again = WaitFor(
          [&] {
            return Client::Connect({d.socket(), "mallory"}).ok();
          },
          std::chrono::seconds(30));
      return again ? 0 : 2;
    });
  });
  std::string refusal = full.Receive();
  CHECK_THAT(refusal, Contains("QuotaExceeded") && Contains("already has 8 connections") &&
                          Contains("(max_sessions_per_user)"));
  // Another user connects and is served; the daemon's own user (root here) has no limit.
  CHECK(PutAndGetAs(d, kAlice, 1) == 0);
  std::vector<Client> admins;
  for (int i = 0; i <= kLimit; ++i) admins.push_back(d.Connect());
  StoreStatus st = StatusOf(admins[0]);
  CHECK(st.sessions_top_user == kLimit + 1);  // root's
  CHECK(st.max_sessions_per_user == kLimit);
  std::string out;
  CHECK(Ctl(d, {"metrics"}, &out) == 0);
  CHECK_THAT(out, Contains(fmt::format("depot_user_sessions{{uid=\"{}\"}} {}", kMallory, kLimit)));
  CHECK_THAT(out, Contains(fmt::format("depot_limit{{key=\"max_sessions_per_user\"}} {}", kLimit)));
  done.Send("done");
  CHECK(Wait(attacker) == 0);
}

TEST_CASE("creates waiting for disk are bounded in bytes per connection and per user", "[limits]") {
  ParkedCreates parked({.per_session = 3, .bytes_per_session = 1000, .bytes_per_user = 1500});
  constexpr uid_t kUser = 7, kOther = 8;
  REQUIRE(parked.Admit(1, kUser, 600).ok());
  Status st = parked.Admit(1, kUser, 500);
  CHECK(st.IsQuotaExceeded());
  CHECK_THAT(st.message(), Contains("(max_pending_bytes)"));
  REQUIRE(parked.Admit(2, kUser, 600).ok());
  st = parked.Admit(3, kUser, 400);  // its connection has room, its user has not
  CHECK(st.IsQuotaExceeded());
  CHECK_THAT(st.message(), Contains("user 7") && Contains("(max_parked_bytes_per_user)"));
  REQUIRE(parked.Admit(3, kOther, 400).ok());
  CHECK(parked.bytes() == 1600);
  parked.Release(1, kUser, 600);
  REQUIRE(parked.Admit(3, kUser, 400).ok());
  CHECK(parked.bytes_by_user().at(kUser) == 1000);
  REQUIRE(parked.Admit(4, kOther, 1).ok());
  REQUIRE(parked.Admit(4, kOther, 1).ok());
  REQUIRE(parked.Admit(4, kOther, 1).ok());
  st = parked.Admit(4, kOther, 1);
  CHECK(st.IsQuotaExceeded());
  CHECK_THAT(st.message(), Contains("(max_pending)"));
}

TEST_CASE("connections that never say hello are bounded per user, admitted or not",
          "[limits][hostile]") {
  NeedRoot();
  constexpr int kHandshakes = 8;
  constexpr int kClients = 24;
  // Mallory is admitted, Bob is not: before hello neither is known, and each can hold only its
  // share of the connections the daemon serves.
  Daemon d = StartOpen({"--allow-users", fmt::format("{},{}", kAlice, kMallory), "--max-clients",
                        std::to_string(kClients), "--max-handshakes-per-user",
                        std::to_string(kHandshakes)});
  for (uid_t attacker : {kMallory, kBob}) {
    INFO("uid " << attacker);
    Channel full, done;
    pid_t pid = Spawn([&] {
      return RunAs(attacker, attacker, {}, [&] {
        std::vector<UniqueFd> silent;
        for (int i = 0; i < kClients; ++i) silent.push_back(ConnectUnix(d.socket()));
        // The first kHandshakes wait for a hello; each one past them is refused at once.
        std::string refusals;
        for (int i = kHandshakes; i < kClients; ++i) {
          proto::Header h{};
          std::vector<uint8_t> body;
          if (!silent[i].valid() || !ReadMessage(silent[i].get(), h, body) ||
              h.type != static_cast<uint16_t>(proto::MsgType::kError)) {
            return 1;
          }
          refusals = proto::Body<wire::ErrorReply>(body)->message()->str();
        }
        full.Send(refusals);
        done.Receive();
        return 0;
      });
    });
    std::string refusal = full.Receive();
    CHECK_THAT(refusal, Contains(fmt::format("already has {} connections that have not said hello",
                                             kHandshakes)) &&
                            Contains("(max_handshakes_per_user)"));
    // Others connect and are served while the attacker's connections wait for their hello.
    CHECK(PutAndGetAs(d, kAlice, 1) == 0);
    Client admin = d.Connect();
    StoreStatus st = StatusOf(admin);
    CHECK(st.handshakes_top_user == kHandshakes);
    CHECK(st.max_handshakes_per_user == kHandshakes);
    done.Send("done");
    CHECK(Wait(pid) == 0);
  }
  std::string out;
  CHECK(Ctl(d, {"metrics"}, &out) == 0);
  CHECK_THAT(out, Contains(fmt::format("depot_handshakes_refused_total {}",
                                       2 * (kClients - kHandshakes))));
  CHECK_THAT(
      out, Contains(fmt::format("depot_limit{{key=\"max_handshakes_per_user\"}} {}", kHandshakes)));
}

TEST_CASE("objects one user holds through the daemon are bounded (max_references_per_user)",
          "[limits][hostile]") {
  NeedRoot();
  constexpr size_t kLimit = 1024;  // the least the key takes
  constexpr size_t kObjects = kLimit + 200;
  // Without the shared index every get is answered by the daemon and holds through it.
  Daemon d = StartOpen({"--allow-users", fmt::format("{},{}", kAlice, kMallory), "--index-entries",
                        "0", "--max-references-per-user", std::to_string(kLimit)});
  Client root = d.Connect();
  std::vector<Guid> guids;
  for (size_t i = 0; i < kObjects; ++i) {
    auto id = root.Put(Pattern(64, static_cast<uint32_t>(i)));
    REQUIRE(id.ok());
    guids.push_back(*id);
  }
  Channel full, done;
  pid_t attacker = Spawn([&] {
    return RunAs(kMallory, kMallory, {}, [&] {
      // Her references spread over two connections: the limit is the user's, not a connection's.
      std::vector<Client> clients;
      for (int i = 0; i < 2; ++i) {
        auto c = Client::Connect({d.socket(), "mallory"});
        if (!c.ok()) return 3;
        clients.push_back(std::move(*c));
      }
      std::vector<Object> held;
      std::string refusal;
      size_t refused = 0;
      for (size_t i = 0; i < guids.size(); ++i) {
        auto got = clients[i % 2].Get(guids[i]);
        if (got.ok()) {
          held.push_back(std::move(*got));
        } else if (got.status().IsQuotaExceeded()) {
          ++refused;
          refusal = got.status().ToString();
        } else {
          return 1;
        }
      }
      full.Send(fmt::format("{} {} {}", held.size(), refused, refusal));
      done.Receive();
      // Released, they make room again.
      held.clear();
      bool again =
          WaitFor([&] { return clients[0].Get(guids.back()).ok(); }, std::chrono::seconds(30));
      return again ? 0 : 2;
    });
  });
  std::string report = full.Receive();
  CHECK_THAT(report,
             Contains(fmt::format("{} {} ", kLimit, kObjects - kLimit)) &&
                 Contains("QuotaExceeded") &&
                 Contains(fmt::format("already has {} objects held through depotd", kLimit)) &&
                 Contains("(max_references_per_user)"));
  // Another user holds as many as it likes within its own share, meanwhile.
  CHECK(RunAs(kAlice, kAlice, {}, [&] {
          Client alice = d.Connect();
          std::vector<Object> held;
          for (size_t i = 0; i < 300; ++i) {
            auto got = alice.Get(guids[i]);
            if (!got.ok()) return 1;
            held.push_back(std::move(*got));
          }
          return 0;
        }) == 0);
  StoreStatus st = StatusOf(root);
  CHECK(st.references_top_user == kLimit);
  CHECK(st.max_references_per_user == kLimit);
  CHECK(st.references_refused == kObjects - kLimit);
  std::string out;
  CHECK(Ctl(d, {"metrics"}, &out) == 0);
  CHECK_THAT(out, Contains(fmt::format("depot_references_refused_total {}", kObjects - kLimit)));
  CHECK_THAT(out,
             Contains(fmt::format("depot_limit{{key=\"max_references_per_user\"}} {}", kLimit)));
  done.Send("done");
  CHECK(Wait(attacker) == 0);
}
