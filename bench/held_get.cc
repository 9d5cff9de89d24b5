// Section 2, repeated get of an object this process already holds: the client library answers
// it from its own table of held objects (a lock, a hash lookup, a shared-pointer copy), without a
// round trip. Measured as the mean over a batch of gets of one held 4 KiB object (the result
// dropped each time), in several rounds; the figure is the median batch mean.
#include <fmt/format.h>

#include <vector>

#include "bench/sections.h"

namespace depot::bench {

void HeldGet(const Context& ctx) {
  int rounds = ctx.quick ? 5 : 15;
  int per_round = ctx.quick ? 200'000 : 1'000'000;
  DepotDaemon daemon(ctx.dir, "held", {.capacity = 64ull << 20});
  int cpu = Placements().back();
  PinTo(cpu);
  Client client = daemon.Connect();
  std::vector<std::byte> value(4096, std::byte{1});
  Guid id = Check(client.Put(value), "put");
  Object held = Check(client.Get(id), "get");

  Series per_get;
  for (int r = 0; r <= rounds; ++r) {  // round 0 warms up
    auto t0 = Clock::now();
    for (int i = 0; i < per_round; ++i) {
      Result<Object> again = client.Get(id);
      KeepAlive(again.ok());
    }
    double t = Since(t0) / per_round;
    if (r == 0) continue;
    per_get.NextRound();
    per_get.Add(t);
  }
  Summary s = per_get.Summarize();
  Say(
      fmt::format("\n## 2. Repeated get of a held object\n\n"
                  "{} rounds of {} gets of one 4 KiB object this process holds (this process on "
                  "CPU {}); per get, mean over a round.",
                  rounds, Grouped(per_round), cpu));
  Table t({"figure", "median of rounds", "rounds' range", "target < 200 ns"}, "lrrl");
  std::string met = ctx.targets->Check("repeated get of a held object < 200 ns", "4 KiB object",
                                       Time(s.p50), s.p50 < 200e-9);
  t.Row({"get of a held object", Time(s.p50), Spread(s), met});
  t.Print();
  Unpin();
}

}  // namespace depot::bench
