// Section 6, the allocator under a random workload: depotd (2 GiB; 1 GiB with --quick) is driven
// by one client (on CPU 1, depotd on CPU 0) with objects of random sizes, log-uniform between 1 KiB
// and 256 MiB (fixed seed), keeping the pool near 90% full: before each create, with probability
// 0.3 a random live object is deleted, and random live objects are deleted until the new one fits
// under 90% of the capacity. Objects are created (Client::Create, timed: the round trip, the
// allocation, the client mapping the frame) and sealed (untimed); no bytes are written. After every
// create, StoreStatus gives fragmentation() (1 − largest free block / free bytes, inside the
// segments that exist) and largest_free (the largest object that still fits). Run twice, the same
// sequence: on a prefaulted pool (one allocator over one segment) and on 64 MiB segments made on
// demand (objects over 64 MiB get a segment of their own).
#include <fmt/format.h>

#include <cmath>
#include <random>
#include <vector>

#include "bench/sections.h"

namespace depot::bench {
namespace {

constexpr uint64_t kSeed = 20240611;
constexpr uint64_t kMinSize = 1ull << 10, kMaxSize = 256ull << 20;

struct Outcome {
  std::string pool;
  int creates = 0, deletes = 0, full = 0, full_but_room = 0;
  Series all, small, medium, large;  // create time: < 1 MiB, 1–64 MiB, > 64 MiB
  std::vector<double> frag;          // after each create once the pool first reached 85%
  std::vector<uint64_t> largest;
  StoreStatus end;
};

Outcome Run(const Context& ctx, const std::string& name, DaemonConfig config, int creates) {
  DepotDaemon daemon(ctx.dir, name, config);
  Client c = daemon.Connect();
  Outcome out;
  out.pool = daemon.Describe();
  std::mt19937_64 rng(kSeed);
  std::uniform_real_distribution<double> log_size(std::log(double(kMinSize)),
                                                  std::log(double(kMaxSize)));
  std::uniform_real_distribution<double> coin(0, 1);
  struct Live {
    Guid id;
    uint64_t size;
  };
  std::vector<Live> live;
  uint64_t live_bytes = 0, target = config.capacity / 10 * 9;
  auto delete_random = [&] {
    size_t i = std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng);
    Check(c.Delete(live[i].id), "delete");
    live_bytes -= live[i].size;
    live[i] = live.back();
    live.pop_back();
    ++out.deletes;
  };
  bool steady = false;
  for (Series* s : {&out.all, &out.small, &out.medium, &out.large}) s->NextRound();
  for (int op = 0; op < creates; ++op) {
    if (!live.empty() && coin(rng) < 0.3) delete_random();
    uint64_t size = static_cast<uint64_t>(std::exp(log_size(rng)));
    while (!live.empty() && live_bytes + size > target) delete_random();
    auto t0 = Clock::now();
    Result<Draft> d = c.Create({size});
    double t = Since(t0);
    StoreStatus st = Check(c.GetStatus(), "status");
    if (!d.ok()) {
      if (!d.status().IsStoreFull()) Check(d.status(), "create");
      ++out.full;
      if (st.capacity - st.used >= size) ++out.full_but_room;
      continue;
    }
    Check(d->Seal(), "seal");
    live.push_back({d->guid(), size});
    live_bytes += size;
    ++out.creates;
    out.all.Add(t);
    (size < (1u << 20) ? out.small : size <= (64u << 20) ? out.medium : out.large).Add(t);
    steady = steady || st.used >= config.capacity / 100 * 85;
    if (steady) {
      out.frag.push_back(st.fragmentation());
      out.largest.push_back(st.largest_free);
    }
  }
  out.end = Check(c.GetStatus(), "status");
  return out;
}

std::string P50P99(const Series& s) {
  if (s.empty()) return "—";
  Summary m = s.Summarize();
  return fmt::format("{} / {} (n={})", Time(m.p50), Time(m.p99), m.n);
}

}  // namespace

void AllocatorWorkload(const Context& ctx) {
  uint64_t capacity = ctx.quick ? 1ull << 30 : 2ull << 30;
  int creates = ctx.quick ? 300 : 2000;
  Say(fmt::format(
      "\n## 6. Allocator under a random workload\n\n"
      "{} creates of log-uniform sizes ({}–{}, seed {}), the pool kept near 90% "
      "full by random deletes; one client on CPU {}, depotd on CPU {}. A create's time is what "
      "it costs the caller: the round trip and the allocation, the client filling its "
      "page tables for parts of the pool it has not written before "
      "(MADV_POPULATE_WRITE), and on demand the daemon reserving a new segment "
      "(posix_fallocate).",
      creates, Bytes(kMinSize), Bytes(kMaxSize), kSeed, Placements().back(), kServerCpu));
  PinTo(Placements().back());
  std::vector<Outcome> runs;
  fmt::print(stderr, "  allocator: prefaulted pool\n");
  runs.push_back(Run(ctx, "alloc-prefault", {.capacity = capacity, .prefault = true}, creates));
  fmt::print(stderr, "  allocator: on-demand segments\n");
  runs.push_back(Run(ctx, "alloc-demand", {.capacity = capacity}, creates));

  Table times(
      {"pool", "creates (deletes)", "create p50 / p99: all", "< 1 MiB", "1–64 MiB", "> 64 MiB"},
      "lrrrrr");
  Table frag(
      {"pool", "StoreFull (with enough free bytes)", "fragmentation once 85% full: mean / max",
       "at end", "largest object that fits: min once 85% full / at end", "free at end"},
      "lrrrrr");
  for (const Outcome& o : runs) {
    times.Row({o.pool, fmt::format("{} ({})", o.creates, o.deletes), P50P99(o.all), P50P99(o.small),
               P50P99(o.medium), P50P99(o.large)});
    double mean = 0, max = 0;
    for (double f : o.frag) {
      mean += f / static_cast<double>(o.frag.size());
      max = std::max(max, f);
    }
    uint64_t min_largest =
        o.largest.empty() ? 0 : *std::min_element(o.largest.begin(), o.largest.end());
    frag.Row(
        {o.pool, fmt::format("{} ({})", o.full, o.full_but_room),
         o.frag.empty() ? "—" : fmt::format("{:.3f} / {:.3f} (n={})", mean, max, o.frag.size()),
         fmt::format("{:.3f}", o.end.fragmentation()),
         fmt::format("{} / {}", Bytes(min_largest), Bytes(o.end.largest_free)),
         Bytes(o.end.capacity - o.end.used)});
  }
  Unpin();
  times.Print();
  frag.Print();
  Say("\nA create that found no block although the pool had enough free bytes in all is counted "
      "in brackets under StoreFull: those failures are the fragmentation a user meets.");
}

}  // namespace depot::bench
