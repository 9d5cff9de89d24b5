// Section 3, put bandwidth for 64 KiB to 1 GiB: how fast a producer gets its bytes into the store,
// against the limit (one memcpy of the same bytes into resident memory, single thread) and Redis
// SET, measured in alternating rounds in one run:
//   Put             Client::Put: up to 4 MiB, a copy into the connection's lease and one message
//                   with no reply (a new lease, one round trip, every 16 puts or so); larger,
//                   create (a round trip), copy into the mapped frame, seal.
//   Create + write  Client::Create, the same memcpy into the draft's frame, Draft::Seal: what a
//                   producer that writes in place does (for objects over 64 KiB, Put does the
//                   same calls).
//   Redis SET       hiredis over the Unix socket (it formats the command, copying the value).
//   create + seal   the same without the copy: the round trips a put adds to its memcpy.
//   memcpy after a round trip  the memcpy, timed right after an untimed ping: as each Put is timed
//                   right after the untimed delete of the one before. On a VM a round trip leaves
//                   the caches and TLB colder than a loop of memcpys does, which shows most at
//                   64 KiB (a copy of a microsecond): this column tells that apart from the put's
//                   own cost.
// Both depot paths are measured against two daemons: one with a prefaulted pool (--prefault), one
// with the defaults, which makes 64 MiB segments on demand (an object larger than that goes to a
// segment made to its size) and keeps empty ones warm for the next objects. With
// --previous-depotd, Put is measured a third time, against that daemon with the defaults: the
// figures before a change, beside those after it. Each put is followed by an untimed delete.
// Servers on CPU 0; this process on each placement in turn.
#include <fmt/format.h>

#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "bench/copy_after_syscall.h"
#include "bench/redis.h"
#include "bench/sections.h"

namespace depot::bench {
namespace {

enum Method {
  kMemcpy,
  kPut,
  kCreate,
  kBare,
  kPutDemand,
  kCreateDemand,
  kRedis,
  kPutPrevious,
  kMemcpyAfterTrip,
  kMethods
};

struct Plan {
  uint64_t size;
  int per_round;
};

// With `write` false, only the create and seal round trips: what a put costs beyond its copy.
Guid CreateAndWrite(Client& c, std::span<const std::byte> src, bool write = true) {
  Draft d = Check(c.Create({src.size()}), "create");
  if (write) std::memcpy(d.frame(0).data(), src.data(), src.size());
  Check(d.Seal(), "seal");
  return d.guid();
}

// What a system call costs the copy after it on this host (CopyAfterSyscall), on the last CPU
// placed: each Put above comes right after a round trip, and its copy is one of these.
void HostCopies(int samples) {
  constexpr size_t kBytes = 64 << 10;
  CopyCosts c = CopyAfterSyscall(kBytes, samples);
  Say(fmt::format(
      "\n### The host: a copy right after a system call\n\nA memcpy of {} in a loop of memcpys, "
      "and right after getppid(), alternating, {} samples each, p50, on the last CPU above; the "
      "kernel: {}. Each Put above comes right "
      "after a round trip, which also sleeps and wakes: \"memcpy after a round trip\" is its "
      "copy's own figure. On 2 MiB pages the copy touches two pages, on 4 KiB pages 32{}.",
      Bytes(kBytes), samples, KernelEntry(),
      c.huge ? "" : " (the kernel gave none here: that row is on small pages too)"));
  Table t(
      {"source and destination on", "memcpy in a loop", "right after getppid()", "after / loop"},
      "lrrr");
  t.Row({"4 KiB pages", Time(c.loop_small), Time(c.after_small),
         fmt::format("{:.2f}×", c.after_small / c.loop_small)});
  t.Row({"2 MiB pages", Time(c.loop_huge), Time(c.after_huge),
         fmt::format("{:.2f}×", c.after_huge / c.loop_huge)});
  t.Print();
}

}  // namespace

void PutThroughput(const Context& ctx) {
  std::vector<Plan> plans = {{64 << 10, ctx.quick ? 100 : 400},
                             {1 << 20, ctx.quick ? 30 : 100},
                             {4 << 20, ctx.quick ? 10 : 30},
                             {64 << 20, ctx.quick ? 3 : 4}};
  if (!ctx.quick) plans.push_back({1ull << 30, 1});
  int rounds = ctx.quick ? 3 : 5;
  uint64_t capacity = plans.back().size + (256ull << 20);
  DepotDaemon prefaulted(ctx.dir, "put-prefault", {.capacity = capacity, .prefault = true});
  DepotDaemon on_demand(ctx.dir, "put-demand", {.capacity = capacity});
  const bool previous = !ctx.previous_depotd.empty();
  std::unique_ptr<DepotDaemon> before;
  if (previous) {
    before = std::make_unique<DepotDaemon>(
        ctx.dir, "put-previous", DaemonConfig{.capacity = capacity, .binary = ctx.previous_depotd});
  }
  Say(fmt::format(
      "\n## 3. Put bandwidth\n\n"
      "Two depotd: a {} and a {}, with redis-server, all on CPU {}. {} rounds; in each, every "
      "method runs its samples in turn. GB/s = 10^9 bytes/s of object size over the median time. "
      "memcpy copies the same source into a resident buffer (single thread): the limit. Put is "
      "Client::Put: up to 4 MiB a copy into the connection's lease (into the block its last "
      "deleted object left, when it was of about that size) and a record in its put ring, with "
      "no message while the daemon polls the rings; larger, a create, the copy and a seal. Create "
      "+ write times create, the copy and seal; \"create + seal, no copy\" is the same without "
      "the copy (prefaulted pool). Each is followed by an untimed delete, Redis SET by an untimed "
      "DEL. \"memcpy after a round trip\" is the memcpy timed right after an untimed ping, as each "
      "Put comes right after the untimed delete of the one before.{}",
      prefaulted.Describe(), on_demand.Describe(), kServerCpu, rounds,
      previous ? fmt::format(" \"Previous\" is Put against a third depotd, {}: the figures before "
                             "this tree's changes, measured in the same rounds.",
                             before->Describe())
               : ""));
  Redis redis = Redis::Connect(ctx.redis->socket());
  redis.FlushAll();
  Targets& targets = *ctx.targets;
  for (int cpu : Placements()) {
    PinTo(cpu);
    Client fast = prefaulted.Connect(), slow = on_demand.Connect();
    std::optional<Client> old;
    if (previous) old = before->Connect();
    std::vector<std::string> columns = {"size",
                                        "memcpy p50 (GB/s)",
                                        "Put p50 (rounds)",
                                        "Put GB/s",
                                        "Put / memcpy",
                                        "≥ 80% memcpy",
                                        "memcpy after a round trip",
                                        "Put / that",
                                        "Create + write p50",
                                        "C+W / memcpy",
                                        "create + seal, no copy",
                                        "on-demand pool: Put p50",
                                        "/ memcpy",
                                        "/ prefaulted Put",
                                        "on-demand: C+W p50",
                                        "Redis SET p50 (GB/s)",
                                        "Redis / Put"};
    std::string align = "lrrrrlrrrrrrrrrrr";
    if (previous) {
      columns.insert(columns.end(), {"previous, on-demand: Put p50", "/ memcpy"});
      align += "rr";
    }
    Table t(columns, align);
    for (const Plan& p : plans) {
      fmt::print(stderr, "  put: {}, {}\n", Bytes(p.size), PlacementName(cpu));
      std::vector<std::byte> src(p.size, std::byte{0x3c}), dst(p.size, std::byte{0});
      std::array<Series, kMethods> series;
      auto once = [&](Method m) -> double {
        auto t0 = Clock::now();
        Guid id;
        Client* c = nullptr;
        switch (m) {
          case kMemcpy:
            std::memcpy(dst.data(), src.data(), p.size);
            KeepAlive(dst[p.size / 2]);
            return Since(t0);
          case kMemcpyAfterTrip: {
            Check(fast.Ping(), "ping");  // untimed, as the delete before each Put
            auto t1 = Clock::now();
            std::memcpy(dst.data(), src.data(), p.size);
            KeepAlive(dst[p.size / 2]);
            return Since(t1);
          }
          case kPut:
          case kPutDemand:
            c = m == kPut ? &fast : &slow;
            id = Check(c->Put(src), "put");
            break;
          case kCreate:
          case kCreateDemand:
            c = m == kCreate ? &fast : &slow;
            id = CreateAndWrite(*c, src);
            break;
          case kBare:
            c = &fast;
            id = CreateAndWrite(*c, src, false);
            break;
          case kPutPrevious:
            if (!previous) return 0;
            c = &*old;
            id = Check(c->Put(src), "put");
            break;
          case kRedis: {
            redis.Set("value", src);
            double t = Since(t0);
            redis.Del("value");
            return t;
          }
          default:
            return 0;
        }
        double t = Since(t0);
        Check(c->Delete(id), "delete");
        return t;
      };
      for (int m = 0; m < kMethods; ++m) once(static_cast<Method>(m));  // warm-up
      for (int r = 0; r < rounds; ++r) {
        for (int k = 0; k < kMethods; ++k) {
          int m = (k + r) % kMethods;  // each method takes each place in the order in turn
          series[m].NextRound();
          for (int i = 0; i < p.per_round; ++i) series[m].Add(once(static_cast<Method>(m)));
        }
      }
      std::array<Summary, kMethods> s;
      for (int m = 0; m < kMethods; ++m) s[m] = series[m].Summarize();
      double size = static_cast<double>(p.size);
      auto gbs = [&](Method m) { return Rate(size / s[m].p50); };
      auto pct = [&](Method m) { return fmt::format("{:.0f}%", 100 * s[kMemcpy].p50 / s[m].p50); };
      double ratio = s[kMemcpy].p50 / s[kPut].p50;
      Plot("put-bandwidth", PlacementName(cpu), "depot Put", size, size / s[kPut].p50);
      Plot("put-bandwidth", PlacementName(cpu), "memcpy", size, size / s[kMemcpy].p50);
      Plot("put-bandwidth", PlacementName(cpu), "Redis SET", size, size / s[kRedis].p50);
      std::string met = targets.Check(
          "Put ≥ 80% of memcpy bandwidth (prefaulted pool)",
          fmt::format("{}, {}", Bytes(p.size), PlacementName(cpu)),
          fmt::format("{:.0f}% ({} vs {})", 100 * ratio, gbs(kPut), gbs(kMemcpy)), ratio >= 0.8);
      double demand = s[kPutDemand].p50 / s[kPut].p50;
      targets.Check("On-demand pool's Put within 10% of the prefaulted pool's (≥ 1 MiB)",
                    fmt::format("{}, {}", Bytes(p.size), PlacementName(cpu)),
                    fmt::format("{:.2f}× its time ({} vs {})", demand, Time(s[kPutDemand].p50),
                                Time(s[kPut].p50)),
                    demand <= 1.1);
      if (p.size >= (1ull << 30)) {
        double share = s[kMemcpy].p50 / s[kPutDemand].p50;
        targets.Check("On-demand pool's Put ≥ 80% of memcpy (repeated 1 GiB puts)",
                      PlacementName(cpu), fmt::format("{:.0f}%", 100 * share), share >= 0.8);
      }
      std::vector<std::string> row = {
          Bytes(p.size),
          fmt::format("{} ({})", Time(s[kMemcpy].p50), gbs(kMemcpy)),
          P50WithSpread(s[kPut]),
          gbs(kPut),
          pct(kPut),
          met,
          Time(s[kMemcpyAfterTrip].p50),
          fmt::format("{:.0f}%", 100 * s[kMemcpyAfterTrip].p50 / s[kPut].p50),
          Time(s[kCreate].p50),
          pct(kCreate),
          Time(s[kBare].p50),
          P50WithSpread(s[kPutDemand]),
          pct(kPutDemand),
          fmt::format("{:.2f}×", demand),
          Time(s[kCreateDemand].p50),
          fmt::format("{} ({})", Time(s[kRedis].p50), gbs(kRedis)),
          Ratio(s[kRedis].p50 / s[kPut].p50)};
      if (previous) {
        row.insert(row.end(), {P50WithSpread(s[kPutPrevious]), pct(kPutPrevious)});
      }
      t.Row(row);
    }
    Say(fmt::format("\n### {}", PlacementName(cpu)));
    t.Print();
  }
  HostCopies(ctx.quick ? 2000 : 10000);
  Unpin();
}

}  // namespace depot::bench
