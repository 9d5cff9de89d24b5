// Section 8, a get of a sealed object this process does not hold yet, 64 B to 1 GiB: through
// the namespace's shared index and a reference slot, no round trip (docs/design.md, "Gets
// without a round trip"), against the bare socket round trip measured in the same rounds, and,
// with --previous-depotd, against that daemon (built before the index: every such get is a
// round trip). Each get drops its Object before the next, so the next one is again a get of an
// object not held. The first get of each object (the one that brings its segment's descriptor)
// is not timed. This process runs on the CPU other than the servers' where there is one.
#include <fmt/format.h>

#include <array>
#include <memory>
#include <optional>
#include <vector>

#include "bench/sections.h"

namespace depot::bench {
namespace {

enum Method { kFloor, kGet, kPrevious, kMethods };

struct Plan {
  uint64_t size;
  int per_round;
};

std::vector<Plan> Plans(bool quick) {
  if (quick) return {{64, 300}, {4 << 10, 300}, {1 << 20, 300}, {64 << 20, 100}};
  return {{64, 2000}, {4 << 10, 2000}, {1 << 20, 2000}, {64 << 20, 1000}, {1ull << 30, 500}};
}

struct Row {
  uint64_t size;
  std::array<Summary, kMethods> s;
};

// A daemon, a connection to it, and one object of the row's size whose segment the connection
// has mapped.
struct Side {
  Side(const std::string& dir, const std::string& name, DaemonConfig config)
      : daemon(dir, name, std::move(config)), client(daemon.Connect()) {}
  void Put(uint64_t size) {
    std::vector<std::byte> value(size, std::byte{0x5a});
    id = Check(client.Put(value), "put");
    // A second connection reads: its first get maps the segment (not timed).
    reader.emplace(daemon.Connect("reader"));
    KeepAlive(Check(reader->Get(id), "first get").size());
  }
  double Get() {
    auto t0 = Clock::now();
    Object o = Check(reader->Get(id), "get");
    double t = Since(t0);
    KeepAlive(o.size());
    return t;
  }
  void Drop() {
    reader.reset();
    Check(client.Delete(id), "delete");
  }
  DepotDaemon daemon;
  Client client;
  std::optional<Client> reader;
  Guid id;
};

}  // namespace

void FirstGet(const Context& ctx) {
  std::vector<Plan> plans = Plans(ctx.quick);
  int rounds = ctx.quick ? 3 : 5;
  uint64_t capacity = plans.back().size + (256ull << 20);
  Side now(ctx.dir, "first-get", {.capacity = capacity});
  std::unique_ptr<Side> before;
  if (!ctx.previous_depotd.empty()) {
    before =
        std::make_unique<Side>(ctx.dir, "first-get-previous",
                               DaemonConfig{.capacity = capacity, .binary = ctx.previous_depotd});
  }
  int cpu = Placements().back();
  Say(fmt::format(
      "\n## 8. Get of a sealed object not held yet\n\n"
      "depotd with a {} (the defaults), this process on CPU {}. {} rounds; in each, the floor "
      "(16 bytes there and back over a socketpair), the get{} run their samples in turn. Each "
      "get drops its Object, so the next is again a get of an object this process does not "
      "hold; the reading connection met the object's segment once before (untimed).{}",
      now.daemon.Describe(), cpu, rounds, before ? "s of both daemons" : "",
      before ? fmt::format(" \"previous\" is a depotd built before the shared index ({}): the "
                           "same get there is a round trip.",
                           ctx.previous_depotd)
             : ""));
  PinTo(cpu);
  SocketPeer peer(16);
  std::array<std::byte, 16> ping{};
  std::vector<Row> rows;
  for (const Plan& plan : plans) {
    fmt::print(stderr, "  first get: {}\n", Bytes(plan.size));
    now.Put(plan.size);
    if (before) before->Put(plan.size);
    std::array<Series, kMethods> series;
    auto once = [&](int m) -> double {
      if (m == kGet) return now.Get();
      if (m == kPrevious) return before->Get();
      auto t0 = Clock::now();
      peer.Fetch(ping);
      return Since(t0);
    };
    int methods = before ? kMethods : kPrevious;
    for (int m = 0; m < methods; ++m) once(m);  // warm-up, not counted
    for (int r = 0; r < rounds; ++r) {
      for (int k = 0; k < methods; ++k) {
        int m = (k + r) % methods;
        series[m].NextRound();
        for (int i = 0; i < plan.per_round; ++i) series[m].Add(once(m));
      }
    }
    now.Drop();
    if (before) before->Drop();
    Row row{plan.size, {}};
    for (int m = 0; m < methods; ++m) row.s[m] = series[m].Summarize();
    rows.push_back(row);
  }
  Unpin();

  std::vector<std::string> columns = {
      "size", "floor p50", "get p50 (rounds)", "get p99", "get / floor", "≤ 0.25× floor", "≤ 1 µs"};
  std::string align = "lrrrrll";
  if (before) {
    columns.insert(columns.end(), {"previous get p50", "previous p99", "previous / get"});
    align += "rrr";
  }
  Table t(columns, align);
  for (const Row& r : rows) {
    const Summary &floor = r.s[kFloor], &get = r.s[kGet];
    double vs_floor = get.p50 / floor.p50;
    std::string where = Bytes(r.size);
    std::vector<std::string> cells = {
        Bytes(r.size),
        Time(floor.p50),
        P50WithSpread(get),
        Time(get.p99),
        Ratio(vs_floor),
        ctx.targets->Check(
            "get of an object not held ≤ 0.25× bare socket round trip", where,
            fmt::format("{} ({} vs {})", Ratio(vs_floor), Time(get.p50), Time(floor.p50)),
            vs_floor <= 0.25),
        ctx.targets->Check("get of an object not held p50 ≤ 1 µs", where, Time(get.p50),
                           get.p50 <= 1e-6)};
    if (before) {
      const Summary& previous = r.s[kPrevious];
      cells.insert(cells.end(),
                   {P50WithSpread(previous), Time(previous.p99), Ratio(previous.p50 / get.p50)});
    }
    t.Row(cells);
  }
  t.Print();
}

}  // namespace depot::bench
