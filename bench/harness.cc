#include "bench/harness.h"

#include <fmt/format.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/system_memory.h"

namespace depot::bench {

void Check(const Status& s, std::string_view what) {
  if (!s.ok()) throw BenchError(fmt::format("{}: {}", what, s.ToString()));
}

uint64_t ReadEveryByte(std::span<const std::byte> bytes) {
  const std::byte* p = bytes.data();
  size_t n = bytes.size();
  uint64_t a = 0, b = 0, c = 0, d = 0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    uint64_t w[4];
    std::memcpy(w, p + i, sizeof w);
    a += w[0];
    b += w[1];
    c += w[2];
    d += w[3];
  }
  for (; i < n; ++i) a += static_cast<uint64_t>(p[i]);
  return a + b + c + d;
}

// ---- statistics ----

void Series::Add(double v) {
  if (rounds_.empty()) NextRound();
  rounds_.back().push_back(v);
}

bool Series::empty() const {
  for (const auto& r : rounds_) {
    if (!r.empty()) return false;
  }
  return true;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

Summary Series::Summarize() const {
  Summary s;
  std::vector<double> all, medians;
  for (const auto& r : rounds_) {
    if (r.empty()) continue;
    all.insert(all.end(), r.begin(), r.end());
    medians.push_back(Percentile(r, 0.5));
  }
  if (all.empty()) return s;
  s.n = all.size();
  s.p50 = Percentile(all, 0.5);
  s.p99 = Percentile(all, 0.99);
  s.min = *std::min_element(all.begin(), all.end());
  s.max = *std::max_element(all.begin(), all.end());
  s.round_lo = *std::min_element(medians.begin(), medians.end());
  s.round_hi = *std::max_element(medians.begin(), medians.end());
  return s;
}

// ---- formatting ----

std::string Time(double s) {
  if (s < 1e-6) return fmt::format("{:.0f} ns", s * 1e9);
  if (s < 1e-3) return fmt::format("{:.1f} µs", s * 1e6);
  if (s < 1) return fmt::format("{:.2f} ms", s * 1e3);
  return fmt::format("{:.2f} s", s);
}

std::string Bytes(uint64_t n) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  uint64_t unit = 1;
  while (u < 4 && n >= unit * 1024) {
    unit *= 1024;
    ++u;
  }
  if (n % unit == 0) return fmt::format("{} {}", n / unit, kUnits[u]);
  return fmt::format("{:.1f} {}", static_cast<double>(n) / static_cast<double>(unit), kUnits[u]);
}

std::string Rate(double bps) { return fmt::format("{:.2f} GB/s", bps / 1e9); }

std::string Grouped(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

std::string Ratio(double x) {
  if (x >= 100) return Grouped(static_cast<uint64_t>(std::llround(x))) + "×";
  if (x >= 10) return fmt::format("{:.1f}×", x);
  if (x >= 0.1) return fmt::format("{:.2f}×", x);
  return fmt::format("{:.3f}×", x);
}

std::string PerSecond(double x) { return Grouped(static_cast<uint64_t>(std::llround(x))) + "/s"; }

std::string Spread(const Summary& s) {
  std::string lo = Time(s.round_lo), hi = Time(s.round_hi);
  if (lo == hi) return lo;
  size_t a = lo.find(' '), b = hi.find(' ');
  if (lo.substr(a) == hi.substr(b))
    return fmt::format("{}–{}", lo.substr(0, a), hi);  // "11.2–12.5 µs"
  return fmt::format("{}–{}", lo, hi);
}

std::string P50WithSpread(const Summary& s) {
  return fmt::format("{} ({})", Time(s.p50), Spread(s));
}

Table::Table(std::vector<std::string> header, std::string align)
    : header_(std::move(header)), align_(std::move(align)) {}

void Table::Row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }

void Table::Print() const {
  std::string out = "\n|";
  for (const auto& h : header_) out += " " + h + " |";
  out += "\n|";
  for (size_t i = 0; i < header_.size(); ++i)
    out += i < align_.size() && align_[i] == 'l' ? "---|" : "---:|";
  out += "\n";
  for (const auto& r : rows_) {
    out += "|";
    for (const auto& c : r) out += " " + c + " |";
    out += "\n";
  }
  Say(out);
}

void Say(std::string_view text) {
  fmt::print("{}\n", text);
  std::fflush(stdout);
}

// ---- chart data ----

namespace {
std::FILE* chart_data = nullptr;

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + '"';
}
}  // namespace

void OpenChartData(const std::string& path) {
  chart_data = std::fopen(path.c_str(), "a");
  if (chart_data == nullptr) throw BenchError(fmt::format("cannot open {}", path));
}

void Plot(std::string_view chart, std::string_view panel, std::string_view series, double x,
          double y) {
  if (chart_data == nullptr) return;
  fmt::print(chart_data, "{{\"chart\": {}, \"panel\": {}, \"series\": {}, \"x\": {}, \"y\": {}}}\n",
             JsonString(chart), JsonString(panel), JsonString(series), x, y);
  std::fflush(chart_data);
}

// ---- targets ----

std::string Targets::Check(std::string target, std::string where, std::string measured, bool met) {
  entries_.push_back({std::move(target), std::move(where), std::move(measured), met});
  return met ? "met" : "**missed**";
}

void Targets::Print() const {
  if (entries_.empty()) {
    Say("\n## Targets\n\nNo target applies to the sections run.");
    return;
  }
  size_t missed = 0;
  for (const auto& e : entries_) missed += e.met ? 0 : 1;
  Say(
      fmt::format("\n## Targets\n\n{} checks: {} met, {} missed. Every figure is from this run "
                  "(see the sections above).",
                  entries_.size(), entries_.size() - missed, missed));
  Table t({"target", "where", "measured", "result"}, "llll");
  for (const auto& e : entries_)
    t.Row({e.target, e.where, e.measured, e.met ? "met" : "**missed**"});
  t.Print();
}

// ---- placement ----

int Cpus() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

void PinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (::sched_setaffinity(0, sizeof set, &set) != 0) {
    throw BenchError(fmt::format("cannot pin to CPU {}: {}", cpu, std::strerror(errno)));
  }
}

void Unpin() {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int i = 0; i < Cpus(); ++i) CPU_SET(i, &set);
  ::sched_setaffinity(0, sizeof set, &set);
}

std::vector<int> Placements() {
  if (Cpus() < 2) return {kServerCpu};
  return {kServerCpu, kServerCpu + 1};
}

std::string PlacementName(int cpu) {
  return cpu == kServerCpu ? fmt::format("client on CPU {} (the servers' CPU)", cpu)
                           : fmt::format("client on CPU {} (another CPU)", cpu);
}

// ---- memory ----

uint64_t RssBytes() {
  std::ifstream f("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

namespace {
uint64_t KbField(const std::string& path, std::string_view field) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.size() > field.size() && line.compare(0, field.size(), field) == 0 &&
        line[field.size()] == ':') {
      return std::stoull(line.substr(field.size() + 1)) * 1024;
    }
  }
  throw BenchError(fmt::format("no {} in {}", field, path));
}
}  // namespace

uint64_t PssBytes() { return KbField("/proc/self/smaps_rollup", "Pss"); }

uint64_t ProcStatusBytes(pid_t pid, std::string_view field) {
  return KbField(fmt::format("/proc/{}/status", pid), field);
}

// ---- processes ----

Channel& Channel::operator=(Channel&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

Channel::~Channel() {
  if (fd_ >= 0) ::close(fd_);
}

void Channel::SendBytes(const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::send(fd_, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw BenchError(fmt::format("channel send: {}", std::strerror(errno)));
    c += w;
    n -= static_cast<size_t>(w);
  }
}

void Channel::RecvBytes(void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = ::recv(fd_, c, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) throw BenchError("the other process closed its channel (did it fail?)");
    if (r < 0) throw BenchError(fmt::format("channel recv: {}", std::strerror(errno)));
    c += r;
    n -= static_cast<size_t>(r);
  }
}

Child Child::Spawn(const std::function<void(Channel&)>& body) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    throw BenchError(fmt::format("socketpair: {}", std::strerror(errno)));
  }
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = ::fork();
  if (pid < 0) throw BenchError(fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::close(sv[0]);
    int code = 0;
    try {
      Channel ch(sv[1]);
      body(ch);
    } catch (const std::exception& e) {
      fmt::print(stderr, "child {}: {}\n", ::getpid(), e.what());
      code = 1;
    }
    std::fflush(stderr);
    std::_Exit(code);
  }
  ::close(sv[1]);
  return Child(pid, Channel(sv[0]));
}

Child::~Child() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
}

void Child::Join() {
  if (pid_ <= 0) return;
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_t pid = std::exchange(pid_, -1);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw BenchError(fmt::format("child {} failed (wait status {})", pid, status));
  }
}

Clock::time_point StartTogether(std::vector<Child>& children) {
  for (auto& c : children) c.channel().Await();
  Clock::time_point go = Clock::now();
  for (auto& c : children) c.channel().Signal();
  return go;
}

void JoinAll(std::vector<Child>& children) {
  for (auto& c : children) c.Join();
}

TempDir::TempDir() {
  char tmpl[] = "/tmp/depot-bench-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr)
    throw BenchError(fmt::format("mkdtemp: {}", std::strerror(errno)));
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

bool WaitUntil(const std::function<bool()>& attempt, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (true) {
    if (attempt()) return true;
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::string LoadAverage() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return fmt::format("{} {} {}", a, b, c);
}

namespace {
// The value of the first line of /proc/cpuinfo that starts with `key` (the first CPU's); empty
// when there is none.
std::string CpuInfo(std::string_view key) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind(key, 0) == 0 && line.find(':') != std::string::npos) {
      return line.substr(line.find(':') + 1);
    }
  }
  return "";
}
}  // namespace

std::string KernelEntry() {
  std::ifstream meltdown("/sys/devices/system/cpu/vulnerabilities/meltdown");
  std::string state;
  std::getline(meltdown, state);
  if (state.find("PTI") == std::string::npos) return "page-table isolation off";
  bool pcid = (CpuInfo("flags") + " ").find(" pcid ") != std::string::npos;
  return pcid ? "page-table isolation on, with PCID"
              : "page-table isolation on, no PCID: every entry into the kernel empties the TLB";
}

std::string MachineDescription() {
  utsname u{};
  ::uname(&u);
  std::string model = CpuInfo("model name");
  model = model.empty() ? "unknown CPU" : model.substr(1);
  uint64_t mem = static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) *
                 static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  // Whether the index can lie on huge pages (ObjectIndex::Create).
  std::string policy = ShmemHugePagePolicy();
  return fmt::format("{}, Linux {}, {} × {}, {} RAM, huge pages for shared memory: {}", u.nodename,
                     u.release, Cpus(), model, Bytes(mem), policy.empty() ? "unknown" : policy);
}

}  // namespace depot::bench
