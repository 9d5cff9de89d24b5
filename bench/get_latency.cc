// Section 1, get latency by object size (64 B to 1 GiB): what a consumer waits to have an
// object, for depot and for what it replaces, measured in alternating rounds in one run:
//   floor           a 16-byte request answered by 16 bytes over a Unix socketpair (SocketPeer)
//   depot get       Client::Get of a sealed object; the Object is dropped between gets, so each
//                   is a get of an object not held (the shared index: no round trip). Zero-copy:
//                   no byte is read.
//   held get        the same get while the round holds the object (the process's own cache).
//   get + read      a new Client (connected untimed), so the object's pages are mapped afresh,
//                   then Get and a read of every byte: what first touch costs. Once plain, once
//                   with Object::Populate() (MADV_POPULATE_READ) before the read.
//   Redis GET       hiredis over redis-server's Unix socket, the reply parsed (bytes copied).
//   socket send     the peer writes the N bytes, this process reads them all into a buffer.
// depotd (prefaulted pool), redis-server and the peer run on CPU 0; this process runs on each
// placement in turn (see harness.h).
#include <fmt/format.h>

#include <array>
#include <optional>
#include <vector>

#include "bench/redis.h"
#include "bench/sections.h"

namespace depot::bench {
namespace {

enum Method { kFloor, kGet, kHeld, kRedis, kSocket, kFresh, kFreshPopulate, kMethods };

struct Plan {
  uint64_t size;
  int per_round;        // samples per round, cheap methods
  int fresh_per_round;  // samples per round with a new Client each
};

std::vector<Plan> Plans(bool quick) {
  if (quick) {
    return {{64, 200, 20},
            {4 << 10, 200, 20},
            {64 << 10, 200, 20},
            {1 << 20, 100, 20},
            {64 << 20, 3, 2}};
  }
  return {{64, 1000, 100},    {4 << 10, 1000, 100}, {64 << 10, 1000, 100},
          {1 << 20, 300, 50}, {64 << 20, 8, 4},     {1ull << 30, 1, 1}};
}

// Get, optionally Populate, then read every byte, through a connection made for this sample.
double FreshGetAndRead(const DepotDaemon& daemon, const Guid& id, bool populate) {
  Client c = daemon.Connect();
  auto t0 = Clock::now();
  Object o = Check(c.Get(id), "get");
  if (populate) Check(o.Populate(), "populate");
  KeepAlive(ReadEveryByte(o.frame(0)));
  return Since(t0);
}

struct Row {
  uint64_t size;
  std::array<Summary, kMethods> s;
};

// Measures every method for one size, alternating them round by round.
Row MeasureSize(const DepotDaemon& daemon, Client& client, Redis& redis, SocketPeer& peer,
                const Plan& plan, int rounds) {
  std::vector<std::byte> value(plan.size, std::byte{0x3c});
  Guid id = Check(client.Put(value), "put");
  redis.Set("value", value);
  std::vector<std::byte> into(plan.size, std::byte{0});  // touched: received into resident pages
  std::array<std::byte, 16> ping{};
  std::array<Series, kMethods> series;

  auto once = [&](Method m) -> double {
    auto t0 = Clock::now();
    switch (m) {
      case kFloor:
        peer.Fetch(ping);
        return Since(t0);
      case kGet:
      case kHeld: {  // the same get; for kHeld, while the round holds the object
        Object o = Check(client.Get(id), "get");
        double t = Since(t0);
        KeepAlive(o.size());
        return t;
      }
      case kRedis: {
        Reply r = redis.Get("value");
        double t = Since(t0);
        if (r->len != plan.size) throw BenchError("redis GET returned the wrong size");
        return t;
      }
      case kSocket:
        peer.Fetch(into);
        return Since(t0);
      case kFresh:
        return FreshGetAndRead(daemon, id, false);
      case kFreshPopulate:
        return FreshGetAndRead(daemon, id, true);
      default:
        return 0;
    }
  };
  for (int m = 0; m < kMethods; ++m) once(static_cast<Method>(m));  // warm-up, not counted
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < kMethods; ++k) {
      int m = (k + r) % kMethods;  // each method takes each place in the order in turn
      series[m].NextRound();
      // The floor and a get cost microseconds whatever the size: enough samples for a p99.
      int n = m >= kFresh                              ? plan.fresh_per_round
              : m == kFloor || m == kGet || m == kHeld ? std::max(plan.per_round, 100)
                                                       : plan.per_round;
      std::optional<Object> hold;
      if (m == kHeld) hold = Check(client.Get(id), "get");
      for (int i = 0; i < n; ++i) series[m].Add(once(static_cast<Method>(m)));
    }
  }
  Check(client.Delete(id), "delete");
  redis.Del("value");
  Row row{plan.size, {}};
  for (int m = 0; m < kMethods; ++m) row.s[m] = series[m].Summarize();
  return row;
}

void PrintPlacement(const Context& ctx, int cpu, const std::vector<Row>& rows) {
  Targets& targets = *ctx.targets;
  Say(
      fmt::format("\n### {}\n\nMedian (p50) with the range of the rounds' medians; p99 over all "
                  "samples.",
                  PlacementName(cpu)));
  Table a({"size", "floor p50", "depot get p50 (rounds)", "get p99", "held get p50", "get / floor",
           "≤ 2× floor", "Redis GET p50", "Redis p99", "Redis / depot", "≥ 10× Redis",
           "socket send p50", "socket / depot"},
          "lrrrrrlrrrlrr");
  for (const Row& r : rows) {
    const Summary &floor = r.s[kFloor], &get = r.s[kGet], &redis = r.s[kRedis];
    double vs_floor = get.p50 / floor.p50;
    std::string where = fmt::format("{}, {}", Bytes(r.size), PlacementName(cpu));
    std::string t1 =
        targets.Check("get p50 ≤ 2× bare socket round trip", where,
                      fmt::format("{} ({} vs {})", Ratio(vs_floor), Time(get.p50), Time(floor.p50)),
                      vs_floor <= 2.0);
    double vs_redis = redis.p50 / get.p50;
    std::string t2 = "—";
    if (r.size >= (1u << 20)) {
      t2 = targets.Check(
          "Redis GET p50 ≥ 10× depot get p50 (≥ 1 MiB)", where,
          fmt::format("{} ({} vs {})", Ratio(vs_redis), Time(redis.p50), Time(get.p50)),
          vs_redis >= 10.0);
    }
    std::string panel = PlacementName(cpu);
    auto x = static_cast<double>(r.size);
    Plot("get-latency", panel, "depot get, not held", x, get.p50);
    Plot("get-latency", panel, "depot get, held", x, r.s[kHeld].p50);
    Plot("get-latency", panel, "Redis GET", x, redis.p50);
    Plot("get-latency", panel, "socket: the bytes sent", x, r.s[kSocket].p50);
    Plot("get-latency", panel, "socket round trip, 16 B", x, floor.p50);
    a.Row({Bytes(r.size), Time(floor.p50), P50WithSpread(get), Time(get.p99),
           P50WithSpread(r.s[kHeld]), Ratio(vs_floor), t1, P50WithSpread(redis), Time(redis.p99),
           Ratio(vs_redis), t2, P50WithSpread(r.s[kSocket]), Ratio(r.s[kSocket].p50 / get.p50)});
  }
  a.Print();
  const Row &small = rows.front(), &large = rows.back();
  double growth = large.s[kGet].p50 / small.s[kGet].p50;
  std::string t3 = targets.Check(
      fmt::format("{} get p50 ≤ 2× {} get p50", Bytes(large.size), Bytes(small.size)),
      PlacementName(cpu),
      fmt::format("{} ({} vs {})", Ratio(growth), Time(large.s[kGet].p50), Time(small.s[kGet].p50)),
      growth <= 2.0);
  Say(fmt::format("\n{} get / {} get: {} ({}).", Bytes(large.size), Bytes(small.size),
                  Ratio(growth), t3));

  Say("\nFirst touch: get + reading every byte once through a new connection (fresh mapping), "
      "against the copies that Redis and a socket make (their bytes are then in this process's "
      "memory, written once).");
  Table b({"size", "get + read p50 (rounds)", "p99", "read rate", "get + Populate + read p50",
           "p99", "Redis GET / get+read", "socket / get+read"},
          "lrrrrrrr");
  for (const Row& r : rows) {
    const Summary &fresh = r.s[kFresh], &pop = r.s[kFreshPopulate];
    double best = std::min(fresh.p50, pop.p50);
    b.Row({Bytes(r.size), P50WithSpread(fresh), Time(fresh.p99),
           r.size >= (1u << 20) ? Rate(static_cast<double>(r.size) / fresh.p50) : "—",
           P50WithSpread(pop), Time(pop.p99), Ratio(r.s[kRedis].p50 / best),
           Ratio(r.s[kSocket].p50 / best)});
  }
  b.Print();
  Say("\nThe last two columns divide by the faster of the two get + read medians.");
}

}  // namespace

void GetLatency(const Context& ctx) {
  std::vector<Plan> plans = Plans(ctx.quick);
  int rounds = ctx.quick ? 3 : 5;
  uint64_t largest = plans.back().size;
  DepotDaemon daemon(ctx.dir, "get", {.capacity = largest + (256ull << 20), .prefault = true});
  Say(fmt::format(
      "\n## 1. Get latency by object size\n\n"
      "depotd with a {}; redis-server and a bare socket peer; all three on CPU {}. {} rounds; in "
      "each, every method runs its samples in turn ({}–{} samples a round by size, at least 100 "
      "for the floor and the get, fewer for fresh connections); the floor is measured in the "
      "same rounds as each row. A depot get drops the Object before the next one, so each "
      "is a get of an object this process does not hold (through the shared index when it "
      "answers); it maps, it does not copy. A held get is the same get while the round holds "
      "the object. Redis GET is hiredis over the Unix socket, "
      "the reply parsed (hiredis reads 16 KiB per read call, then copies the value into its "
      "reply). socket send: a peer process writes the N bytes, this process reads them. "
      "floor: 16 bytes there and back over a socketpair.",
      daemon.Describe(), kServerCpu, rounds, plans.back().per_round, plans.front().per_round));
  SocketPeer peer(largest);
  Redis redis = Redis::Connect(ctx.redis->socket());
  redis.FlushAll();
  for (int cpu : Placements()) {
    PinTo(cpu);
    Client client = daemon.Connect();
    std::vector<Row> rows;
    for (const Plan& p : plans) {
      fmt::print(stderr, "  get latency: {}, {}\n", Bytes(p.size), PlacementName(cpu));
      rows.push_back(MeasureSize(daemon, client, redis, peer, p, rounds));
    }
    PrintPlacement(ctx, cpu, rows);
  }
  Unpin();
}

}  // namespace depot::bench
