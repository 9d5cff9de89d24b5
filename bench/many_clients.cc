// Section 10, many clients. 16 busy client processes, each in a loop for a fixed time, against
// the same 16 with many more connected client processes that do nothing (984; 184 with --quick),
// in alternating rounds in one daemon: the idle ones connect before their round and leave after
// it. Each busy process measures, in turn, put+get pairs of 1 KiB objects (the loop of section 4)
// and first gets of objects put before (each got, read and let go, 4,096 objects in a cycle, so
// each get is of an object this process does not hold), then deletes the objects of its pairs,
// 1,000 a request. Every daemon scan that walks all
// sessions costs the busy ones time here, once per request or per poll; the target: their rates
// within 10% of the run without the idle ones.
#include <fmt/format.h>

#include <vector>

#include "bench/sections.h"

namespace depot::bench {
namespace {

constexpr int kBusy = 16;
constexpr uint64_t kObjectSize = 1024;
constexpr size_t kCycle = 4096;

struct Rates {
  double pairs = 0;    // put+get pairs per second, all busy processes
  double gets = 0;     // first gets per second, all busy processes
  double deletes = 0;  // deletes per second (of the pairs' objects, 1,000 a request)
};

struct Counted {
  uint64_t n;
  double seconds;
};

// One busy process: pairs for `duration`, then first gets of `objects` for `duration`.
void Busy(const DepotDaemon& daemon, const std::vector<Guid>& objects, Channel& ch,
          double duration) {
  Client c = daemon.Connect("busy");
  std::vector<std::byte> value(kObjectSize, std::byte{7});
  for (const Guid& g : objects) KeepAlive(Check(c.Get(g), "warm-up get").size());  // maps them
  std::vector<Guid> made;
  made.reserve(1 << 20);
  ch.Signal();
  ch.Await();
  auto t0 = Clock::now();
  double t = 0;
  while ((t = Since(t0)) < duration) {
    made.push_back(Check(c.Put(value), "put"));
    KeepAlive(Check(c.Get(made.back()), "get").size());
  }
  ch.Send(Counted{made.size(), t});
  uint64_t gets = 0;
  t0 = Clock::now();
  for (size_t i = 0; (t = Since(t0)) < duration; ++i, ++gets) {
    Object o = Check(c.Get(objects[i % objects.size()]), "get");
    KeepAlive(ReadEveryByte(o.frame(0)));
  }
  ch.Send(Counted{gets, t});
  ch.Signal();  // the deletes start together too
  ch.Await();
  t0 = Clock::now();
  for (size_t i = 0; i < made.size(); i += 1000) {
    c.Delete(std::span(made).subspan(i, std::min<size_t>(1000, made.size() - i)));
  }
  ch.Send(Counted{made.size(), Since(t0)});
}

// A client process that connects on 'c', lets go on 'd' and exits on 'q'.
void Idle(const DepotDaemon& daemon, Channel& ch) {
  std::optional<Client> c;
  for (char cmd; (cmd = ch.Recv<char>()) != 'q';) {
    if (cmd == 'c') c.emplace(daemon.Connect("idle"));
    if (cmd == 'd') c.reset();
    ch.Signal();
  }
}

void Tell(std::vector<Child>& idle, char cmd) {
  for (auto& c : idle) c.channel().Send(cmd);
  for (auto& c : idle) c.channel().Await();
}

Rates Round(const DepotDaemon& daemon, const std::vector<Guid>& objects, double duration) {
  std::vector<Child> busy;
  for (int i = 0; i < kBusy; ++i) {
    busy.push_back(Child::Spawn([&](Channel& ch) { Busy(daemon, objects, ch, duration); }));
  }
  StartTogether(busy);
  Rates r;
  for (auto& c : busy) {
    auto pairs = c.channel().Recv<Counted>();
    r.pairs += static_cast<double>(pairs.n) / pairs.seconds;
  }
  for (auto& c : busy) {
    auto gets = c.channel().Recv<Counted>();
    r.gets += static_cast<double>(gets.n) / gets.seconds;
  }
  StartTogether(busy);
  for (auto& c : busy) {
    auto deletes = c.channel().Recv<Counted>();
    r.deletes += static_cast<double>(deletes.n) / deletes.seconds;
  }
  JoinAll(busy);
  return r;
}

std::string Range(const std::vector<double>& v) {
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return fmt::format("{} ({}–{})", PerSecond(Percentile(v, 0.5)), PerSecond(*lo), PerSecond(*hi));
}

}  // namespace

void ManyClients(const Context& ctx) {
  const int idle_count = ctx.quick ? 184 : 1000 - kBusy;
  const double duration = ctx.quick ? 1.0 : 2.0;
  const int rounds = ctx.quick ? 2 : 3;
  Say("\n## 10. Many clients: 16 busy processes among many idle ones\n");
  DepotDaemon daemon(ctx.dir, "many-clients", {.capacity = 1ull << 30, .spill_dir = {}});
  std::vector<Guid> objects;
  {
    Client putter = daemon.Connect("putter");
    std::vector<std::byte> value(kObjectSize, std::byte{9});
    for (size_t i = 0; i < kCycle; ++i) objects.push_back(Check(putter.Put(value), "put"));
    Check(putter.GetStatus(), "status");  // every put taken
  }
  Say(fmt::format(
      "depotd: {}, its defaults. {} busy client processes, each for {} s: put+get pairs of "
      "{} objects, then first gets of {} objects put before (each got, read and let go, in "
      "a cycle); alone, and with {} more client processes connected and idle, in alternating "
      "rounds ({} each; median and range of the rounds). No process is pinned.\n",
      daemon.Describe(), kBusy, duration, Bytes(kObjectSize), Grouped(kCycle), idle_count, rounds));
  std::vector<Child> idle;
  for (int i = 0; i < idle_count; ++i) {
    idle.push_back(Child::Spawn([&](Channel& ch) { Idle(daemon, ch); }));
  }
  std::vector<double> pairs[2], gets[2], deletes[2];  // [0]: alone; [1]: with the idle ones
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < 2; ++k) {
      int with_idle = (k + r) % 2;  // each takes each place in the order in turn
      fmt::print(stderr, "  many clients: round {}, {}\n", r + 1,
                 with_idle ? "with the idle ones" : "alone");
      if (with_idle) Tell(idle, 'c');
      Rates rates = Round(daemon, objects, duration);
      if (with_idle) Tell(idle, 'd');
      pairs[with_idle].push_back(rates.pairs);
      gets[with_idle].push_back(rates.gets);
      deletes[with_idle].push_back(rates.deletes);
    }
  }
  for (auto& c : idle) c.channel().Send('q');
  JoinAll(idle);
  Table t({"connected client processes", "put+get pairs/s", "first gets/s", "deletes/s",
           "pairs, gets, deletes: against alone", "within 10%"},
          "lrrrrl");
  t.Row(
      {fmt::format("{} busy", kBusy), Range(pairs[0]), Range(gets[0]), Range(deletes[0]), "", ""});
  auto against = [](const std::vector<double>* v) {
    return Percentile(v[1], 0.5) / Percentile(v[0], 0.5);
  };
  double pr = against(pairs), gr = against(gets), dr = against(deletes);
  std::string met = ctx.targets->Check(
      "busy clients' rates within 10% with ~1,000 connected",
      fmt::format("{} busy + {} idle client processes", kBusy, idle_count),
      fmt::format("pairs {}, gets {}, deletes {}", Ratio(pr), Ratio(gr), Ratio(dr)),
      pr >= 0.9 && gr >= 0.9 && dr >= 0.9);
  t.Row({fmt::format("{} busy + {} idle", kBusy, idle_count), Range(pairs[1]), Range(gets[1]),
         Range(deletes[1]), fmt::format("{}, {}, {}", Ratio(pr), Ratio(gr), Ratio(dr)), met});
  t.Print();
}

}  // namespace depot::bench
