// What every benchmark in bench/ shares: clocks and statistics, markdown tables and the target
// checks printed beside the figures, CPU placement, memory readings, and child processes with a
// channel to talk to them. Nothing here measures anything by itself.
//
// Method (see depot_bench.cc): quantities that are compared are measured in the same run, in
// alternating rounds whose order rotates (no method always runs after the same one: on this VM
// the first copy after an idle spell runs slower), so that each sees the same machine state; a
// Summary gives the median and p99 over all samples and the spread of the rounds' medians.
#ifndef DEPOT_BENCH_HARNESS_H_
#define DEPOT_BENCH_HARNESS_H_

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "depot/status.h"

namespace depot::bench {

// ---- time and failure ----

using Clock = std::chrono::steady_clock;

inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
inline double Since(Clock::time_point t0) { return Seconds(Clock::now() - t0); }

// Stops the benchmark: a request that failed, a child that died, a server that did not start.
struct BenchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws BenchError naming `what` when `s` is not ok.
void Check(const Status& s, std::string_view what);
template <class T>
T Check(Result<T> r, std::string_view what) {
  Check(r.status(), what);
  return std::move(*r);
}

// Keeps the compiler from dropping a computation whose result is otherwise unused.
template <class T>
inline void KeepAlive(const T& v) {
  asm volatile("" : : "r,m"(v) : "memory");
}

// Reads every byte of `bytes` once (sums 64-bit words) and returns the sum.
uint64_t ReadEveryByte(std::span<const std::byte> bytes);

// ---- statistics ----

struct Summary {
  size_t n = 0;
  double p50 = 0, p99 = 0, min = 0, max = 0;
  double round_lo = 0, round_hi = 0;  // lowest and highest median of one round
};

// Samples of one quantity, taken in rounds that alternate with the quantities it is compared
// with. Call NextRound() before each round's samples.
class Series {
 public:
  void NextRound() { rounds_.emplace_back(); }
  void Add(double v);
  bool empty() const;
  Summary Summarize() const;

 private:
  std::vector<std::vector<double>> rounds_;
};

// Nearest-rank percentile (p in [0, 1]) of `v`; 0 when empty.
double Percentile(std::vector<double> v, double p);

// ---- formatting ----

std::string Time(double seconds);             // "840 ns", "11.9 µs", "4.86 ms", "1.20 s"
std::string Bytes(uint64_t n);                // "64 B", "4.0 KiB", "1.0 GiB"
std::string Rate(double bytes_per_second);    // "12.31 GB/s" (10^9 bytes)
std::string Ratio(double x);                  // "1.26×", "0.031×", "1,280×"
std::string PerSecond(double x);              // "48,210/s"
std::string Grouped(uint64_t n);              // "1,000,000"
std::string Spread(const Summary& s);         // "11.2–12.5 µs": the rounds' medians
std::string P50WithSpread(const Summary& s);  // "11.9 µs (11.2–12.5 µs)"

// A markdown table, printed to stdout.
class Table {
 public:
  // `align`: one letter per column, 'l' or 'r'.
  Table(std::vector<std::string> header, std::string align);
  void Row(std::vector<std::string> cells);
  void Print() const;

 private:
  std::vector<std::string> header_;
  std::string align_;
  std::vector<std::vector<std::string>> rows_;
};

// Prints a line (or paragraph) of the document and flushes, so that progress shows.
void Say(std::string_view text);

// ---- chart data ----

// The figures bench/charts.py draws, beside the document: once a file is opened (depot_bench
// --data FILE), each Plot appends one JSON line {"chart", "panel", "series", "x", "y"}. `panel`
// names one plot of the chart (a placement, say; "" when it has one). Without a file, nothing.
void OpenChartData(const std::string& path);
void Plot(std::string_view chart, std::string_view panel, std::string_view series, double x,
          double y);

// ---- targets ----

// The targets the figures are held to: each check is printed beside its figure ("met" or
// "missed") and once more in the summary at the end.
class Targets {
 public:
  // Records one check and returns "met" or "**missed**" for the figure's table.
  std::string Check(std::string target, std::string where, std::string measured, bool met);
  void Print() const;

 private:
  struct Entry {
    std::string target, where, measured;
    bool met;
  };
  std::vector<Entry> entries_;
};

// ---- placement ----

// Round trips cost very different amounts depending on whether both ends share a vCPU, so the
// servers (depotd, redis-server, socket peers) run on kServerCpu and every round-trip figure is
// taken with this process on each CPU of Placements(), and compared only within one.
inline constexpr int kServerCpu = 0;

int Cpus();
void PinTo(int cpu);
void Unpin();                        // every CPU
std::vector<int> Placements();       // {0, 1}, or {0} on one CPU
std::string PlacementName(int cpu);  // "client on CPU 0 (the servers' CPU)"

// ---- memory ----

uint64_t RssBytes();  // this process, /proc/self/statm (shared pages count in full)
uint64_t PssBytes();  // this process, /proc/self/smaps_rollup (shared pages divided fairly)
// A "kB" field of /proc/PID/status ("VmRSS", "RssAnon"), in bytes.
uint64_t ProcStatusBytes(pid_t pid, std::string_view field);

// ---- processes ----

// One end of a socketpair between the benchmark and a child, for small fixed-size messages.
// Any failure (the other side died) throws BenchError.
class Channel {
 public:
  Channel() = default;
  explicit Channel(int fd) : fd_(fd) {}
  Channel(Channel&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Channel& operator=(Channel&& o) noexcept;
  ~Channel();

  void SendBytes(const void* p, size_t n);
  void RecvBytes(void* p, size_t n);
  template <class T>
  void Send(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    SendBytes(&v, sizeof v);
  }
  template <class T>
  T Recv() {
    static_assert(std::is_trivially_copyable_v<T>);
    T v;
    RecvBytes(&v, sizeof v);
    return v;
  }
  // A one-byte "ready" / "go".
  void Signal() { Send<char>('.'); }
  void Await() { Recv<char>(); }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

// A forked child process running a function, with a Channel to it. Dies with the benchmark
// (PR_SET_PDEATHSIG); a Child destroyed while running is killed and reaped.
class Child {
 public:
  // Forks. The child runs body(its end of the channel) and exits 0, or 1 after printing why on
  // stderr when body throws. The child must not print to stdout (the document).
  static Child Spawn(const std::function<void(Channel&)>& body);

  Child(Child&& o) noexcept : pid_(std::exchange(o.pid_, -1)), channel_(std::move(o.channel_)) {}
  Child& operator=(Child&&) = delete;
  ~Child();

  Channel& channel() { return channel_; }
  pid_t pid() const { return pid_; }
  // Waits for the child to exit; BenchError when it did not exit 0.
  void Join();

 private:
  Child(pid_t pid, Channel ch) : pid_(pid), channel_(std::move(ch)) {}
  pid_t pid_ = -1;
  Channel channel_;
};

// Waits for a "ready" from each child, then sends each "go" and returns the time it did.
Clock::time_point StartTogether(std::vector<Child>& children);
void JoinAll(std::vector<Child>& children);

// A fresh directory under /tmp, removed with what it holds on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Repeats `attempt` (every 5 ms) until it returns true or `timeout` passes; false then.
bool WaitUntil(const std::function<bool()>& attempt, std::chrono::milliseconds timeout);

// Host, kernel, CPU, memory and load: the lines that say what machine a document comes from.
std::string MachineDescription();
// How the kernel is entered: "page-table isolation on, no PCID: ...", from
// /sys/devices/system/cpu/vulnerabilities/meltdown and the CPU's flags.
std::string KernelEntry();
std::string LoadAverage();  // "1.02 0.80 0.40" (1, 5, 15 minutes)

}  // namespace depot::bench

#endif  // DEPOT_BENCH_HARNESS_H_
