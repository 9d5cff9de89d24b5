// noisy_neighbours_bench: what a hostile neighbour costs an honest client (docs/design.md, "The
// trust model"). For each attack, a fresh depotd serves an honest client (this process's uid)
// and, as another uid when run as root, an attacker process; the honest client's ping, put of
// 1 KiB, first get of another connection's 1 KiB object and contains of a missing GUID are timed
// in rounds without the attacker, then with it. The table gives each
// operation's p50 and p99 with the attack as a ratio to the same run without it (goal: within
// 2x on every row). The attacks:
//   slots        200 connections whose reference slots all hold ids, while objects they pin
//                are deleted (a full scan of every slot per pinned object, every 5 ms, once)
//   parked gets  4 connections each parking as many gets of 2,048 missing GUIDs as it may
//   leases       900 connections, each holding the smallest lease it may (each miss took every
//                ring and read every leaseholder's socket, once)
//   index        300 objects of 1 byte with 16 KiB of metadata each (the shared index's arena
//                filled, once: the honest gets then all took a round trip)
//   silent connections  900 connections that never say hello (max_handshakes_per_user keeps
//                64 of them; the handshake timeout is raised so that none is closed meanwhile)
//   references   gets through the daemon of 70,000 objects of the attacker's own, each held
//                (this tree: max_references_per_user of 65,536 keeps that many)
// With --depotd LABEL=PATH (repeatable) the same runs on depotd builds of earlier commits.
//
// Usage: noisy_neighbours_bench [--quick] [--only ATTACK] [--depotd LABEL=PATH]...
//   --only ATTACK      one attack: slots, "parked gets", leases, index, "silent connections" or
//                      references
#include <fmt/format.h>
#include <grp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/harness.h"
#include "bench/servers.h"
#include "common/unique_fd.h"
#include "common/unix_socket.h"
#include "proto/index_layout.h"
#include "proto/wire.h"

namespace depot::bench {
namespace {

enum Op { kPing, kPut, kGet, kMiss, kOps };
constexpr std::array<const char*, kOps> kOpNames = {"ping", "put 1 KiB", "first get",
                                                    "contains (miss)"};
enum Attack { kSlots, kParkedGets, kLeases, kIndex, kSilent, kReferences, kAttacks };
constexpr std::array<const char*, kAttacks> kAttackNames = {
    "slots", "parked gets", "leases", "index", "silent connections", "references"};
// The references attack against this tree: the user's cap, set low enough to reach in a bench.
constexpr int kReferenceCap = 65536;
constexpr uid_t kAttacker = 41003;

struct Build {
  std::string label;
  std::string binary;  // empty: this tree's depotd
};

// The attacker runs as another uid when the benchmark can switch to one.
void BecomeAttacker() {
  if (::geteuid() != 0) return;
  if (::setgroups(0, nullptr) != 0 || ::setresgid(kAttacker, kAttacker, kAttacker) != 0 ||
      ::setresuid(kAttacker, kAttacker, kAttacker) != 0) {
    throw BenchError("cannot switch to the attacker's uid");
  }
}

// The read-write mappings of this process's reference slots (/proc/self/maps).
std::vector<std::span<uint64_t>> SlotMappings() {
  std::vector<std::span<uint64_t>> out;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find("/memfd:slots-") == std::string::npos) continue;
    uintptr_t from = 0, to = 0;
    char dash = 0;
    std::istringstream(line) >> std::hex >> from >> dash >> to;
    out.emplace_back(reinterpret_cast<uint64_t*>(from), (to - from) / 8);
  }
  return out;
}

// A get of `guids` that waits forever, in raw bytes.
std::vector<uint8_t> ParkedGet(uint64_t request, const std::vector<wire::Guid>& guids) {
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateGetRequest(fbb, fbb.CreateVectorOfStructs(guids), -1));
  return proto::Encode(static_cast<uint16_t>(proto::MsgType::kGet), request, fbb);
}

void Hello(int fd) {
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateHelloRequestDirect(fbb, proto::kProtocolVersion, "raw"));
  auto m = proto::Encode(static_cast<uint16_t>(proto::MsgType::kHello), 1, fbb);
  if (::send(fd, m.data(), m.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(m.size())) {
    throw BenchError("hello failed");
  }
}

// Runs `attack` against `socket` until told to stop: signals once it is in place.
void RunAttack(Attack attack, const std::string& socket, bool quick, Channel& ch) {
  BecomeAttacker();
  std::vector<Client> conns;
  std::vector<Object> held;
  std::vector<UniqueFd> raw;
  auto connect = [&] { conns.push_back(Check(Client::Connect({socket, "attacker"}), "connect")); };
  std::vector<std::byte> small(64, std::byte{1});
  switch (attack) {
    case kSlots: {
      for (int i = 0; i < (quick ? 50 : 200); ++i) connect();
      // Objects of its own, got through the index and so held by slots, then deleted: pinned.
      std::vector<Guid> ids;
      for (int i = 0; i < 64; ++i) ids.push_back(Check(conns[0].Put(small), "put"));
      Check(conns[0].Ping(), "ping");
      for (const Guid& id : ids) held.push_back(Check(conns[1].Get(id), "get"));
      for (const Guid& id : ids) Check(conns[0].Delete(id), "delete");
      // Every other slot of every connection holds an id.
      for (std::span<uint64_t> slots : SlotMappings()) {
        for (size_t i = 0; i < index::kSlotCount; ++i) {
          uint64_t& slot = slots[index::kSlotsWord + i];
          if (slot == 0) slot = 1 + i % 4096;
        }
        slots[index::kSlotHighWater] = index::kSlotCount;
      }
      break;
    }
    case kParkedGets:
      for (int c = 0; c < 4; ++c) {
        raw.push_back(ConnectUnix(socket));
        Hello(raw.back().get());
        for (uint64_t g = 0; g < 1024; ++g) {
          std::vector<wire::Guid> guids;
          for (int i = 0; i < 2048; ++i) guids.push_back(proto::ToWire(Guid::Random()));
          auto m = ParkedGet(2 + g, guids);
          // A refusal closes nothing: the gets past the limit are answered with an error.
          if (::send(raw.back().get(), m.data(), m.size(), MSG_NOSIGNAL) < 0) break;
        }
      }
      break;
    case kLeases:
      // Each asks for the smallest lease, and never reads a reply.
      for (int i = 0; i < (quick ? 300 : 900); ++i) {
        raw.push_back(ConnectUnix(socket));
        Hello(raw.back().get());
        flatbuffers::FlatBufferBuilder fbb;
        fbb.Finish(wire::CreateLeaseRequest(fbb, 64));
        auto m = proto::Encode(static_cast<uint16_t>(proto::MsgType::kLease), 2, fbb);
        if (::send(raw.back().get(), m.data(), m.size(), MSG_NOSIGNAL) < 0) {
          throw BenchError("lease request failed");
        }
      }
      break;
    case kSilent: {
      for (int i = 0; i < 900; ++i) raw.push_back(ConnectUnix(socket));
      // In place once the daemon has taken them all: those it refuses are answered at once, so
      // it is done when half a second passes with no answer.
      std::vector<pollfd> waiting;
      for (const UniqueFd& fd : raw) waiting.push_back({fd.get(), POLLIN, 0});
      while (::poll(waiting.data(), waiting.size(), 500) > 0) {
        for (pollfd& p : waiting) {
          if (p.revents != 0) p.fd = -1;  // answered (refused): poll skips it from now on
        }
      }
      break;
    }
    case kReferences: {
      connect();
      std::vector<wire::Guid> guids;
      for (int i = 0; i < kReferenceCap + 4464; ++i) {
        guids.push_back(proto::ToWire(Check(conns[0].Put(small), "put")));
      }
      Check(conns[0].Ping(), "ping");
      // Raw gets that do not wait: each object found is held through the daemon, not a slot.
      raw.push_back(ConnectUnix(socket));
      Hello(raw.back().get());
      for (size_t at = 0; at < guids.size(); at += proto::kMaxGuidsPerRequest) {
        size_t n = std::min<size_t>(proto::kMaxGuidsPerRequest, guids.size() - at);
        flatbuffers::FlatBufferBuilder fbb;
        fbb.Finish(wire::CreateGetRequest(fbb, fbb.CreateVectorOfStructs(&guids[at], n), 0));
        auto m = proto::Encode(static_cast<uint16_t>(proto::MsgType::kGet), 2 + at, fbb);
        if (::send(raw.back().get(), m.data(), m.size(), MSG_NOSIGNAL) < 0) {
          throw BenchError("get failed");
        }
      }
      // Read through to the pong after them: every get was answered, its objects held.
      flatbuffers::FlatBufferBuilder fbb;
      fbb.Finish(wire::CreateEmptyReply(fbb));
      constexpr uint64_t kPingId = 1'000'000;  // after the hello's and the gets' ids
      auto ping = proto::Encode(static_cast<uint16_t>(proto::MsgType::kPing), kPingId, fbb);
      if (::send(raw.back().get(), ping.data(), ping.size(), MSG_NOSIGNAL) < 0) {
        throw BenchError("ping failed");
      }
      auto read = [&](void* p, size_t n) {
        for (auto* b = static_cast<uint8_t*>(p); n > 0;) {
          ssize_t got = ::recv(raw.back().get(), b, n, 0);
          if (got <= 0) throw BenchError("the daemon closed the attacker's connection");
          b += got;
          n -= static_cast<size_t>(got);
        }
      };
      for (proto::Header h{}; h.request_id != kPingId;) {
        read(&h, sizeof h);
        std::vector<uint8_t> body(h.length);
        read(body.data(), body.size());
      }
      break;
    }
    case kIndex: {
      connect();
      std::vector<std::byte> metadata(16 << 10, std::byte{7});
      CreateOptions heavy;
      heavy.metadata = metadata;
      for (int i = 0; i < 300; ++i) Check(conns[0].Put(small, heavy), "put");
      Check(conns[0].Ping(), "ping");
      break;
    }
    default:
      break;
  }
  ch.Signal();
  ch.Await();
}

// The honest client: a writer and a reader connection of this process.
struct Honest {
  explicit Honest(const DepotDaemon& d) : writer(d.Connect("writer")), reader(d.Connect("reader")) {
    // The reader maps the writer's segment once, so that its first gets can use the index.
    Guid first = Check(writer.Put(value), "put");
    Check(writer.Ping(), "ping");
    Check(reader.Get(first), "get");
  }
  void Round(std::array<Series, kOps>& s, int n) {
    for (auto& series : s) series.NextRound();
    std::vector<Guid> ids;
    for (int i = 0; i < n; ++i) {
      auto t0 = Clock::now();
      Check(reader.Ping(), "ping");
      s[kPing].Add(Since(t0));
      t0 = Clock::now();
      ids.push_back(Check(writer.Put(value), "put"));
      s[kPut].Add(Since(t0));
      t0 = Clock::now();
      Check(reader.Contains(Guid::Random()), "contains");
      s[kMiss].Add(Since(t0));
    }
    Check(writer.Ping(), "ping");  // its puts are taken: in the table and the index
    for (const Guid& id : ids) {
      auto t0 = Clock::now();
      Object o = Check(reader.Get(id), "get");
      s[kGet].Add(Since(t0));
    }
    for (const Guid& id : ids) Check(writer.Delete(id), "delete");
  }
  Client writer;
  Client reader;
  std::vector<std::byte> value = std::vector<std::byte>(1024, std::byte{0x5a});
};

struct Figures {
  std::array<Summary, kOps> quiet, attacked;
};

Figures Measure(const std::string& dir, const Build& build, Attack attack, bool quick) {
  int rounds = quick ? 2 : 5;
  int per_round = quick ? 200 : 1000;
  std::vector<std::string> args = {"--socket-mode",          "0666",  "--log-level", "error",
                                   "--handshake-timeout-ms", "600000"};
  if (attack == kReferences && build.binary.empty()) {
    args.insert(args.end(), {"--max-references-per-user", std::to_string(kReferenceCap)});
  }
  if (::geteuid() == 0) args.insert(args.end(), {"--allow-users", fmt::format("0,{}", kAttacker)});
  DepotDaemon daemon(dir,
                     fmt::format("noisy-{}-{}", build.label == "this tree" ? "new" : build.label,
                                 static_cast<int>(attack)),
                     DaemonConfig{.capacity = 1ull << 30,
                                  .prefault = false,
                                  .segment_size = 64ull << 20,
                                  .spill_dir = "",
                                  .binary = build.binary,
                                  .args = args});
  Honest honest(daemon);
  std::array<Series, kOps> quiet, attacked;
  // The baseline is taken before the attack only: what an attacker made (objects in the index,
  // say) outlives it.
  for (int r = 0; r < 2 * rounds; ++r) honest.Round(quiet, per_round);
  {
    Child attacker =
        Child::Spawn([&](Channel& ch) { RunAttack(attack, daemon.socket(), quick, ch); });
    attacker.channel().Await();
    for (int r = 0; r < rounds; ++r) honest.Round(attacked, per_round);
    attacker.channel().Signal();
    attacker.Join();
  }
  Figures f;
  for (int op = 0; op < kOps; ++op) {
    f.quiet[op] = quiet[op].Summarize();
    f.attacked[op] = attacked[op].Summarize();
  }
  return f;
}

int Run(bool quick, const std::vector<Build>& builds, const std::string& only) {
  TempDir dir;
  ::chmod(dir.path().c_str(), 0755);  // the attacker's uid reaches the socket
  Say(fmt::format(
      "An honest client beside each attack: {} rounds without the attacker, then {} with it; {} "
      "operations of each kind per round. The attacker runs "
      "as {}. Each cell: the p50 and p99 with the attacker, and their ratios to the same run "
      "without it (goal: 2× at most).\n",
      quick ? 4 : 10, quick ? 2 : 5, quick ? 200 : 1000,
      ::geteuid() == 0 ? fmt::format("uid {}", kAttacker) : "the same uid (not run as root)"));
  std::vector<std::string> header = {"attack", "operation"};
  std::string align = "ll";
  for (const Build& b : builds) {
    header.insert(header.end(), {b.label + " p50 (× quiet)", b.label + " p99 (× quiet)"});
    align += "rr";
  }
  header.push_back("goal");
  align += "l";
  Table t(header, align);
  for (int a = 0; a < kAttacks; ++a) {
    if (!only.empty() && only != kAttackNames[a]) continue;
    std::vector<Figures> figures;
    for (const Build& b : builds) {
      fmt::print(stderr, "  noisy neighbours: {} against {}\n", kAttackNames[a], b.label);
      try {
        figures.push_back(Measure(dir.path(), b, static_cast<Attack>(a), quick));
      } catch (const BenchError& e) {
        fmt::print(stderr, "    failed: {}\n", e.what());
        figures.push_back(Figures{});  // a daemon the attack ended: no figure
      }
    }
    for (int op = 0; op < kOps; ++op) {
      std::vector<std::string> row = {kAttackNames[a], kOpNames[op]};
      bool met = true;
      for (size_t b = 0; b < builds.size(); ++b) {
        const Figures& f = figures[b];
        if (f.quiet[op].n == 0 || f.attacked[op].n == 0) {
          row.insert(row.end(), {"failed", "failed"});
          met = met && b != 0;
          continue;
        }
        double p50 = f.attacked[op].p50 / f.quiet[op].p50;
        double p99 = f.attacked[op].p99 / f.quiet[op].p99;
        row.push_back(fmt::format("{} ({})", Time(f.attacked[op].p50), Ratio(p50)));
        row.push_back(fmt::format("{} ({})", Time(f.attacked[op].p99), Ratio(p99)));
        if (b == 0) met = p50 <= 2 && p99 <= 2;
      }
      row.push_back(met ? "met" : "**missed**");
      t.Row(row);
    }
  }
  t.Print();
  return 0;
}

}  // namespace
}  // namespace depot::bench

int main(int argc, char** argv) {
  bool quick = false;
  std::string only;
  std::vector<depot::bench::Build> builds = {{"this tree", ""}};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string next = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--quick") {
      quick = true;
    } else if (a == "--only" && !next.empty()) {
      only = next;
      ++i;
    } else if (a == "--depotd" && next.find('=') != 0 && next.find('=') != std::string::npos) {
      builds.push_back({next.substr(0, next.find('=')), next.substr(next.find('=') + 1)});
      ++i;
    } else {
      fmt::print(
          stderr,
          "usage: noisy_neighbours_bench [--quick] [--only ATTACK] [--depotd LABEL=PATH]...\n");
      return 2;
    }
  }
  try {
    return depot::bench::Run(quick, builds, only);
  } catch (const std::exception& e) {
    fmt::print(stderr, "noisy_neighbours_bench: {}\n", e.what());
    return 1;
  }
}
