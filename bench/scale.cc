// Section 7, scale: 1,000,000 objects of 64 B (100,000 with --quick), put through the inline
// create-and-seal path by 4 client processes (on CPU 1) into a fresh depotd on CPU 0. Reported:
// the put rate, depotd's memory per object (RssAnon, its own memory, from /proc/PID/status, once
// it stops changing after the puts, minus before, over the count; VmRSS also counts the pool pages
// it wrote the inline bytes into through its mapping, which are the objects' bytes, not the
// daemon's), the time to list every object through Client::List in pages of 1,000, and the time a
// status request takes with them all stored. For comparison, the same count of 64-byte values SET
// into an empty redis-server by 4 processes the same way: its rate, used_memory and VmRSS per key,
// and a SCAN of every key (COUNT 1000). Meanwhile a thread of this process times requests on
// connections of their own (a ping and a status in turn; Redis: PING): how long the server made
// them wait while it filled.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/redis.h"
#include "bench/sections.h"

namespace depot::bench {
namespace {

constexpr uint64_t kObjectSize = 64;
constexpr uint64_t kProcs = 4;

// Runs kProcs children on the last placement's CPU (the one depotd does not run on, where there
// are two) that share [0, count): each runs put(channel, first, n), which signals ready and waits
// for go before it puts; `before_go` runs once they are all made (a thread started before a fork
// could hold a lock the children need). Returns the time from go to the last one done.
double PutInParallel(uint64_t count, const std::function<void(Channel&, uint64_t, uint64_t)>& put,
                     const std::function<void()>& before_go) {
  std::vector<Child> children;
  for (uint64_t p = 0, first = 0; p < kProcs; ++p) {
    uint64_t n = count / kProcs + (p < count % kProcs ? 1 : 0);
    children.push_back(Child::Spawn([&, first, n](Channel& ch) {
      PinTo(Placements().back());
      put(ch, first, n);
      ch.Signal();
    }));
    first += n;
  }
  before_go();
  Clock::time_point go = StartTogether(children);
  for (auto& child : children) child.channel().Await();
  double t = Since(go);
  JoinAll(children);
  return t;
}

// Sends requests again and again from a thread of this process while the store fills, one after
// another in turn, timing each: how long the server makes a request wait while it takes a
// million objects (and moves its index to bigger ones on the way).
class Pinger {
 public:
  explicit Pinger(std::vector<std::function<void()>> requests)
      : times_(requests.size()), thread_([this, requests = std::move(requests)] {
          for (size_t n = 0; !stop_.load(std::memory_order_relaxed); ++n) {
            auto t0 = Clock::now();
            requests[n % requests.size()]();
            times_[n % requests.size()].push_back(Since(t0));
          }
        }) {}
  ~Pinger() {
    if (thread_.joinable()) Stop();
  }
  void Stop() {
    stop_ = true;
    thread_.join();
  }
  // "p50 / p99.9 / max (count)" of the requests timed of the kind `n` (their order given).
  std::string Waits(size_t n) const {
    return fmt::format("{} / {} / {} ({} requests)", Time(Percentile(times_[n], 0.5)),
                       Time(Percentile(times_[n], 0.999)), Time(Percentile(times_[n], 1.0)),
                       Grouped(times_[n].size()));
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::vector<double>> times_;
  std::thread thread_;  // last: it starts once the rest is made
};

}  // namespace

void Scale(const Context& ctx) {
  uint64_t count = ctx.quick ? 100'000 : 1'000'000;
  DepotDaemon daemon(ctx.dir, "scale", {.capacity = 512ull << 20});
  Unpin();
  Client c = daemon.Connect();
  std::vector<std::byte> value(kObjectSize, std::byte{5});
  Check(c.Delete(Check(c.Put(value), "put")), "delete");  // warm-up: one segment, one session
  uint64_t rss0 = ProcStatusBytes(daemon.pid(), "VmRSS"),
           anon0 = ProcStatusBytes(daemon.pid(), "RssAnon");

  fmt::print(stderr, "  scale: {} puts\n", Grouped(count));
  Client pinging = daemon.Connect("pinger");
  Client asking = daemon.Connect("status");
  std::optional<Pinger> pinger;
  double put_time = PutInParallel(
      count,
      [&](Channel& ch, uint64_t first, uint64_t n) {
        Client mine = daemon.Connect("scale");
        ch.Signal();
        ch.Await();
        for (uint64_t i = first; i < first + n; ++i) Check(mine.Put(value), "put");
      },
      [&] {
        pinger.emplace(std::vector<std::function<void()>>{
            [&] { Check(pinging.Ping(), "ping"); }, [&] { Check(asking.GetStatus(), "status"); }});
      });
  pinger->Stop();
  std::string waits = pinger->Waits(0), status_waits = pinger->Waits(1);

  StoreStatus st = Check(c.GetStatus(), "status");
  if (st.objects_sealed != count) {
    throw BenchError(fmt::format("depotd holds {} objects, not {}", st.objects_sealed, count));
  }
  // At rest: the index's last move to a bigger one may still be running its steps, with the
  // entry maps of both indexes held until it ends (about 7 B an object more for a second or two).
  uint64_t anon1 = ProcStatusBytes(daemon.pid(), "RssAnon");
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    uint64_t now = ProcStatusBytes(daemon.pid(), "RssAnon");
    if (now == anon1) break;
    anon1 = now;
  }
  uint64_t rss1 = ProcStatusBytes(daemon.pid(), "VmRSS");

  fmt::print(stderr, "  scale: listing\n");
  auto t0 = Clock::now();
  uint64_t listed = 0, pages = 0;
  std::optional<Guid> after;
  while (true) {
    ListPage page = Check(c.List(after, 1000), "list");
    listed += page.objects.size();
    ++pages;
    if (!page.more || page.objects.empty()) break;
    after = page.objects.back().guid;
  }
  double list_time = Since(t0);
  if (listed != count) throw BenchError(fmt::format("listed {} objects, not {}", listed, count));
  uint64_t rss_after_list = ProcStatusBytes(daemon.pid(), "VmRSS");

  // A status reports counts kept as objects change: its time must not grow with them. The
  // slowest of a few, so that one lucky request does not hide a walk.
  double status_time = 0;
  for (int i = 0; i < 5; ++i) {
    auto s0 = Clock::now();
    Check(c.GetStatus(), "status");
    status_time = std::max(status_time, Since(s0));
  }

  fmt::print(stderr, "  scale: redis\n");
  Redis redis = Redis::Connect(ctx.redis->socket());
  redis.FlushAll();
  uint64_t r_used0 = std::stoull(redis.Info("used_memory"));
  uint64_t r_rss0 = ProcStatusBytes(ctx.redis->pid(), "VmRSS");
  Redis r_pinging = Redis::Connect(ctx.redis->socket());
  double r_put = PutInParallel(
      count,
      [&](Channel& ch, uint64_t first, uint64_t n) {
        Redis mine = Redis::Connect(ctx.redis->socket());
        ch.Signal();
        ch.Await();
        for (uint64_t i = first; i < first + n; ++i) mine.Set(fmt::format("key:{}", i), value);
      },
      [&] {
        pinger.emplace(std::vector<std::function<void()>>{[&] { r_pinging.Command({"PING"}); }});
      });
  pinger->Stop();
  std::string r_waits = pinger->Waits(0);
  uint64_t r_used1 = std::stoull(redis.Info("used_memory"));
  uint64_t r_rss1 = ProcStatusBytes(ctx.redis->pid(), "VmRSS");
  auto s0 = Clock::now();
  uint64_t scanned = redis.ScanAll(1000);
  double r_scan = Since(s0);
  redis.FlushAll();

  auto per = [&](uint64_t a, uint64_t b) {
    return fmt::format(
        "{:.0f} B", (static_cast<double>(b) - static_cast<double>(a)) / static_cast<double>(count));
  };
  double per_object =
      (static_cast<double>(anon1) - static_cast<double>(anon0)) / static_cast<double>(count);
  double redis_per_key =
      (static_cast<double>(r_used1) - static_cast<double>(r_used0)) / static_cast<double>(count);
  std::string met = ctx.targets->Check(
      "≤ 128 bytes of daemon memory per object, below Redis's used_memory per key",
      fmt::format("{} objects of 64 B", Grouped(count)),
      fmt::format("{:.0f} B (RssAnon growth / count; Redis {:.0f} B)", per_object, redis_per_key),
      per_object <= 128 && per_object < redis_per_key);
  std::string list_met =
      ctx.targets->Check("listing every object and a status each under a second",
                         fmt::format("{} objects of 64 B", Grouped(count)),
                         fmt::format("list {}, status {}", Time(list_time), Time(status_time)),
                         list_time < 1.0 && status_time < 1.0);
  Say(fmt::format(
      "\n## 7. Scale: {} objects of {} B\n\n"
      "depotd ({}) on CPU {}; {} client processes on CPU {} put {} objects each "
      "through the inline path. Redis: the same count of {}-byte values SET by {} processes "
      "the same way (one round trip each).",
      Grouped(count), kObjectSize, daemon.Describe(), kServerCpu, kProcs, Placements().back(),
      Grouped(count / kProcs), kObjectSize, kProcs));
  Table t({"figure", "depot", "Redis", "target"}, "lrrl");
  t.Row({"put rate", fmt::format("{} ({} processes)", PerSecond(double(count) / put_time), kProcs),
         fmt::format("{} ({} processes)", PerSecond(double(count) / r_put), kProcs), ""});
  t.Row({"a ping from another connection while they are put (Redis: PING): p50 / p99.9 / max",
         waits, r_waits, ""});
  t.Row(
      {"a status from a third connection, in turn with the pings (it takes every put that "
       "returned first)",
       status_waits, "", ""});
  t.Row({"server's own memory per object: RssAnon growth (depotd), used_memory growth (Redis)",
         per(anon0, anon1), per(r_used0, r_used1), "≤ 128 B, < Redis: " + met});
  t.Row({"VmRSS growth / count (depotd: with the 64 B object bytes it wrote into the pool)",
         per(rss0, rss1), per(r_rss0, r_rss1), ""});
  t.Row({"server VmRSS before → after", fmt::format("{} → {}", Bytes(rss0), Bytes(rss1)),
         fmt::format("{} → {}", Bytes(r_rss0), Bytes(r_rss1)), ""});
  t.Row({"list every object",
         fmt::format("{} ({} pages of 1,000; {} a page)", Time(list_time), Grouped(pages),
                     Time(list_time / double(pages))),
         fmt::format("{} (SCAN COUNT 1000, {} keys)", Time(r_scan), Grouped(scanned)),
         "< 1 s: " + list_met});
  t.Row({"status (the slowest of 5)", Time(status_time), "", "< 1 s"});
  t.Row({"depotd VmRSS after listing", Bytes(rss_after_list), "", ""});
  t.Print();
}

}  // namespace depot::bench
