// slot_reads_bench: what reading reference slots costs the daemon as idle sessions pile up
// (docs/design.md, "Gets without a round trip"). Before an object's memory goes, the daemon reads
// the reference slots of its namespace's sessions that were sent a segment; this measures that
// on two workloads, with 1, 64 and 1,000 idle connections open beside the one that works, which
// never got anything, and with 1,000 that each got an object once and let it go:
//   delete   1 KiB objects deleted one per request, and all of a round's in one request
//   churn    puts of 1 KiB evictable objects into a full pool: each put evicts one
// Each figure is the p50 of one operation (per object for the one-request delete). The ratios
// to the row of 1 idle are the growth with idle sessions in the same run. With --depotd LABEL=PATH
// (repeatable) the same runs on depotd builds of earlier commits, alternating round by round,
// with "LABEL / this tree" beside each.
//
// Usage: slot_reads_bench [--quick] [--depotd LABEL=PATH]...
#include <fmt/format.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "bench/harness.h"
#include "bench/servers.h"

namespace depot::bench {
namespace {

enum Workload { kDeleteEach, kDeleteBatch, kChurn, kWorkloads };
constexpr std::array<const char*, kWorkloads> kWorkloadNames = {
    "delete, one per request", "delete, all in one request (per object)", "eviction churn (put)"};
// Idle connections beside the worker: how many, and whether each got an object once (so that
// the daemon sent it a segment and reads its slots from then on).
struct Idle {
  int sessions;
  bool got_once;
};
constexpr std::array<Idle, 4> kIdle = {{{1, false}, {64, false}, {1000, false}, {1000, true}}};
constexpr uint64_t kObjectBytes = 1024;
constexpr uint64_t kPool = 32ull << 20;

struct Build {
  std::string label;
  std::string binary;  // empty: this tree's depotd
};

// One daemon with its idle connections and the connection that works.
struct Side {
  Side(const std::string& dir, const Build& build, Idle kind)
      : daemon(dir, fmt::format("slots-{}-{}-{}", build.label, kind.sessions, kind.got_once),
               DaemonConfig{.capacity = kPool, .segment_size = 8ull << 20, .binary = build.binary}),
        worker(daemon.Connect("worker")) {
    Guid shared = Check(worker.Put(value), "shared put");
    for (int i = 0; i < kind.sessions; ++i) {
      idle.push_back(daemon.Connect("idle"));
      if (kind.got_once) Check(idle.back().Get(shared), "idle get");  // let go at once
    }
    // The pool filled with evictable objects, and then some: every later put evicts one.
    Fill(kPool / kObjectBytes + 1024);
  }
  void Fill(uint64_t objects) {
    for (uint64_t i = 0; i < objects; ++i) {
      Check(worker.Put(value, CreateOptions{.evictable = true}), "filling put");
    }
  }
  // The deletes' objects evict as many evictable ones; those are put back after (untimed), so
  // that the churn finds the pool full.
  void Delete(Series& each, Series& batch, int objects) {
    std::vector<Guid> ids;
    for (int i = 0; i < objects; ++i) ids.push_back(Check(worker.Put(value), "put"));
    for (const Guid& id : ids) {
      auto t0 = Clock::now();
      Check(worker.Delete(id), "delete");
      each.Add(Since(t0));
    }
    ids.clear();
    for (int i = 0; i < objects; ++i) ids.push_back(Check(worker.Put(value), "put"));
    auto t0 = Clock::now();
    for (const Status& s : worker.Delete(ids)) Check(s, "delete");
    batch.Add(Since(t0) / objects);
    Fill(2 * objects);
  }
  void Churn(Series& s, int puts) {
    for (int i = 0; i < puts; ++i) {
      auto t0 = Clock::now();
      Check(worker.Put(value, CreateOptions{.evictable = true}), "evicting put");
      s.Add(Since(t0));
    }
  }

  DepotDaemon daemon;
  Client worker;
  std::vector<Client> idle;
  std::vector<std::byte> value = std::vector<std::byte>(kObjectBytes, std::byte{0x3c});
};

std::string IdleName(const Idle& kind) {
  return std::to_string(kind.sessions) + (kind.got_once ? " (each got one once)" : "");
}

int Run(bool quick, const std::vector<Build>& builds) {
  int rounds = quick ? 3 : 7;
  int per_round = quick ? 200 : 1000;
  TempDir dir;
  Say(fmt::format(
      "{} rounds of {} operations per build and count of idle sessions, builds alternating "
      "round by round; 1 KiB objects, a {} pool of 8 MiB segments made on demand, eviction on. "
      "Figures are p50 per operation; each depotd and this process share the machine.\n",
      rounds, per_round, Bytes(kPool)));
  // p50 per [build][idle][workload]
  std::vector<std::array<std::array<Summary, kWorkloads>, kIdle.size()>> p50(builds.size());
  for (size_t n = 0; n < kIdle.size(); ++n) {
    fmt::print(stderr, "  slot reads: {} idle sessions{}\n", kIdle[n].sessions,
               kIdle[n].got_once ? ", each got an object once" : "");
    std::vector<std::unique_ptr<Side>> sides;
    for (const Build& b : builds) sides.push_back(std::make_unique<Side>(dir.path(), b, kIdle[n]));
    std::vector<std::array<Series, kWorkloads>> series(builds.size());
    for (int r = 0; r < rounds; ++r) {
      for (size_t k = 0; k < builds.size(); ++k) {
        size_t b = (k + r) % builds.size();
        for (auto& s : series[b]) s.NextRound();
        sides[b]->Delete(series[b][kDeleteEach], series[b][kDeleteBatch], per_round);
        sides[b]->Churn(series[b][kChurn], per_round);
      }
    }
    for (size_t b = 0; b < builds.size(); ++b) {
      for (int w = 0; w < kWorkloads; ++w) p50[b][n][w] = series[b][w].Summarize();
    }
  }
  std::vector<std::string> header = {"workload", "idle sessions"};
  std::string align = "lr";
  for (const Build& b : builds) {
    header.push_back(b.label + " p50 (rounds)");
    align += "r";
  }
  for (size_t b = 1; b < builds.size(); ++b) {
    header.push_back(builds[b].label + " / " + builds[0].label);
    align += "r";
  }
  Table t(header, align);
  for (int w = 0; w < kWorkloads; ++w) {
    for (size_t n = 0; n < kIdle.size(); ++n) {
      std::vector<std::string> row = {kWorkloadNames[w], IdleName(kIdle[n])};
      for (size_t b = 0; b < builds.size(); ++b) row.push_back(P50WithSpread(p50[b][n][w]));
      for (size_t b = 1; b < builds.size(); ++b) {
        row.push_back(Ratio(p50[b][n][w].p50 / p50[0][n][w].p50));
      }
      t.Row(row);
    }
  }
  t.Print();
  Say("\nGrowth with idle sessions (each row's p50 / the p50 with 1 idle, same build, same "
      "run):\n");
  std::vector<std::string> growth = {"workload", "build"};
  for (size_t n = 1; n < kIdle.size(); ++n) growth.push_back(IdleName(kIdle[n]) + " / 1");
  Table g(growth, "ll" + std::string(kIdle.size() - 1, 'r'));
  for (int w = 0; w < kWorkloads; ++w) {
    for (size_t b = 0; b < builds.size(); ++b) {
      std::vector<std::string> row = {kWorkloadNames[w], builds[b].label};
      for (size_t n = 1; n < kIdle.size(); ++n) {
        row.push_back(Ratio(p50[b][n][w].p50 / p50[b][0][w].p50));
      }
      g.Row(row);
    }
  }
  g.Print();
  return 0;
}

}  // namespace
}  // namespace depot::bench

int main(int argc, char** argv) {
  bool quick = false;
  std::vector<depot::bench::Build> builds = {{"this tree", ""}};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--depotd" && i + 1 < argc && std::string(argv[i + 1]).find('=') != 0 &&
               std::string(argv[i + 1]).find('=') != std::string::npos) {
      std::string v = argv[++i];
      builds.push_back({v.substr(0, v.find('=')), v.substr(v.find('=') + 1)});
    } else {
      fmt::print(stderr, "usage: slot_reads_bench [--quick] [--depotd LABEL=PATH]...\n");
      return 2;
    }
  }
  try {
    return depot::bench::Run(quick, builds);
  } catch (const std::exception& e) {
    fmt::print(stderr, "slot_reads_bench: {}\n", e.what());
    return 1;
  }
}
