// put_get_bench: put and get times for objects of 1 KiB to 1 GiB against their physical limits,
// measured in the same run: memcpy of the same bytes for a put, and a bare Unix-socket round trip
// between two processes for a get. Starts its own depotd (prefaulted pool) on a temporary socket.
// scripts/bench prints it as an appendix (docs/performance.md); depot_bench makes the wider
// comparison.
//
// Where the scheduler places the two ends of a round trip decides its cost on a VM (waking a
// sleeping vCPU costs far more than a switch on the same one), so the daemon and the echo peer
// are pinned to CPU 0 and every figure is taken twice: with this process on CPU 0 too, and on
// CPU 1.
//
//   put_get_bench [--quick]      --quick skips 1 GiB and repeats less
#include <fmt/format.h>

#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "bench/harness.h"
#include "bench/servers.h"
#include "depot/client.h"
#include "depot/units.h"

namespace depot::bench {
namespace {

// Round trip of a 16-byte message between this process and the peer on CPU 0: the floor under
// any request/response between two processes placed so.
Summary SocketRoundTrip(SocketPeer& peer, int reps) {
  std::array<std::byte, 16> buf{};
  Series t;
  for (int i = 0; i < reps + 100; ++i) {
    auto t0 = Clock::now();
    peer.Fetch(buf);
    if (i >= 100) t.Add(Since(t0));
  }
  return t.Summarize();
}

// Prints one table row for objects of `size`.
void Measure(Client& c, uint64_t size, int reps, const Summary& rtt) {
  std::vector<std::byte> src(size), dst(size);
  std::memset(src.data(), 0x3c, size);
  std::memset(dst.data(), 0, size);  // touched: memcpy is timed into resident pages

  // Alternate memcpy and put so that both see the same machine state; discard a warm-up round.
  Series put_t, copy_t;
  for (int i = 0; i <= reps; ++i) {
    auto t0 = Clock::now();
    std::memcpy(dst.data(), src.data(), size);
    auto t1 = Clock::now();
    Guid id = Check(c.Put(src), fmt::format("put of {}", size));
    auto t2 = Clock::now();
    Check(c.Delete(id), "delete");
    if (i == 0) continue;
    copy_t.Add(Seconds(t1 - t0));
    put_t.Add(Seconds(t2 - t1));
  }
  Guid id = Check(c.Put(src), "put");
  Series get_t;
  for (int i = 0; i <= std::max(reps, 200); ++i) {
    auto t0 = Clock::now();
    Object obj = Check(c.Get(id), "get");
    auto t1 = Clock::now();
    if (obj.size() != size) throw BenchError("get returned the wrong size");
    if (i > 0) get_t.Add(Seconds(t1 - t0));
  }
  Check(c.Delete(id), "delete");

  Summary put = put_t.Summarize(), copy = copy_t.Summarize(), get = get_t.Summarize();
  double gbs_put = static_cast<double>(size) / put.p50 / 1e9;
  double gbs_copy = static_cast<double>(size) / copy.p50 / 1e9;
  double ratio = 100.0 * gbs_put / gbs_copy;
  Say(fmt::format("| {} | {} | {:.2f} | {} | {:.2f} | {:.{}f}% | {} ({}–{}) | {:.2f}× |",
                  FormatBytes(size), Time(put.p50), gbs_put, Time(copy.p50), gbs_copy, ratio,
                  ratio < 10 ? 1 : 0, Time(get.p50), Time(get.min), Time(get.max),
                  get.p50 / rtt.p50));
}

int Run(bool quick) {
  std::vector<std::pair<uint64_t, int>> cases = {
      {1 << 10, quick ? 300 : 2000}, {1 << 20, quick ? 50 : 300}, {64 << 20, quick ? 5 : 30}};
  if (!quick) cases.push_back({1ull << 30, 7});
  uint64_t largest = cases.back().first;

  TempDir dir;
  DepotDaemon daemon(dir.path(), "depot", {.capacity = largest + (256ull << 20), .prefault = true});
  Client c = daemon.Connect("bench");
  SocketPeer peer(16);

  Say(
      fmt::format("depot put/get: {} CPUs, prefaulted pool, depotd on CPU 0. Each put is followed "
                  "by a delete (not timed); each get drops the previous Object, so every get is a "
                  "round trip.",
                  Cpus()));
  for (int cpu : Placements()) {
    PinTo(cpu);
    Summary rtt = SocketRoundTrip(peer, quick ? 2000 : 20000);
    Say(fmt::format(
        "\n### this process on CPU {} ({}): bare socket round trip median {} (min {})\n", cpu,
        cpu == kServerCpu ? "the daemon's CPU" : "another CPU", Time(rtt.p50), Time(rtt.min)));
    Say("| size | put median | put GB/s | memcpy median | memcpy GB/s | put / memcpy "
        "| get median (min–max) | get / socket RTT |");
    Say("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (auto [size, reps] : cases) Measure(c, size, reps, rtt);
  }
  return 0;
}

}  // namespace
}  // namespace depot::bench

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  try {
    return depot::bench::Run(quick);
  } catch (const std::exception& e) {
    fmt::print(stderr, "put_get_bench: {}\n", e.what());
    return 1;
  }
}
