// Section 4, small objects. (a) Put+get pairs per second of 1 KiB objects with 1, 2 and 4 client
// processes (each its own connection), each process in a loop for a fixed time: depot Put (a copy
// into the connection's lease and a record in its put ring) then Get of that object (from the put
// itself while the daemon has not taken it, held by a mark in its record; else from the shared
// index, or a round trip; the Object is dropped), against Redis SET then GET of a new key, and
// (with --previous-depotd) depot against an earlier daemon. depotd and redis-server run on CPU 0;
// the client processes all run on one CPU,
// each placement in turn. depot and Redis alternate run by run; objects and keys are removed
// between runs, untimed.
// (c) Handing a 1 KiB object to another process: one process puts it and sends its name over a
// socketpair, the other gets it, reads it and answers; against the same with Redis SET and GET,
// and the hand-off alone (the socketpair there and back, no store): once a put returns, a get
// that starts later elsewhere finds it (in the shared index when depotd took the put first, which
// it does at once while it spins after hand-offs; else a round trip that takes the put rings
// first). Target: at most twice the floor's time, on the servers' CPU and on another.
// (b) Getting 1,000 objects of 1 KiB: one multi-GUID Client::Get (one round trip) against
// 1,000 single gets and one Redis MGET of 1,000 keys, in alternating rounds, this process on each
// placement.
#include <fmt/format.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <memory>
#include <vector>

#include "bench/redis.h"
#include "bench/sections.h"

namespace depot::bench {
namespace {

constexpr uint64_t kObjectSize = 1024;

struct RunResult {
  uint64_t pairs;
  double seconds;
};

// Runs `procs` processes of `loop` together for `duration`; the pairs per second of all.
double RunTogether(int procs, int cpu, double duration,
                   const std::function<void(Channel&, double)>& loop) {
  std::vector<Child> children;
  for (int i = 0; i < procs; ++i) {
    children.push_back(Child::Spawn([&](Channel& ch) {
      PinTo(cpu);
      loop(ch, duration);
    }));
  }
  StartTogether(children);
  double rate = 0;
  for (auto& c : children) {
    auto r = c.channel().Recv<RunResult>();
    rate += static_cast<double>(r.pairs) / r.seconds;
  }
  JoinAll(children);
  return rate;
}

void DepotLoop(const DepotDaemon& daemon, Channel& ch, double duration) {
  Client c = daemon.Connect("small");
  std::vector<std::byte> value(kObjectSize, std::byte{7});
  std::vector<Guid> made;
  made.reserve(1 << 20);
  ch.Signal();
  ch.Await();
  auto t0 = Clock::now();
  double t = 0;
  while ((t = Since(t0)) < duration) {
    Guid id = Check(c.Put(value), "put");
    Object o = Check(c.Get(id), "get");
    KeepAlive(o.size());
    made.push_back(id);
  }
  ch.Send(RunResult{made.size(), t});
  for (size_t i = 0; i < made.size(); i += 1000) {  // untimed clean-up
    auto batch = std::span(made).subspan(i, std::min<size_t>(1000, made.size() - i));
    c.Delete(batch);
  }
}

void RedisLoop(const std::string& socket, Channel& ch, double duration) {
  Redis r = Redis::Connect(socket);
  std::vector<std::byte> value(kObjectSize, std::byte{7});
  std::string prefix = fmt::format("{}:", ::getpid());
  ch.Signal();
  ch.Await();
  auto t0 = Clock::now();
  double t = 0;
  uint64_t n = 0;
  while ((t = Since(t0)) < duration) {
    std::string key = prefix + std::to_string(n++);
    r.Set(key, value);
    Reply got = r.Get(key);
    KeepAlive(got->len);
  }
  ch.Send(RunResult{n, t});
}

std::string RateRange(const std::vector<double>& v) {
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return fmt::format("{} ({}–{})", PerSecond(Percentile(v, 0.5)), Grouped(std::llround(*lo)),
                     Grouped(std::llround(*hi)));
}

// With `previous` (a depotd of an earlier commit), depot runs against it too, in the same rounds:
// the figures before a change beside those after it.
void PairsPerSecond(const Context& ctx, const DepotDaemon& daemon, const DepotDaemon* previous) {
  int rounds = 3;
  double duration = ctx.quick ? 0.2 : 1.0;
  Redis redis = Redis::Connect(ctx.redis->socket());
  Say(
      fmt::format("\n### (a) 1 KiB put+get pairs per second\n\n{} rounds of {:.1f} s runs; the "
                  "median of the rounds, their range in brackets. Every client process on the "
                  "CPU named.{}",
                  rounds, duration,
                  previous ? fmt::format(" \"Previous\" is depot against a depotd of an earlier "
                                         "commit, {}, in the same rounds.",
                                         previous->Describe())
                           : ""));
  std::vector<int> counts = {1, 2, 4};
  std::vector<std::string> columns = {"client processes",      "their CPU",
                                      "depot put+get pairs/s", "Redis SET+GET pairs/s",
                                      "depot / Redis",         "≥ 3× Redis"};
  std::string align = "rlrrrl";
  if (previous) {
    columns.insert(columns.end(), {"previous: depot pairs/s", "previous / Redis"});
    align += "rr";
  }
  Table t(columns, align);
  const int methods = previous ? 3 : 2;
  for (int cpu : Placements()) {
    std::vector<std::vector<double>> rates[3];
    for (auto& r : rates) r.resize(counts.size());
    for (int r = 0; r < rounds; ++r) {
      for (size_t i = 0; i < counts.size(); ++i) {
        fmt::print(stderr, "  small objects: {} process(es) on CPU {}, round {}\n", counts[i], cpu,
                   r + 1);
        for (int k = 0; k < methods; ++k) {  // each method takes each place in the order in turn
          int m = (k + r) % methods;         // 0: depot, 1: Redis, 2: the previous depotd
          const DepotDaemon* target = m == 0 ? &daemon : previous;
          rates[m][i].push_back(RunTogether(counts[i], cpu, duration, [&](Channel& ch, double d) {
            m == 1 ? RedisLoop(ctx.redis->socket(), ch, d) : DepotLoop(*target, ch, d);
          }));
          if (m == 1) redis.FlushAll();
        }
      }
    }
    for (size_t i = 0; i < counts.size(); ++i) {
      double d = Percentile(rates[0][i], 0.5), rd = Percentile(rates[1][i], 0.5);
      std::string panel = fmt::format("every client process on CPU {}", cpu);
      Plot("pairs", panel, "depot put+get", counts[i], d);
      Plot("pairs", panel, "Redis SET+GET", counts[i], rd);
      std::string met = ctx.targets->Check(
          "1 KiB put+get ops/s ≥ 3× Redis SET+GET",
          fmt::format("{} client process{} on CPU {}", counts[i], counts[i] == 1 ? "" : "es", cpu),
          fmt::format("{} ({} vs {})", Ratio(d / rd), PerSecond(d), PerSecond(rd)), d >= 3 * rd);
      std::vector<std::string> row = {
          std::to_string(counts[i]), std::to_string(cpu), RateRange(rates[0][i]),
          RateRange(rates[1][i]),    Ratio(d / rd),       met};
      if (previous) {
        double pd = Percentile(rates[2][i], 0.5);
        row.insert(row.end(), {RateRange(rates[2][i]), Ratio(pd / rd)});
      }
      t.Row(row);
    }
  }
  t.Print();
}

// What (c) sends from the giver to the taker: a GUID, or a Redis key's number in `hi`.
struct Name {
  uint64_t hi = 0;
  uint64_t lo = 0;
  bool operator==(const Name&) const = default;
};
constexpr Name kEnd{~uint64_t{0}, ~uint64_t{0}};

using Give = std::function<Name()>;
using Take = std::function<void(Name)>;

// The hand-offs per second of (c): `giver()` makes the giving process's function, which makes an
// object and names it, `taker()` the taking process's, which gets it by that name; the two
// processes pinned to `cpu`, for `duration`.
double HandOffs(int cpu, double duration, const std::function<Give()>& giver,
                const std::function<Take()>& taker) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) throw std::runtime_error("socketpair");
  std::vector<Child> children;
  children.push_back(Child::Spawn([&](Channel& ch) {
    PinTo(cpu);
    ::close(pair[1]);
    Channel peer(pair[0]);
    Give give = giver();
    ch.Signal();
    ch.Await();
    auto t0 = Clock::now();
    uint64_t n = 0;
    double t = 0;
    while ((t = Since(t0)) < duration) {
      peer.Send(give());
      peer.Await();
      ++n;
    }
    peer.Send(kEnd);
    ch.Send(RunResult{n, t});
  }));
  children.push_back(Child::Spawn([&](Channel& ch) {
    PinTo(cpu);
    ::close(pair[0]);
    Channel peer(pair[1]);
    Take take = taker();
    ch.Signal();
    ch.Await();
    for (Name name; !((name = peer.Recv<Name>()) == kEnd);) {
      take(name);
      peer.Signal();
    }
    ch.Send(RunResult{0, 1});
  }));
  ::close(pair[0]);
  ::close(pair[1]);
  StartTogether(children);
  auto r = children[0].channel().Recv<RunResult>();
  children[1].channel().Recv<RunResult>();
  JoinAll(children);
  return static_cast<double>(r.pairs) / r.seconds;
}

void HandOff(const Context& ctx, const DepotDaemon& daemon, const DepotDaemon* previous) {
  int rounds = 3;
  double duration = ctx.quick ? 0.2 : 1.0;
  Say(fmt::format(
      "\n### (c) Handing a 1 KiB object to another process\n\nOne process puts an object and "
      "sends its name over a socketpair; another gets it, reads its first byte and answers one "
      "byte; then the next. Both processes on the CPU named, {} rounds of {:.1f} s, the methods "
      "alternating. The floor is the socketpair hand-off alone. depot's get finds the object in "
      "the shared index when depotd took the put before it (after a first hand-off depotd spins "
      "on the put rings for a while, unless its CPU is shared), else it is a round trip (depotd "
      "takes the put rings first, then answers). \"Floor + a ping\" is the socketpair hand-off "
      "with a ping to depotd (Client::Ping) in the taker's turn: the least a hand-off costs whose "
      "get must ask depotd, as every get does where depotd shares the clients' CPU.{}",
      rounds, duration,
      previous ? fmt::format(" \"Previous\" is depot against {}, in the same rounds.",
                             previous->Describe())
               : ""));
  Redis redis = Redis::Connect(ctx.redis->socket());
  std::vector<std::string> columns = {"their CPU",
                                      "floor: hand-offs/s",
                                      "depot hand-offs/s",
                                      "Redis hand-offs/s",
                                      "depot / Redis",
                                      "depot µs beyond the floor",
                                      "Redis µs beyond the floor",
                                      "depot time / floor's",
                                      "≤ 2× the floor",
                                      "floor + a ping: time / floor's"};
  std::string align = "lrrrrrrrlr";
  if (previous) {
    columns.insert(columns.end(), {"previous: depot hand-offs/s", "previous time / floor's"});
    align += "rr";
  }
  Table t(columns, align);
  auto value = std::make_shared<std::vector<std::byte>>(kObjectSize, std::byte{7});
  // 0: depot, 1: Redis, 2: the floor, 3: the floor and a ping, 4: depot against the previous
  // depotd.
  auto depot_giver = [&](const DepotDaemon& target) {
    return [t = &target, value] {
      auto c = std::make_shared<Client>(t->Connect("give"));
      return Give([c, value] {
        Guid g = Check(c->Put(*value), "put");
        return Name{g.hi, g.lo};
      });
    };
  };
  auto depot_taker = [](const DepotDaemon& target) {
    return [t = &target] {
      auto c = std::make_shared<Client>(t->Connect("take"));
      return Take([c](Name name) {
        Object o = Check(c->Get(Guid{name.hi, name.lo}), "get");
        KeepAlive(static_cast<size_t>(o.frame(0)[0]));
      });
    };
  };
  auto floor_giver = [] { return Give([] { return Name{1, 1}; }); };
  std::function<Give()> givers[5] = {
      depot_giver(daemon),
      [&] {
        auto r = std::make_shared<Redis>(Redis::Connect(ctx.redis->socket()));
        auto n = std::make_shared<uint64_t>(0);
        return Give([r, value, n] {
          r->Set(fmt::format("h:{}", *n), *value);
          return Name{(*n)++, 0};
        });
      },
      floor_giver, floor_giver, previous ? depot_giver(*previous) : std::function<Give()>()};
  std::function<Take()> takers[5] = {
      depot_taker(daemon),
      [&] {
        auto r = std::make_shared<Redis>(Redis::Connect(ctx.redis->socket()));
        return Take([r](Name name) {
          Reply got = r->Get(fmt::format("h:{}", name.hi));
          KeepAlive(got->len);
        });
      },
      [] { return Take([](Name) {}); },
      [&] {
        auto c = std::make_shared<Client>(daemon.Connect("ping"));
        return Take([c](Name) { Check(c->Ping(), "ping"); });
      },
      previous ? depot_taker(*previous) : std::function<Take()>()};
  const int methods = previous ? 5 : 4;
  for (int cpu : Placements()) {
    std::vector<double> rates[5];
    for (int r = 0; r < rounds; ++r) {
      fmt::print(stderr, "  small objects: hand-offs on CPU {}, round {}\n", cpu, r + 1);
      for (int k = 0; k < methods; ++k) {
        int m = (k + r) % methods;
        rates[m].push_back(HandOffs(cpu, duration, givers[m], takers[m]));
        if (m == 1) redis.FlushAll();
      }
    }
    double d = Percentile(rates[0], 0.5), rd = Percentile(rates[1], 0.5),
           f = Percentile(rates[2], 0.5);
    std::string met = ctx.targets->Check(
        "Handing a 1 KiB object to another process ≤ 2× the socketpair floor",
        fmt::format("both processes on CPU {}", cpu),
        fmt::format("{:.2f}× ({:.1f} µs vs {:.1f} µs)", f / d, 1e6 / d, 1e6 / f), f / d <= 2);
    std::vector<std::string> row = {std::to_string(cpu),
                                    RateRange(rates[2]),
                                    RateRange(rates[0]),
                                    RateRange(rates[1]),
                                    Ratio(d / rd),
                                    fmt::format("{:.1f}", 1e6 / d - 1e6 / f),
                                    fmt::format("{:.1f}", 1e6 / rd - 1e6 / f),
                                    fmt::format("{:.2f}×", f / d),
                                    met,
                                    fmt::format("{:.2f}×", f / Percentile(rates[3], 0.5))};
    if (previous) {
      double pd = Percentile(rates[4], 0.5);
      row.insert(row.end(), {RateRange(rates[4]), fmt::format("{:.2f}×", f / pd)});
    }
    t.Row(row);
  }
  t.Print();
}

void MultiGet(const Context& ctx, const DepotDaemon& daemon) {
  constexpr int kCount = 1000;
  int rounds = ctx.quick ? 3 : 5;
  int per_round = ctx.quick ? 5 : 20;
  Say(
      fmt::format("\n### (b) Getting {} objects of 1 KiB\n\n{} rounds of {} samples each, this "
                  "process on each placement. The "
                  "Objects are dropped after each sample, untimed, and a ping waits until depotd "
                  "has processed the releases.",
                  Grouped(kCount), rounds, per_round));
  Redis redis = Redis::Connect(ctx.redis->socket());
  std::vector<std::byte> value(kObjectSize, std::byte{9});
  Table t({"placement", "one multi-GUID get p50 (rounds)", "1,000 single gets p50",
           "Redis MGET p50", "singles / multi", "Redis MGET / multi"},
          "lrrrrr");
  for (int cpu : Placements()) {
    PinTo(cpu);
    Client c = daemon.Connect();
    std::vector<Guid> ids;
    std::vector<std::string> keys;
    for (int i = 0; i < kCount; ++i) {
      ids.push_back(Check(c.Put(value), "put"));
      keys.push_back(fmt::format("k{}", i));
      redis.Set(keys.back(), value);
    }
    std::array<Series, 3> s;
    auto once = [&](int m) {
      auto t0 = Clock::now();
      double t = 0;
      if (m == 0) {
        auto objects = c.Get(ids);
        t = Since(t0);
        for (auto& o : objects) Check(o.status(), "multi get");
      } else if (m == 1) {
        std::vector<Object> objects;
        objects.reserve(kCount);
        for (const Guid& id : ids) objects.push_back(Check(c.Get(id), "get"));
        t = Since(t0);
      } else {
        Reply r = redis.MGet(keys);
        t = Since(t0);
      }
      Check(c.Ping(), "ping");
      return t;
    };
    for (int m = 0; m < 3; ++m) once(m);
    for (int r = 0; r < rounds; ++r) {
      for (int k = 0; k < 3; ++k) {
        int m = (k + r) % 3;  // each method takes each place in the order in turn
        s[m].NextRound();
        for (int i = 0; i < per_round; ++i) s[m].Add(once(m));
      }
    }
    Summary multi = s[0].Summarize(), single = s[1].Summarize(), mget = s[2].Summarize();
    t.Row({PlacementName(cpu), P50WithSpread(multi), P50WithSpread(single), P50WithSpread(mget),
           Ratio(single.p50 / multi.p50), Ratio(mget.p50 / multi.p50)});
    c.Delete(ids);
    redis.FlushAll();
  }
  t.Print();
  Unpin();
}

}  // namespace

void SmallObjects(const Context& ctx) {
  DepotDaemon daemon(ctx.dir, "small",
                     {.capacity = (ctx.quick ? 256ull : 512ull) << 20, .prefault = true});
  Say(
      fmt::format("\n## 4. Small objects\n\ndepotd ({}) and redis-server, both on CPU {}. A "
                  "depot Put of 1 KiB is a copy into the connection's lease and a record in its "
                  "put ring (no message while depotd polls the rings); the get that follows is "
                  "made from the put itself while depotd has not taken it (a mark in its record "
                  "asks depotd for a reference on it), else it finds the object in the shared "
                  "index, else it is a round trip.",
                  daemon.Describe(), kServerCpu));
  std::unique_ptr<DepotDaemon> previous;
  if (!ctx.previous_depotd.empty()) {
    previous =
        std::make_unique<DepotDaemon>(ctx.dir, "small-previous",
                                      DaemonConfig{.capacity = (ctx.quick ? 256ull : 512ull) << 20,
                                                   .prefault = true,
                                                   .binary = ctx.previous_depotd});
  }
  PairsPerSecond(ctx, daemon, previous.get());
  MultiGet(ctx, daemon);
  HandOff(ctx, daemon, previous.get());
}

}  // namespace depot::bench
