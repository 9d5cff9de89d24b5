// depot_bench: compares depot with what its users do today (Redis over a Unix socket, a copy
// over a socket, memcpy) and prints one markdown document, every figure measured in this run:
//   1 get latency by size   2 repeated get of a held object   3 put bandwidth
//   4 small objects         5 many readers of one object       6 allocator   7 scale
//   8 get of an object not held yet (the shared index)   9 gets at a million objects
//   10 busy clients among a thousand connected
// followed by the targets, each met or missed. It starts and stops its own servers: a depotd per
// section (built in this tree) and one redis-server (from PATH), on sockets in a temporary
// directory, pinned to CPU 0. Progress goes to stderr; the document to stdout.
//
//   depot_bench [--quick] [--only 1,3,...] [--note TEXT] [--previous-depotd PATH] [--data FILE]
//     --quick            smaller sizes, fewer samples: well under a minute
//     --only             run these sections (numbers as above)
//     --note             a line for the header (scripts/bench passes the commit)
//     --previous-depotd  a depotd built from an earlier commit: section 3 measures its
//                        on-demand pool, section 4 its 1 KiB put+get pairs and section 8 its
//                        gets, beside this tree's, in the same rounds
//     --data             append the charts' points to FILE, one JSON line each (bench/charts.py
//                        draws them; scripts/bench passes it)
#include <fmt/format.h>

#include <ctime>
#include <set>
#include <sstream>
#include <string>

#include "bench/redis.h"
#include "bench/sections.h"

namespace {

using namespace depot::bench;

struct Options {
  bool quick = false;
  std::set<int> only;
  std::string note;
  std::string previous_depotd;
  std::string data;
};

bool Parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") {
      o.quick = true;
    } else if (a == "--only" && i + 1 < argc) {
      std::stringstream list(argv[++i]);
      for (std::string n; std::getline(list, n, ',');) o.only.insert(std::stoi(n));
    } else if (a == "--note" && i + 1 < argc) {
      o.note = argv[++i];
    } else if (a == "--previous-depotd" && i + 1 < argc) {
      o.previous_depotd = argv[++i];
    } else if (a == "--data" && i + 1 < argc) {
      o.data = argv[++i];
    } else {
      return false;
    }
  }
  return true;
}

std::string Now() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M %Z", std::localtime(&t));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (!Parse(argc, argv, opt)) {
    fmt::print(stderr,
               "usage: depot_bench [--quick] [--only 1,3,...] [--note TEXT] "
               "[--previous-depotd PATH] [--data FILE]\n");
    return 2;
  }
  if (!opt.data.empty()) OpenChartData(opt.data);
  using Section = void (*)(const Context&);
  const std::pair<int, Section> sections[] = {
      {1, GetLatency},  {2, HeldGet},           {3, PutThroughput}, {4, SmallObjects},
      {5, ManyReaders}, {6, AllocatorWorkload}, {7, Scale},         {8, FirstGet},
      {9, ScaleGets},   {10, ManyClients}};
  auto started = Clock::now();
  std::string load_before = LoadAverage();
  TempDir dir;
  Targets targets;
  int failures = 0;
  try {
    RedisServer redis(dir.path());
    Say(fmt::format(
        "# depot benchmarks{}\n\n{}; {}.\n\n- machine: {}\n- load average (1, 5, 15 "
        "min) at start: {}\n- redis-server {}: `{}` (the last two limits raised so that a 1 GiB "
        "value is accepted)\n- method: figures that are "
        "compared are measured in the same run, in alternating rounds (the order of "
        "the methods rotating from round to round); p50 is the "
        "median of all samples, the range in brackets that of the rounds' medians, "
        "p99 over all samples. Ratios divide medians.{}",
        opt.quick ? " (--quick)" : "", Now(), opt.quick ? "quick run" : "full run",
        MachineDescription(), load_before, redis.version(), RedisServer::CommandLine(),
        opt.note.empty() ? "" : "\n- " + opt.note));
    Context ctx{opt.quick, dir.path(), &redis, &targets, opt.previous_depotd};
    for (auto [number, run] : sections) {
      if (!opt.only.empty() && !opt.only.contains(number)) continue;
      try {
        run(ctx);
      } catch (const std::exception& e) {
        ++failures;
        Unpin();
        Say(fmt::format("\n**Section {} failed: {}**", number, e.what()));
        fmt::print(stderr, "section {} failed: {}\n", number, e.what());
      }
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "depot_bench: {}\n", e.what());
    return 1;
  }
  targets.Print();
  Say(fmt::format("\nTotal time {}; load average at end: {}.", Time(Since(started)),
                  LoadAverage()));
  return failures == 0 ? 0 : 1;
}
