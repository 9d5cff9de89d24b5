// The metrics against a real daemon: what `depotctl metrics` and the HTTP endpoint (metrics_listen)
// say after known requests, checked by promtool and scraped by a real Prometheus server; the
// endpoint's bounds against slow and hostile scrapers; docs/metrics.md against the output.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "common/unique_fd.h"
#include "tests/daemon_fixture.h"
#include "tests/other_users.h"

using namespace depot;
using namespace depot::test;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

std::string Metrics(const Daemon& d) {
  auto text = d.Connect().Metrics();
  REQUIRE(text.ok());
  return *text;
}

// The value of one series ("depot_objects{state=\"sealed\"}"); fails the test when absent.
double Value(const std::string& text, const std::string& series) {
  size_t at = text.find("\n" + series + " ");
  INFO(series);
  REQUIRE(at != std::string::npos);
  return std::stod(text.substr(at + series.size() + 2));
}

// A TCP connection to 127.0.0.1:port, or -1.
int Dial(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Everything the peer sends until it closes (or `limit` passes).
std::string ReadAll(int fd, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  std::string out;
  auto deadline = std::chrono::steady_clock::now() + limit;
  char buf[65536];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// One HTTP exchange: sends `request` as is and returns the whole answer.
std::string Http(uint16_t port, const std::string& request) {
  int fd = Dial(port);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size()));
  std::string out = ReadAll(fd);
  ::close(fd);
  return out;
}

std::string Get(uint16_t port, const std::string& path) {
  return Http(port, "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n");
}

// A port nobody listens on now (the kernel's pick, released).
uint16_t FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

// A daemon with the endpoint on a free loopback port; the port, from its log.
struct ServedDaemon {
  Daemon daemon;
  uint16_t port = 0;
  explicit ServedDaemon(std::vector<std::string> args = {})
      : daemon([&] {
          args.insert(args.end(), {"--capacity", "64MiB", "--metrics-listen", "127.0.0.1:0"});
          return args;
        }()) {
    std::smatch m;
    std::string log = daemon.Log();
    REQUIRE(std::regex_search(log, m, std::regex("http://127\\.0\\.0\\.1:([0-9]+)/metrics")));
    port = static_cast<uint16_t>(std::stoi(m[1]));
  }
};

std::string Which(const std::string& program) {
  std::string out;
  if (Run({"sh", "-c", "command -v " + program}, &out) != 0) return "";
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Every family in a metrics text: name -> type, and the label names its samples carry.
struct Family {
  std::string type;
  std::set<std::string> labels;
};
std::map<std::string, Family> Families(const std::string& text) {
  std::map<std::string, Family> out;
  std::istringstream in(text);
  std::string line, current;
  std::regex type_line("# TYPE ([a-z_]+) ([a-z]+)");
  std::regex label("([a-z_]+)=\"");
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, type_line)) {
      current = m[1];
      out[current].type = m[2];
    } else if (!line.empty() && line[0] != '#' && line.find('{') != std::string::npos) {
      std::string labels = line.substr(line.find('{'), line.find('}') - line.find('{'));
      for (std::sregex_iterator it(labels.begin(), labels.end(), label), end; it != end; ++it) {
        if ((*it)[1] != "le") out[current].labels.insert((*it)[1]);
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("metrics count the requests, objects and errors that happened", "[metrics]") {
  Daemon d({"--capacity", "64MiB"});
  Client c = d.Connect();
  auto a = c.Put(Pattern(100, 1));
  auto b = c.Put(Pattern(5 << 20, 2), Named("", true));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  // From another connection, which has not mapped the segment yet: a get request (this one's
  // own get would take the index).
  Client reader = d.Connect();
  auto held = reader.Get(*a);
  REQUIRE(held.ok());
  CHECK(c.Put(Pattern(1, 3)).ok());
  // Larger than the whole capacity: StoreFull.
  auto full = c.Create({128ull << 20});
  REQUIRE(full.status().IsStoreFull());

  std::string m = Metrics(d);
  INFO(m);
  CHECK(Value(m, "depot_objects{state=\"sealed\"}") == 3);
  CHECK(Value(m, "depot_object_bytes{state=\"sealed\"}") == 100 + (5 << 20) + 1);
  CHECK(Value(m, "depot_evictable_objects") == 1);
  CHECK(Value(m, "depot_evictable_bytes") == 5 << 20);
  CHECK(Value(m, "depot_pinned_objects") == 2);
  CHECK(Value(m, "depot_object_size_bytes_count") == 3);
  CHECK(Value(m, "depot_object_size_bytes_sum") == 100 + (5 << 20) + 1);
  CHECK(Value(m, "depot_object_size_bytes_bucket{le=\"64\"}") == 1);
  CHECK(Value(m, "depot_object_size_bytes_bucket{le=\"1024\"}") == 2);
  CHECK(Value(m, "depot_object_size_bytes_bucket{le=\"+Inf\"}") == 3);
  CHECK(Value(m, "depot_errors_total{code=\"StoreFull\"}") == 1);
  // The two small puts go into a lease and the put ring; the 5 MiB put (more than a lease may
  // hold here) is a create and a seal, as is the create larger than the pool.
  CHECK(Value(m, "depot_request_duration_seconds_count{type=\"put\"}") == 2);
  CHECK(Value(m, "depot_request_duration_seconds_count{type=\"create\"}") == 2);
  CHECK(Value(m, "depot_request_duration_seconds_count{type=\"get\"}") == 1);
  CHECK(Value(m, "depot_request_duration_seconds_bucket{type=\"get\",le=\"+Inf\"}") == 1);
  CHECK(Value(m, "depot_clients") == 3);  // these two clients and the one Metrics connected
  CHECK(Value(m, "depot_pool_capacity_bytes{pool=\"host\",kind=\"host\"}") == 64 << 20);
  double used = Value(m, "depot_pool_used_bytes{pool=\"host\",kind=\"host\"}");
  CHECK(used >= 100 + (5 << 20) + 1);
  CHECK(Value(m, "depot_resident_memory_bytes") > 0);
  CHECK_THAT(m, Contains("depot_build_info{version=\"" DEPOT_VERSION "\"} 1"));

  // Peak used stays at the high-water mark after the big object goes.
  REQUIRE(c.Delete(*b).ok());
  std::string after = Metrics(d);
  CHECK(Value(after, "depot_pool_used_bytes{pool=\"host\",kind=\"host\"}") < used);
  CHECK(Value(after, "depot_pool_peak_used_bytes{pool=\"host\",kind=\"host\"}") >= used);
  // Deleted while held: counted as deleted, not sealed.
  REQUIRE(c.Delete(*a).ok());
  std::string deleted = Metrics(d);
  CHECK(Value(deleted, "depot_objects{state=\"deleted\"}") == 1);
  CHECK(Value(deleted, "depot_object_bytes{state=\"deleted\"}") == 100);
}

TEST_CASE("evictions stay counted when their per-user namespace is dropped", "[metrics]") {
  NeedRoot();
  Daemon d = StartOpen({"--namespaces", "per_user", "--allow-users", std::to_string(kAlice),
                        "--segment-size", "4MiB"});
  // Alice fills her namespace with evictable objects (64 MiB of capacity, 20 MiB each), then
  // deletes what is left and goes: her namespace is dropped.
  int rc = RunAs(kAlice, kAlice, {}, [&] {
    Client c = d.Connect();
    for (uint32_t i = 0; i < 6; ++i) {
      if (!c.Put(Pattern(20 << 20, i), Named("", true)).ok()) return 1;
    }
    auto page = c.List();
    if (!page.ok()) return 2;
    for (const auto& o : page->objects) {
      if (!c.Delete(o.guid).ok()) return 3;
    }
    return 0;
  });
  REQUIRE(rc == 0);
  // Alice's namespace goes when the daemon has handled her connection's close.
  CHECK(WaitFor([&] { return Value(Metrics(d), "depot_namespaces") == 1; }));  // root's
  std::string m = Metrics(d);
  INFO(m);
  CHECK(Value(m, "depot_evictions_total") >= 3);
  CHECK(Value(m, "depot_evicted_bytes_total") >= 3 * (20 << 20));
}

TEST_CASE("quota use per uid appears only where quotas are set", "[metrics]") {
  {
    Daemon d({"--capacity", "64MiB"});
    REQUIRE(d.Connect().Put(Pattern(10, 1)).ok());
    CHECK_THAT(Metrics(d), !Contains("depot_user_quota_used_bytes"));
  }
  Daemon d({"--capacity", "64MiB", "--user-quota-bytes", "1MiB"});
  REQUIRE(d.Connect().Put(Pattern(1000, 1)).ok());
  std::string m = Metrics(d);
  CHECK(Value(m, fmt::format("depot_user_quota_used_bytes{{uid=\"{}\"}}", ::getuid())) == 1000);
  CHECK(Value(m, "depot_user_quota_limit_bytes") == 1 << 20);
}

TEST_CASE("promtool check metrics accepts the daemon's output", "[metrics]") {
  std::string promtool = Which("promtool");
  if (promtool.empty()) {
    Skip("promtool (Debian package prometheus) is not installed; scripts/deps installs it");
  }
  ServedDaemon d({"--user-quota-bytes", "1GiB"});
  Client c = d.daemon.Connect();
  REQUIRE(c.Put(Pattern(5000, 1)).ok());
  REQUIRE(c.Create({1ull << 30}).status().IsStoreFull());
  std::string dir = TempDir();
  std::string out, err;
  REQUIRE(Run({DEPOTCTL_PATH, "--socket", d.daemon.socket(), "metrics"}, &out, &err) == 0);
  INFO(out);
  REQUIRE(Run({promtool, "check", "metrics"}, &out, &err, out) == 0);
  CHECK(out + err == "");  // no lint complaint either
  // The endpoint's body, too.
  std::string http = Get(d.port, "/metrics");
  std::string body = http.substr(http.find("\r\n\r\n") + 4);
  REQUIRE(Run({promtool, "check", "metrics"}, &out, &err, body) == 0);
  CHECK(out + err == "");
}

TEST_CASE("docs/metrics.md lists every family with its type and labels", "[metrics]") {
  ServedDaemon d({"--user-quota-bytes", "1GiB"});
  {
    // The put goes through the connection's ring: its status request makes the daemon take
    // the put before the metrics below count its user.
    Client c = d.daemon.Connect();
    REQUIRE(c.Put(Pattern(10, 1)).ok());
    REQUIRE(c.GetStatus().ok());
  }
  auto families = Families(Metrics(d.daemon));
  REQUIRE(families.size() > 20);
  std::ifstream in(DEPOT_SOURCE_DIR "/docs/metrics.md");
  std::stringstream doc;
  doc << in.rdbuf();
  // Rows: | `name` | type | `label`, `label` | meaning |
  std::map<std::string, Family> documented;
  std::regex row("\\| `(depot_[a-z_]+)` \\| ([a-z]+) \\| ([^|]*)\\|");
  std::string text = doc.str();
  for (std::sregex_iterator it(text.begin(), text.end(), row), end; it != end; ++it) {
    Family f{(*it)[2], {}};
    std::string labels = (*it)[3];
    std::regex label("`([a-z_]+)`");
    for (std::sregex_iterator l(labels.begin(), labels.end(), label), e; l != e; ++l) {
      f.labels.insert((*l)[1]);
    }
    documented[(*it)[1]] = f;
  }
  for (const auto& [name, f] : families) {
    INFO(name);
    REQUIRE(documented.count(name) == 1);
    CHECK(documented[name].type == f.type);
    CHECK(documented[name].labels == f.labels);
  }
  for (const auto& [name, f] : documented) {
    INFO(name << " is documented but not in the daemon's output");
    CHECK(families.count(name) == 1);
  }
}

TEST_CASE("the HTTP endpoint answers GET /metrics and nothing else", "[metrics]") {
  ServedDaemon d;
  {
    Client c = d.daemon.Connect();
    REQUIRE(c.Put(Pattern(777, 1)).ok());
    REQUIRE(c.GetStatus().ok());  // the daemon has taken the put from the ring
  }
  std::string ok = Get(d.port, "/metrics");
  CHECK_THAT(ok, StartsWith("HTTP/1.1 200 OK\r\n"));
  CHECK_THAT(ok, Contains("Content-Type: text/plain; version=0.0.4"));
  CHECK_THAT(ok, Contains("\ndepot_object_bytes{state=\"sealed\"} 777\n"));
  // The same families as the metrics request.
  CHECK(Families(ok.substr(ok.find("\r\n\r\n") + 4)).size() == Families(Metrics(d.daemon)).size());
  CHECK_THAT(Get(d.port, "/"), StartsWith("HTTP/1.1 404 "));
  CHECK_THAT(Http(d.port, "POST /metrics HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 405 "));
  CHECK_THAT(Http(d.port, "hello\r\n\r\n"), StartsWith("HTTP/1.1 400 "));
  std::string head = Http(d.port, "HEAD /metrics HTTP/1.1\r\n\r\n");
  CHECK_THAT(head, StartsWith("HTTP/1.1 200 OK\r\n"));
  CHECK(head.ends_with("\r\n\r\n"));  // no body
}

TEST_CASE("slow and hostile scrapers cannot hold or grow the daemon", "[metrics]") {
  ServedDaemon d;
  // A request head past 4 KiB is refused, however much more follows.
  std::string huge = "GET /metrics HTTP/1.1\r\nX: " + std::string(64 << 10, 'a');
  int fd = Dial(d.port);
  REQUIRE(fd >= 0);
  (void)!::write(fd, huge.data(), huge.size());
  CHECK_THAT(ReadAll(fd), StartsWith("HTTP/1.1 431 "));
  ::close(fd);

  // Silent connections fill the table; a scraper that comes next is still answered, and the
  // oldest of them is closed to make its room (connections are accepted in the order they came).
  std::vector<int> idle;
  for (int i = 0; i < 8; ++i) idle.push_back(Dial(d.port));
  CHECK_THAT(Get(d.port, "/metrics"), StartsWith("HTTP/1.1 200 OK\r\n"));
  CHECK(ReadAll(idle[0]).empty());
  // The daemon still serves its clients meanwhile.
  CHECK(d.daemon.Connect().Ping().ok());
  // A silent connection is closed at the head's timeout (2 s), before the exchange's (5 s).
  int silent = Dial(d.port);
  REQUIRE(silent >= 0);
  auto start = std::chrono::steady_clock::now();
  CHECK(ReadAll(silent, std::chrono::seconds(8)).empty());
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::milliseconds(4500));
  ::close(silent);
  for (int f : idle) ::close(f);
  // Slots free again: scrapes succeed.
  CHECK(WaitFor([&] { return Get(d.port, "/metrics").starts_with("HTTP/1.1 200"); }));
}

// Another local user holds more silent connections than the endpoint's table, and more that send
// half a request head and stall. Every scrape meanwhile is answered in full, promptly. (One that
// reopens each connection as soon as the daemon closes it can still race scrapers for places:
// see docs/metrics.md.)
TEST_CASE("another uid holding idle connections cannot stop scrapes", "[metrics][hostile]") {
  NeedRoot();
  ServedDaemon d;
  constexpr int kSilent = 12, kHalf = 4;  // the table holds 8
  int stop[2], ready[2];
  REQUIRE(::pipe2(stop, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(ready, O_CLOEXEC) == 0);
  pid_t mallory = Spawn([&] {
    ::close(stop[1]);
    ::close(ready[0]);
    if (::setgroups(0, nullptr) != 0 || ::setresgid(kMallory, kMallory, kMallory) != 0 ||
        ::setresuid(kMallory, kMallory, kMallory) != 0) {
      return 100;
    }
    const std::string half = "GET /metrics HTTP/1.1\r\nHost: loc";
    std::vector<int> held;
    for (int i = 0; i < kSilent + kHalf; ++i) {
      held.push_back(Dial(d.port));
      if (held.back() < 0) return 1;
      if (i >= kSilent) (void)!::write(held.back(), half.data(), half.size());
    }
    (void)!::write(ready[1], "r", 1);
    char c;
    (void)!::read(stop[0], &c, 1);  // until the test closes its end
    return 0;
  });
  ::close(stop[0]);
  ::close(ready[1]);
  // Ends the neighbour however the test ends: it stops when its end of `stop` closes.
  struct Stopper {
    int fd;
    pid_t pid;
    int status = -1;
    int End() {
      if (fd >= 0) ::close(std::exchange(fd, -1)), status = Wait(pid);
      return status;
    }
    ~Stopper() { End(); }
  } stopper{stop[1], mallory};
  char c;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  ::close(ready[0]);
  for (int i = 0; i < 10; ++i) {
    INFO("scrape " << i);
    auto start = std::chrono::steady_clock::now();
    int fd = Dial(d.port);
    REQUIRE(fd >= 0);
    const std::string request = "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n";
    REQUIRE(::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size()));
    std::string answer = ReadAll(fd, std::chrono::seconds(3));
    ::close(fd);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(3));
    REQUIRE_THAT(answer, StartsWith("HTTP/1.1 200 OK\r\n"));
    // In full: the body is as long as the head says.
    std::smatch m;
    REQUIRE(std::regex_search(answer, m, std::regex("Content-Length: ([0-9]+)\r\n")));
    size_t body = answer.find("\r\n\r\n");
    REQUIRE(body != std::string::npos);
    CHECK(answer.size() - body - 4 == std::stoul(m[1]));
    CHECK_THAT(answer, Contains("\ndepot_objects{"));
  }
  CHECK(stopper.End() == 0);  // exit status 0: it had every connection it asked for
}

TEST_CASE("metrics_listen refuses what is not an IP address and a port", "[metrics]") {
  for (const char* bad : {"localhost:9464", "127.0.0.1", "127.0.0.1:99999", ":9464"}) {
    std::string out, err;
    INFO(bad);
    CHECK(Run({DEPOTD_PATH, "--metrics-listen", bad, "--check-config"}, &out, &err) == 2);
    CHECK_THAT(err, Contains("--metrics-listen"));
  }
  std::string out, err;
  CHECK(Run({DEPOTD_PATH, "--metrics-listen", "[::1]:9464", "--check-config"}, &out, &err) == 0);
}

TEST_CASE("a metrics endpoint that cannot start leaves the store serving its spilled objects",
          "[metrics]") {
  // A port already taken: the endpoint cannot bind it, as the shipped unit (no AF_INET) cannot.
  UniqueFd taken(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  REQUIRE(::bind(taken.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(taken.get(), 1) == 0);
  REQUIRE(::getsockname(taken.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const std::string busy = fmt::format("127.0.0.1:{}", ntohs(addr.sin_port));

  const std::string dir = TempDir();
  const std::string socket = dir + "/depot.sock";
  const std::vector<std::string> spill = {"--capacity", "64MiB", "--spill-dir", dir + "/spill"};
  const auto bytes = Pattern(100 << 10, 7);
  Guid guid;
  {
    Daemon d(socket, spill);  // a clean stop writes the object and the manifest
    Client c = d.Connect();
    auto put = c.Put(bytes);
    REQUIRE(put.ok());
    guid = *put;
  }
  {
    auto with_metrics = spill;
    with_metrics.insert(with_metrics.end(), {"--metrics-listen", busy});
    Daemon d(socket, with_metrics);
    Client c = d.Connect();
    auto o = c.Get(guid, std::chrono::seconds(10));
    REQUIRE(o.ok());
    CHECK(std::equal(bytes.begin(), bytes.end(), o->frame(0).begin(), o->frame(0).end()));
    CHECK_THAT(d.Log(), Contains("serving without the metrics endpoint"));
    CHECK_THAT(d.Log(), Contains(busy));
    CHECK(d.Log().find("did not stop cleanly") == std::string::npos);
  }
  // That start took the manifest and gave it back at its clean stop.
  Daemon d(socket, spill);
  CHECK(d.Log().find("did not stop cleanly") == std::string::npos);
  Client c = d.Connect();
  CHECK(c.Get(guid, std::chrono::seconds(10)).ok());
}

TEST_CASE("a real Prometheus scrapes the endpoint and answers queries about a put", "[metrics]") {
  std::string prometheus = Which("prometheus");
  if (prometheus.empty()) {
    Skip("prometheus (Debian package prometheus) is not installed; scripts/deps installs it");
  }
  ServedDaemon d;
  std::string dir = TempDir();
  {
    std::ofstream config(dir + "/prometheus.yml");
    config << "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: depot\n"
              "    static_configs:\n      - targets: ['127.0.0.1:"
           << d.port << "']\n";
  }
  uint16_t web = FreePort();
  pid_t server = Spawn([&] {
    std::string log = dir + "/prometheus.log";
    FILE* f = std::freopen(log.c_str(), "w", stderr);
    (void)f;
    std::string config = "--config.file=" + dir + "/prometheus.yml";
    std::string storage = "--storage.tsdb.path=" + dir + "/data";
    std::string listen = "--web.listen-address=127.0.0.1:" + std::to_string(web);
    ::execl(prometheus.c_str(), prometheus.c_str(), config.c_str(), storage.c_str(), listen.c_str(),
            nullptr);
    return 127;
  });
  struct Stop {
    pid_t pid;
    ~Stop() {
      ::kill(pid, SIGTERM);
      Wait(pid);
    }
  } stop{server};
  // A known put: 4321 bytes sealed, one object.
  REQUIRE(d.daemon.Connect().Put(Pattern(4321, 9)).ok());
  std::string answer;
  bool seen = WaitFor(
      [&] {
        int fd = Dial(web);
        if (fd < 0) return false;
        std::string q =
            "GET /api/v1/query?query=depot_object_bytes%7Bstate%3D%22sealed%22%7D "
            "HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
        (void)!::write(fd, q.data(), q.size());
        answer = ReadAll(fd, std::chrono::seconds(2));
        ::close(fd);
        return answer.find("\"4321\"") != std::string::npos;
      },
      std::chrono::seconds(60));
  std::ifstream log(dir + "/prometheus.log");
  std::stringstream text;
  text << log.rdbuf();
  INFO(answer << "\nprometheus log:\n" << text.str());
  REQUIRE(seen);
  CHECK_THAT(answer, Contains("\"job\":\"depot\""));
}
