// put_get_bench: put and get times for objects of 1 KiB to 1 GiB against their physical limits,
// measured in the same run: memcpy of the same bytes for a put, and a bare Unix-socket round trip
// between two processes for a get. Starts its own depotd (prefaulted pool) on a temporary socket.
//
// Where the scheduler places the two ends of a round trip decides its cost on a VM (waking a
// sleeping vCPU costs far more than a switch on the same one), so the daemon and the echo peer
// are pinned to CPU 0 and every figure is taken twice: with this process on CPU 0 too, and on
// CPU 1.
//
//   put_get_bench [--quick]      --quick skips 1 GiB and repeats less
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/units.h"
#include "depot/client.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Stats {
  double median, min, max;
};

Stats Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

std::string Time(double s) {
  if (s < 1e-6) return fmt::format("{:.0f} ns", s * 1e9);
  if (s < 1e-3) return fmt::format("{:.1f} µs", s * 1e6);
  if (s < 1) return fmt::format("{:.2f} ms", s * 1e3);
  return fmt::format("{:.2f} s", s);
}

void PinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  ::sched_setaffinity(0, sizeof set, &set);
}

// Round trip of a 16-byte message between this process and a child on CPU 0 over a socketpair:
// the floor under any request/response between two processes placed so.
Stats SocketRoundTrip(int reps) {
  int sv[2];
  ::socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
  pid_t pid = ::fork();
  if (pid == 0) {
    PinTo(0);
    ::close(sv[0]);
    char buf[16];
    while (::read(sv[1], buf, sizeof buf) == sizeof buf) {
      if (::write(sv[1], buf, sizeof buf) != sizeof buf) break;
    }
    std::_Exit(0);
  }
  ::close(sv[1]);
  char buf[16] = {};
  std::vector<double> t;
  for (int i = 0; i < reps + 100; ++i) {
    auto t0 = Clock::now();
    if (::write(sv[0], buf, sizeof buf) != sizeof buf || ::read(sv[0], buf, sizeof buf) != sizeof buf) break;
    if (i >= 100) t.push_back(Seconds(Clock::now() - t0));
  }
  ::close(sv[0]);
  ::waitpid(pid, nullptr, 0);
  return Summarize(t);
}

pid_t StartDaemon(const std::string& socket, uint64_t capacity) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    PinTo(0);
    std::string cap = std::to_string(capacity);
    execl(DEPOTD_PATH, DEPOTD_PATH, "--socket", socket.c_str(), "--capacity", cap.c_str(),
          "--prefault", "--log-level", "warn", static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  return pid;
}


// Prints one table row for objects of `size`; false when a request fails.
bool Measure(depot::Client& c, uint64_t size, int reps, Stats rtt) {
  std::vector<std::byte> src(size), dst(size);
  std::memset(src.data(), 0x3c, size);
  std::memset(dst.data(), 0, size);  // touched: memcpy is timed into resident pages

  // Alternate memcpy and put so that both see the same machine state; discard a warm-up round.
  std::vector<double> put_t, copy_t;
  for (int i = 0; i <= reps; ++i) {
    auto t0 = Clock::now();
    std::memcpy(dst.data(), src.data(), size);
    auto t1 = Clock::now();
    auto id = c.Put(src);
    auto t2 = Clock::now();
    if (!id.ok()) {
      fmt::print(stderr, "put of {} failed: {}\n", size, id.status().ToString());
      return false;
    }
    c.Delete(*id);
    if (i == 0) continue;
    copy_t.push_back(Seconds(t1 - t0));
    put_t.push_back(Seconds(t2 - t1));
  }
  auto id = c.Put(src);
  if (!id.ok()) return false;
  std::vector<double> get_t;
  for (int i = 0; i <= std::max(reps, 200); ++i) {
    auto t0 = Clock::now();
    auto obj = c.Get(*id);
    auto t1 = Clock::now();
    if (!obj.ok() || obj->size() != size) return false;
    if (i > 0) get_t.push_back(Seconds(t1 - t0));
  }
  c.Delete(*id);

  Stats put = Summarize(put_t), copy = Summarize(copy_t), get = Summarize(get_t);
  double gbs_put = static_cast<double>(size) / put.median / 1e9;
  double gbs_copy = static_cast<double>(size) / copy.median / 1e9;
  double ratio = 100.0 * gbs_put / gbs_copy;
  fmt::print("| {} | {} | {:.2f} | {} | {:.2f} | {:.{}f}% | {} ({}–{}) | {:.2f}× |\n",
             depot::FormatBytes(size), Time(put.median), gbs_put, Time(copy.median), gbs_copy,
             ratio, ratio < 10 ? 1 : 0, Time(get.median), Time(get.min), Time(get.max),
             get.median / rtt.median);
  std::fflush(stdout);
  return true;
}
}  // namespace

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  std::vector<std::pair<uint64_t, int>> cases = {{1 << 10, quick ? 300 : 2000},
                                                 {1 << 20, quick ? 50 : 300},
                                                 {64 << 20, quick ? 5 : 30}};
  if (!quick) cases.push_back({1ull << 30, 7});
  uint64_t largest = cases.back().first;

  char tmpl[] = "/tmp/depot-bench-XXXXXX";
  std::string socket = std::string(::mkdtemp(tmpl)) + "/depot.sock";
  pid_t daemon = StartDaemon(socket, largest + (256ull << 20));
  depot::Result<depot::Client> client = depot::Status::Unavailable("not started");
  for (int i = 0; i < 2000 && !client.ok(); ++i) {
    client = depot::Client::Connect({socket, "bench"});
    if (!client.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!client.ok()) {
    fmt::print(stderr, "cannot reach depotd: {}\n", client.status().ToString());
    return 1;
  }
  depot::Client& c = *client;

  int cpus = static_cast<int>(std::thread::hardware_concurrency());
  fmt::print("depot put/get: {} CPUs, prefaulted pool, depotd on CPU 0. Each put is followed by a "
             "delete (not timed); each get drops the previous Object, so every get is a round "
             "trip.\n",
             cpus);
  for (int cpu : {0, 1}) {
    if (cpu >= cpus) break;
    PinTo(cpu);
    Stats rtt = SocketRoundTrip(quick ? 2000 : 20000);
    fmt::print("\n### this process on CPU {} ({}): bare socket round trip median {} (min {})\n\n",
               cpu, cpu == 0 ? "the daemon's CPU" : "another CPU", Time(rtt.median),
               Time(rtt.min));
    fmt::print("| size | put median | put GB/s | memcpy median | memcpy GB/s | put / memcpy "
               "| get median (min–max) | get / socket RTT |\n");
    fmt::print("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (auto [size, reps] : cases) {
      if (!Measure(c, size, reps, rtt)) return 1;
    }
  }
  ::kill(daemon, SIGTERM);
  ::waitpid(daemon, nullptr, 0);
  return 0;
}
