// depotctl watch: the store's events as they happen.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <ctime>

#include "client/cli/commands.h"
#include "client/cli/format.h"
#include "depot/units.h"

namespace depotctl {

int Watch(depot::Client& c, bool json, uint64_t count) {
  auto sub = c.Subscribe();
  if (!sub.ok()) return Fail(sub.status(), "watch");
  std::fflush(stdout);
  for (uint64_t seen = 0; seen < count; ++seen) {
    auto e = sub->Next();
    if (!e.ok()) return Fail(e.status(), "watch");
    auto kind = depot::Event::KindName(e->kind);
    bool client_event = e->kind == depot::Event::Kind::kClientConnected ||
                        e->kind == depot::Event::Kind::kClientDisconnected;
    if (json) {
      fmt::print(
          "{{\"event\":\"{}\",\"unix_ns\":{},{}\"session\":{},\"pid\":{},\"uid\":{},"
          "\"dropped_before\":{}}}\n",
          kind, e->unix_ns,
          client_event ? ""
                       : fmt::format("\"guid\":\"{}\",\"name\":{},\"size\":{},", e->guid.ToString(),
                                     Json(e->name), e->size),
          e->session_id, e->pid, e->uid, e->dropped);
    } else {
      if (e->dropped > 0) fmt::print("({} events dropped: this watcher fell behind)\n", e->dropped);
      auto time = std::chrono::system_clock::time_point(std::chrono::nanoseconds(e->unix_ns));
      auto secs = std::chrono::floor<std::chrono::seconds>(time);
      std::time_t t = std::chrono::system_clock::to_time_t(secs);
      std::tm tm{};
      ::localtime_r(&t, &tm);
      std::string what = client_event ? ""
                                      : fmt::format("{}  {:>10}  {}", e->guid.ToString(),
                                                    depot::FormatBytes(e->size), e->name);
      fmt::print("{:02}:{:02}:{:02}.{:03}  {:<19}  session {} (pid {} uid {})  {}\n", tm.tm_hour,
                 tm.tm_min, tm.tm_sec, (e->unix_ns / 1'000'000) % 1000, kind, e->session_id, e->pid,
                 e->uid, what);
    }
    std::fflush(stdout);
  }
  return kOk;
}

}  // namespace depotctl
