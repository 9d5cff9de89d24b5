// depotctl top: a live view of the store, refreshed every interval: the pools, the rates of puts,
// gets and bytes put, the largest objects and the busiest clients. In a terminal it redraws in
// the alternate screen and quits on q (or Ctrl-C); otherwise it prints plain snapshots.
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "client/cli/commands.h"
#include "client/cli/format.h"
#include "depot/units.h"

namespace depotctl {
namespace {

constexpr size_t kRows = 10;              // largest objects and busiest clients shown
constexpr uint32_t kMaxScanned = 10'000;  // objects looked at per refresh for the largest

volatile std::sig_atomic_t g_interrupted = 0;

// The counters whose rates top shows, read from the metrics text.
struct Counters {
  double puts = 0, gets = 0, bytes_put = 0;
  std::chrono::steady_clock::time_point at;
};

double Value(const std::string& text, std::string_view series) {
  size_t at = text.find(fmt::format("\n{} ", series));
  if (at == std::string::npos) return 0.0;
  return std::strtod(text.c_str() + at + series.size() + 2, nullptr);
}

struct Sample {
  depot::StoreStatus status;
  std::vector<depot::ClientInfo> clients;
  std::vector<depot::ObjectInfo> largest;
  bool scanned_all = true;
  Counters counters;
};

depot::Result<Sample> Take(depot::Client& c) {
  Sample s;
  auto status = c.GetStatus();
  if (!status.ok()) return status.status();
  s.status = std::move(*status);
  auto clients = c.Clients();
  if (!clients.ok()) return clients.status();
  s.clients = std::move(*clients);
  auto metrics = c.Metrics();
  if (!metrics.ok()) return metrics.status();
  s.counters = {Value(*metrics, "depot_request_duration_seconds_count{type=\"create\"}"),
                Value(*metrics, "depot_request_duration_seconds_count{type=\"get\"}"),
                Value(*metrics, "depot_object_size_bytes_sum"), std::chrono::steady_clock::now()};
  auto page = c.List(std::nullopt, kMaxScanned);
  if (!page.ok()) return page.status();
  s.scanned_all = !page->more;
  s.largest = std::move(page->objects);
  size_t n = std::min(kRows, s.largest.size());
  std::partial_sort(s.largest.begin(), s.largest.begin() + n, s.largest.end(),
                    [](const auto& a, const auto& b) { return a.size > b.size; });
  s.largest.resize(n);
  return s;
}

std::string Render(const Sample& now, const Sample* before, std::string_view footer) {
  const depot::StoreStatus& st = now.status;
  std::string out =
      fmt::format("depotd {} pid {}, up {}s, {} clients, {} gets waiting\n", st.daemon_version,
                  st.daemon_pid, st.uptime_ms / 1000, st.clients, st.gets_waiting);
  out += fmt::format("host pool: {} of {} used, {} reserved in {} segments, largest free {}\n",
                     depot::FormatBytes(st.used), depot::FormatBytes(st.capacity),
                     depot::FormatBytes(st.reserved), st.segments,
                     depot::FormatBytes(st.largest_free));
  for (const auto& d : st.device_pools) {
    out += fmt::format("gpu {}: {} of {} used\n", d.uuid, depot::FormatBytes(d.used),
                       depot::FormatBytes(d.capacity));
  }
  out += fmt::format("objects: {} sealed, {} creating, {} deleted but held; {} evictions\n",
                     st.objects_sealed, st.objects_creating, st.objects_deleted, st.evictions);
  if (before != nullptr) {
    double seconds = std::chrono::duration<double>(now.counters.at - before->counters.at).count();
    auto rate = [&](double a, double b) { return seconds > 0 ? (a - b) / seconds : 0.0; };
    out += fmt::format("rates: {:.1f} puts/s, {:.1f} gets/s, {}/s put\n",
                       rate(now.counters.puts, before->counters.puts),
                       rate(now.counters.gets, before->counters.gets),
                       depot::FormatBytes(static_cast<uint64_t>(
                           rate(now.counters.bytes_put, before->counters.bytes_put))));
  } else {
    out += "rates: (after the next refresh)\n";
  }
  out += fmt::format("\nlargest objects{}:\n", now.scanned_all ? "" : " (of the first 10000)");
  out +=
      fmt::format("  {:<36}  {:>10}  {:<8}  {:>4}  {}\n", "GUID", "SIZE", "STATE", "REFS", "NAME");
  for (const auto& o : now.largest) {
    out += fmt::format("  {:<36}  {:>10}  {:<8}  {:>4}  {}\n", o.guid.ToString(),
                       depot::FormatBytes(o.size), depot::ObjectInfo::StateName(o.state),
                       o.refcount, o.name);
  }
  // Busiest: most requests since the last refresh (since connecting, the first time).
  std::map<uint64_t, uint64_t> earlier;
  if (before != nullptr) {
    for (const auto& c : before->clients) earlier[c.session_id] = c.requests;
  }
  std::vector<std::pair<uint64_t, const depot::ClientInfo*>> busy;
  for (const auto& c : now.clients) busy.emplace_back(c.requests - earlier[c.session_id], &c);
  std::stable_sort(busy.begin(), busy.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  out += fmt::format("\nbusiest clients:\n  {:>8}  {:<16}  {:>6}  {:>9}  {:>6}  {:>10}  {}\n",
                     "PID", "PROCESS", "UID", "REQUESTS", "HOLDS", "HELD", "NAME");
  for (size_t i = 0; i < busy.size() && i < kRows; ++i) {
    const depot::ClientInfo& c = *busy[i].second;
    out +=
        fmt::format("  {:>8}  {:<16}  {:>6}  {:>9}  {:>6}  {:>10}  {}\n", c.pid, c.process, c.uid,
                    busy[i].first, c.references, depot::FormatBytes(c.bytes_held), c.name);
  }
  out += footer;
  return out;
}

// The terminal in the mode top needs (no echo, keys read one at a time), restored on exit.
class RawTerminal {
 public:
  RawTerminal() {
    ok_ = ::tcgetattr(STDIN_FILENO, &saved_) == 0;
    if (ok_) {
      termios raw = saved_;
      raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
      ::tcsetattr(STDIN_FILENO, TCSANOW, &raw);
    }
    std::fputs("\x1b[?1049h\x1b[?25l", stdout);  // the alternate screen, no cursor
  }
  ~RawTerminal() {
    std::fputs("\x1b[?25h\x1b[?1049l", stdout);
    std::fflush(stdout);
    if (ok_) ::tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;

 private:
  termios saved_{};
  bool ok_ = false;
};

// Waits up to `ms` for a key; true when it was q (or Ctrl-C arrived).
bool QuitPressed(int ms) {
  pollfd p{STDIN_FILENO, POLLIN, 0};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!g_interrupted) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) return false;
    int n = ::poll(&p, 1, static_cast<int>(left));
    if (n > 0) {
      char key = 0;
      // At the end of stdin, keep drawing at the same pace (poll ignores a negative fd).
      if (::read(STDIN_FILENO, &key, 1) != 1) p.fd = -1;
      if (key == 'q' || key == 'Q') return true;
    }
  }
  return true;
}

}  // namespace

int Top(depot::Client& c, uint64_t interval_ms, uint64_t count) {
  struct sigaction on_int {};
  on_int.sa_handler = [](int) { g_interrupted = 1; };
  ::sigaction(SIGINT, &on_int, nullptr);
  auto first = Take(c);
  if (!first.ok()) return Fail(first.status(), "top");
  Sample before = std::move(*first);
  if (!::isatty(STDOUT_FILENO)) {
    // Plain text: each snapshot after one interval, so that it has rates.
    for (uint64_t shown = 0; (count == 0 || shown < count) && !g_interrupted; ++shown) {
      ::usleep(static_cast<useconds_t>(interval_ms * 1000));
      auto now = Take(c);
      if (!now.ok()) return Fail(now.status(), "top");
      std::fputs(Render(*now, &before, shown + 1 < count || count == 0 ? "\n" : "").c_str(),
                 stdout);
      std::fflush(stdout);
      before = std::move(*now);
    }
    return kOk;
  }
  RawTerminal terminal;
  const Sample* previous = nullptr;
  Sample now = before;
  for (uint64_t shown = 0; count == 0 || shown < count; ++shown) {
    std::string screen = Render(now, previous, "\n(q quits)\n");
    // Each line ends by clearing the rest of it, so that a shorter line leaves nothing behind.
    std::string framed = "\x1b[H";
    for (size_t start = 0; start < screen.size();) {
      size_t end = screen.find('\n', start);
      framed += screen.substr(start, end - start) + "\x1b[K\r\n";
      start = end + 1;
    }
    framed += "\x1b[J";
    std::fputs(framed.c_str(), stdout);
    std::fflush(stdout);
    if (QuitPressed(static_cast<int>(interval_ms))) break;
    auto next = Take(c);
    if (!next.ok()) return Fail(next.status(), "top");
    before = std::move(now);
    previous = &before;
    now = std::move(*next);
  }
  return kOk;
}

}  // namespace depotctl
