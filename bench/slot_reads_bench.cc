// slot_reads_bench: what reading reference slots costs the daemon as idle sessions pile up
// (docs/design.md, "Gets without a round trip"). Before an object's memory goes, the daemon reads
// the reference slots of its namespace's sessions; this measures that on two workloads, with 1,
// 16 and 64 idle connections open beside the one that works:
//   delete   1 KiB objects deleted one per request, and all of a round's in one request
//   churn    puts of 1 KiB evictable objects into a full pool: each put evicts one
// Each figure is the p50 of one operation (per object for the one-request delete). The ratio
// "64 / 1 idle" is the growth with idle sessions in the same run. With --depotd LABEL=PATH
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
constexpr std::array<int, 3> kIdle = {1, 16, 64};
constexpr uint64_t kObjectBytes = 1024;
constexpr uint64_t kPool = 32ull << 20;

struct Build {
  std::string label;
  std::string binary;  // empty: this tree's depotd
};

// One daemon with its idle connections and the connection that works.
struct Side {
  Side(const std::string& dir, const Build& build, int idle_sessions)
      : daemon(dir, fmt::format("slots-{}-{}", build.label, idle_sessions),
               DaemonConfig{.capacity = kPool, .segment_size = 8ull << 20, .binary = build.binary}),
        worker(daemon.Connect("worker")) {
    for (int i = 0; i < idle_sessions; ++i) idle.push_back(daemon.Connect("idle"));
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
    fmt::print(stderr, "  slot reads: {} idle sessions\n", kIdle[n]);
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
      std::vector<std::string> row = {kWorkloadNames[w], std::to_string(kIdle[n])};
      for (size_t b = 0; b < builds.size(); ++b) row.push_back(P50WithSpread(p50[b][n][w]));
      for (size_t b = 1; b < builds.size(); ++b) {
        row.push_back(Ratio(p50[b][n][w].p50 / p50[0][n][w].p50));
      }
      t.Row(row);
    }
  }
  t.Print();
  Say("\nGrowth from 1 to 64 idle sessions (64 / 1 idle, same build, same run):\n");
  Table g({"workload", "build", "64 / 1 idle"}, "llr");
  for (int w = 0; w < kWorkloads; ++w) {
    for (size_t b = 0; b < builds.size(); ++b) {
      g.Row({kWorkloadNames[w], builds[b].label,
             Ratio(p50[b][kIdle.size() - 1][w].p50 / p50[b][0][w].p50)});
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
