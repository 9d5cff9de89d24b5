// depotctl: inspect and manage a running depotd. Built only on the public client API. This
// file reads the command line and hands it to the command (commands.h).
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "client/cli/commands.h"
#include "client/cli/format.h"
#include "depot/client.h"

namespace depotctl {
namespace {

constexpr const char kUsage[] =
    R"(usage: depotctl [--socket PATH] [--daemon-uid UID] [--json] COMMAND [ARGS]

Commands:
  status                      the daemon: pools, objects, clients, counters
  ls [--state S] [--name GLOB] [--sort size|age|name] [--limit N] [--holder PID]
                              objects, one per line (S: creating or sealed; PID: only what
                              that process holds or is creating)
  stat GUID                   everything the daemon knows about one object, and who holds it
  put FILE|- [--name NAME] [--evictable] [--metadata TEXT] [--checksum]
                              stores a file (or stdin) as one object; prints its GUID
                              (--checksum: records XXH3-64 of its bytes at seal)
  get GUID [-o FILE|-]        writes the object's bytes (every frame, in order)
  cat GUID                    writes the object's bytes to stdout
  rm GUID...                  deletes objects
  verify GUID...              hashes the bytes again (here, without copying) and compares
                              them with the checksum recorded at seal; exit 1 on a mismatch
  watch [--count N]           prints events as they happen, until Ctrl-C (or N events)
  clients                     connected clients and what they hold
  ping [--count N]            round-trip latency over N pings (default 10)
  metrics                     the daemon's metrics, in the Prometheus text format
  top [--interval MS] [--count N]
                              a live view, refreshed every MS ms (default 1000); q quits;
                              N snapshots in plain text when stdout is not a terminal
                              (default 1)

The socket is --socket, else $DEPOT_SOCKET, else $XDG_RUNTIME_DIR/depot/depot.sock, else
/run/user/$UID/depot/depot.sock, else /tmp/depot-$UID/depot.sock. A daemon is trusted when it
runs as you or root, or as the owner of a socket directory only root could have made (the
service's /run/depot); --daemon-uid (else $DEPOT_DAEMON_UID) names one more uid to trust.
--json prints JSON (one object, an array, or for watch one object a line). Exit codes: 0 ok,
1 error, 2 usage, 3 not found, 4 no daemon.
)";

int Main(int argc, char** argv) {
  depot::ConnectOptions connect;
  connect.client_name = "depotctl";
  bool json = false;
  std::string out = "-";
  std::string metadata;
  std::optional<uint64_t> count;
  uint64_t holder = 0, interval = 1000;
  LsOptions ls;
  depot::CreateOptions create;
  std::vector<std::string> pos;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto number = [](const std::string& v) -> std::optional<uint64_t> {
      char* end = nullptr;
      uint64_t n = std::strtoull(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n == 0) return std::nullopt;
      return n;
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return kOk;
    } else if (a == "--json") {
      json = true;
    } else if (a == "--evictable") {
      create.evictable = true;
    } else if (a == "--checksum") {
      create.checksum = true;
    } else if (a == "--socket" || a == "-o" || a == "--output" || a == "--name" ||
               a == "--metadata" || a == "--limit" || a == "--count" || a == "-n" ||
               a == "--state" || a == "--sort" || a == "--daemon-uid" || a == "--holder" ||
               a == "--interval") {
      if (i + 1 >= argc) return Usage(a + " needs a value");
      std::string v = argv[++i];
      if (a == "--socket") {
        connect.socket_path = v;
      } else if (a == "--daemon-uid") {
        char* end = nullptr;
        unsigned long uid = std::strtoul(v.c_str(), &end, 10);
        if (v.empty() || *end != '\0' || uid >= static_cast<uid_t>(-1)) {
          return Usage(a + " needs a uid (a number)");
        }
        connect.trusted_daemon_uid = static_cast<uid_t>(uid);
      } else if (a == "--name") {
        create.name = v;
        ls.name_glob = v;
      } else if (a == "--metadata") {
        metadata = v;
      } else if (a == "--state") {
        ls.state = v;
      } else if (a == "--sort") {
        ls.sort = v;
      } else if (a == "-o" || a == "--output") {
        out = v;
      } else if (a == "--holder" || a == "--interval") {
        auto n = number(v);
        if (!n || *n > INT32_MAX) return Usage(a + " needs a positive number");
        (a == "--holder" ? holder : interval) = *n;
      } else {
        count = number(v);
        if (!count) return Usage(a + " needs a positive number");
      }
    } else if (a.size() > 1 && a[0] == '-' && a != "-") {
      return Usage("unknown option " + a);
    } else {
      pos.push_back(a);
    }
  }
  if (pos.empty()) return Usage("no command given");
  std::string cmd = pos[0];
  std::vector<std::string> args(pos.begin() + 1, pos.end());
  static const std::map<std::string, std::pair<size_t, size_t>> kArity = {
      {"status", {0, 0}},  {"ls", {0, 0}},   {"stat", {1, 1}},          {"put", {1, 1}},
      {"get", {1, 1}},     {"cat", {1, 1}},  {"rm", {1, SIZE_MAX}},     {"watch", {0, 0}},
      {"clients", {0, 0}}, {"ping", {0, 0}}, {"verify", {1, SIZE_MAX}}, {"metrics", {0, 0}},
      {"top", {0, 0}}};
  auto arity = kArity.find(cmd);
  if (arity == kArity.end()) return Usage(fmt::format("unknown command '{}'", cmd));
  if (args.size() < arity->second.first || args.size() > arity->second.second) {
    return Usage(fmt::format("'{}' takes {} argument(s), not {}", cmd,
                             arity->second.first == arity->second.second
                                 ? std::to_string(arity->second.first)
                                 : fmt::format("at least {}", arity->second.first),
                             args.size()));
  }
  if (count && cmd == "ls") ls.limit = *count;
  ls.holder_pid = static_cast<int32_t>(holder);

  auto client = depot::Client::Connect(connect);
  if (!client.ok()) return Fail(client.status(), cmd);
  if (cmd == "status") return Status(*client, json);
  if (cmd == "ls") return Ls(*client, json, ls);
  if (cmd == "stat") return Stat(*client, json, args[0]);
  if (cmd == "get") return Get(*client, cmd, args[0], out);
  if (cmd == "cat") return Get(*client, cmd, args[0], "-");
  if (cmd == "rm") return Rm(*client, args);
  if (cmd == "verify") return Verify(*client, json, args);
  if (cmd == "watch") return Watch(*client, json, count.value_or(UINT64_MAX));
  if (cmd == "clients") return Clients(*client, json);
  if (cmd == "ping") return Ping(*client, json, count.value_or(10));
  if (cmd == "metrics") return Metrics(*client);
  if (cmd == "top") return Top(*client, interval, count.value_or(::isatty(STDOUT_FILENO) ? 0 : 1));
  create.metadata = std::as_bytes(std::span(metadata));
  return Put(*client, args[0], create);
}

}  // namespace
}  // namespace depotctl

int main(int argc, char** argv) { return depotctl::Main(argc, argv); }
