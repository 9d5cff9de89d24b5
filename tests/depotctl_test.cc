// depotctl against a real daemon: what it prints, and its exit codes.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>

#include "daemon/shm_source.h"
#include "tests/daemon_fixture.h"
#include "tests/other_users.h"

using namespace depot;
using namespace depot::test;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

TEST_CASE("depotctl puts a file and gets it back", "[depotctl]") {
  Daemon d;
  std::string dir = TempDir();
  auto data = Pattern(3 << 20, 4);
  {
    std::ofstream f(dir + "/in.bin", std::ios::binary);
    f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  }
  std::string out, err;
  REQUIRE(Run({DEPOTCTL_PATH, "--socket", d.socket(), "put", dir + "/in.bin", "--name", "blob",
               "--metadata", "hello meta"},
              &out, &err) == 0);
  auto guid = Guid::Parse(Trim(out));
  INFO(out << err);
  REQUIRE(guid);  // stdout is the GUID alone

  REQUIRE(Run({DEPOTCTL_PATH, "--socket", d.socket(), "get", guid->ToString(), "-o",
               dir + "/out.bin"}) == 0);
  std::ifstream f(dir + "/out.bin", std::ios::binary);
  std::vector<char> back((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  REQUIRE(back.size() == data.size());
  CHECK(std::memcmp(back.data(), data.data(), data.size()) == 0);

  // stdin works too, and get writes to stdout by default.
  REQUIRE(Run({DEPOTCTL_PATH, "--socket", d.socket(), "put", "-"}, &out, nullptr, "from stdin") ==
          0);
  std::string small = Trim(out);
  REQUIRE(Run({DEPOTCTL_PATH, "--socket", d.socket(), "get", small}, &out) == 0);
  CHECK(out == "from stdin");

  REQUIRE(Run({DEPOTCTL_PATH, "--socket", d.socket(), "stat", guid->ToString()}, &out) == 0);
  CHECK(out.find("name:      blob") != std::string::npos);
  CHECK(out.find("3.0 MiB") != std::string::npos);
  CHECK(out.find("\"hello meta\"") != std::string::npos);

  REQUIRE(Run({DEPOTCTL_PATH, "--socket", d.socket(), "ls"}, &out) == 0);
  CHECK(out.find(guid->ToString()) != std::string::npos);
  CHECK(out.find(small) != std::string::npos);
  CHECK(out.find("blob") != std::string::npos);

  REQUIRE(Run({DEPOTCTL_PATH, "--socket", d.socket(), "rm", guid->ToString(), small}) == 0);
  REQUIRE(Run({DEPOTCTL_PATH, "--socket", d.socket(), "ls", "--json"}, &out) == 0);
  CHECK(Trim(out) == "[]");
}

TEST_CASE("depotctl status and ls speak JSON", "[depotctl]") {
  Daemon d;
  Client c = d.Connect();
  for (int i = 0; i < 3; ++i) REQUIRE(c.Put(Pattern(1000, i)).ok());
  std::string out;
  REQUIRE(Run({DEPOTCTL_PATH, "--socket", d.socket(), "--json", "status"}, &out) == 0);
  CHECK(out.find("\"objects\":{\"creating\":0,\"sealed\":3,\"deleted\":0}") != std::string::npos);
  CHECK(out.find("\"capacity\":268435456") != std::string::npos);
  CHECK(out.find("\"daemon_pid\":" + std::to_string(d.pid())) != std::string::npos);
  REQUIRE(Run({DEPOTCTL_PATH, "--socket", d.socket(), "ls", "--json", "--limit", "2"}, &out) == 0);
  size_t count = 0;
  for (size_t p = out.find("\"guid\""); p != std::string::npos; p = out.find("\"guid\"", p + 1))
    ++count;
  CHECK(count == 2);
  REQUIRE(Run({DEPOTCTL_PATH, "--socket", d.socket(), "status"}, &out) == 0);
  CHECK(out.find("3 sealed") != std::string::npos);
}

TEST_CASE("depotctl fails with a one-line error and a documented exit code", "[depotctl]") {
  Daemon d;
  std::string out, err;
  std::string unknown = Guid::Random().ToString();
  CHECK(Run({DEPOTCTL_PATH, "--socket", d.socket(), "get", unknown}, &out, &err) == 3);
  CHECK(err.find(unknown + " does not exist") != std::string::npos);
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  CHECK(Run({DEPOTCTL_PATH, "--socket", d.socket(), "rm", unknown}, &out, &err) == 3);
  CHECK(Run({DEPOTCTL_PATH, "--socket", d.socket(), "stat", "not-a-guid"}, &out, &err) == 2);
  CHECK(Run({DEPOTCTL_PATH, "--socket", d.socket(), "frobnicate"}, &out, &err) == 2);
  CHECK(Run({DEPOTCTL_PATH, "--socket", d.socket(), "put", "/nonexistent/file"}, &out, &err) == 3);

  std::string nowhere = TempDir() + "/none.sock";
  CHECK(Run({DEPOTCTL_PATH, "--socket", nowhere, "status"}, &out, &err) == 4);
  CHECK(err.find("no depotd is listening at " + nowhere) != std::string::npos);
  CHECK(err.find("systemctl status depotd") != std::string::npos);
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
}

TEST_CASE(
    "a user the socket's mode shuts out is told so and how to join its group, not that "
    "no daemon runs",
    "[depotctl]") {
  NeedRoot();
  // The service's socket as depotd.socket makes it: mode 0660, reachable, closed to other groups.
  std::string dir = TempDir();
  REQUIRE(::chmod(dir.c_str(), 0755) == 0);
  Daemon d(dir + "/depot.sock", {"--capacity", "64MiB", "--socket-mode", "0660"});
  int rc = RunAs(kMallory, kMallory, {}, [&] {
    auto c = Client::Connect({d.socket(), "outsider"});
    if (c.ok()) return 10;
    std::fprintf(stderr, "%s\n", c.status().ToString().c_str());
    if (!c.status().IsPermissionDenied()) return 11;
    std::string out, err;
    int code = Run({DEPOTCTL_PATH, "--socket", d.socket(), "status"}, &out, &err);
    std::fprintf(stderr, "depotctl: %d %s", code, err.c_str());
    if (code != 1) return 12;  // an error, not "no daemon" (4)
    bool says_how =
        err.find("permission denied connecting to depotd at " + d.socket()) != std::string::npos &&
        err.find("usermod -aG root") != std::string::npos &&
        err.find("is the service running") == std::string::npos;
    return says_how && std::count(err.begin(), err.end(), '\n') == 1 ? 0 : 13;
  });
  CHECK(rc == 0);
}

TEST_CASE("depotctl ls filters by state and name and sorts", "[depotctl]") {
  Daemon d;
  Client c = d.Connect();
  auto named = [&](const char* name, size_t size) {
    CreateOptions o;
    o.name = name;
    auto id = c.Put(Pattern(size, 1), o);
    REQUIRE(id.ok());
    return id->ToString();
  };
  std::string small = named("beta-small", 100), big = named("alpha-big", 300000),
              mid = named("beta-mid", 20000);
  CreateOptions draft_opts;
  draft_opts.name = "unfinished";
  auto draft = c.Create({10}, draft_opts);
  REQUIRE(draft.ok());
  std::string out;
  auto ls = [&](std::vector<std::string> args) {
    std::vector<std::string> argv{DEPOTCTL_PATH, "--socket", d.socket(), "ls"};
    argv.insert(argv.end(), args.begin(), args.end());
    REQUIRE(Run(argv, &out) == 0);
    return out;
  };
  auto order = [](const std::string& text, std::vector<std::string> ids) {
    size_t at = 0;
    for (const auto& id : ids) {
      size_t p = text.find(id, at);
      if (p == std::string::npos) return false;
      at = p;
    }
    return true;
  };
  out = ls({"--state", "creating"});
  CHECK_THAT(out, Contains(draft->guid().ToString()) && !Contains(small));
  out = ls({"--name", "beta-*"});
  CHECK_THAT(out, Contains(small) && Contains(mid) && !Contains(big));
  out = ls({"--sort", "size", "--limit", "2", "--state", "sealed"});
  CHECK(order(out, {big, mid}));
  CHECK_THAT(out, !Contains(small));
  out = ls({"--sort", "name", "--state", "sealed"});
  CHECK(order(out, {big, mid, small}));
  CHECK_THAT(out, Contains("1 host"));
  CHECK(Run({DEPOTCTL_PATH, "--socket", d.socket(), "ls", "--sort", "colour"}, &out) == 2);
}

TEST_CASE("depotctl cat writes the bytes to stdout", "[depotctl]") {
  Daemon d;
  Client c = d.Connect();
  std::string text = "cat me";
  auto id = c.Put(std::as_bytes(std::span(text)));
  REQUIRE(id.ok());
  std::string out, err;
  REQUIRE(Run({DEPOTCTL_PATH, "--socket", d.socket(), "cat", id->ToString()}, &out) == 0);
  CHECK(out == text);
  CHECK(Run({DEPOTCTL_PATH, "--socket", d.socket(), "cat", Guid::Random().ToString()}, &out,
            &err) == 3);
  CHECK_THAT(err, StartsWith("depotctl: cat "));
}

TEST_CASE("depotctl watch prints one line per event", "[depotctl]") {
  Daemon d;
  Client c = d.Connect();
  std::string dir = TempDir();
  pid_t watcher = Spawn([&] {
    std::string out;
    int rc = Run({DEPOTCTL_PATH, "--socket", d.socket(), "--json", "watch", "--count", "3"}, &out);
    std::ofstream(dir + "/events") << out;
    return rc;
  });
  // Wait until the watcher's subscription is in place, then make three events.
  REQUIRE(WaitFor([&] {
    auto clients = c.Clients();
    return clients.ok() && std::any_of(clients->begin(), clients->end(),
                                       [](const ClientInfo& k) { return k.subscribed; });
  }));
  CreateOptions o;
  o.name = "watched";
  auto id = c.Put(Pattern(1000, 1), o);  // created, sealed
  REQUIRE(id.ok());
  REQUIRE(c.Delete(*id).ok());  // deleted
  REQUIRE(WEXITSTATUS(Wait(watcher)) == 0);
  std::ifstream in(dir + "/events");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  REQUIRE(lines.size() == 3);
  CHECK_THAT(lines[0], StartsWith("{\"event\":\"created\"") && Contains(id->ToString()) &&
                           Contains("\"name\":\"watched\"") && Contains("\"size\":1000"));
  CHECK_THAT(lines[1], StartsWith("{\"event\":\"sealed\""));
  CHECK_THAT(lines[2], StartsWith("{\"event\":\"deleted\"") &&
                           Contains("\"pid\":" + std::to_string(::getpid())));
}

TEST_CASE("depotctl clients shows what each client holds", "[depotctl]") {
  Daemon d;
  Client holder = Client::Connect({d.socket(), "holder"}).value();
  auto id = holder.Put(Pattern(300000, 1));
  REQUIRE(id.ok());
  auto obj = holder.Get(*id);
  REQUIRE(obj.ok());
  std::string out;
  REQUIRE(Run({DEPOTCTL_PATH, "--socket", d.socket(), "--json", "clients"}, &out) == 0);
  CHECK_THAT(out, Contains("\"name\":\"holder\"") && Contains("\"references\":1") &&
                      Contains("\"bytes_held\":300000") &&
                      Contains("\"pid\":" + std::to_string(::getpid())) &&
                      Contains("\"name\":\"depotctl\""));
  REQUIRE(Run({DEPOTCTL_PATH, "--socket", d.socket(), "clients"}, &out) == 0);
  CHECK_THAT(out, Contains("holder") && Contains("293.0 KiB") && Contains("PROCESS"));
}

TEST_CASE("depotctl ping reports the round trip", "[depotctl]") {
  Daemon d;
  std::string out;
  REQUIRE(Run({DEPOTCTL_PATH, "--socket", d.socket(), "ping", "--count", "5"}, &out) == 0);
  CHECK_THAT(out, StartsWith("5 pings to " + d.socket() + ": min "));
  REQUIRE(Run({DEPOTCTL_PATH, "--socket", d.socket(), "--json", "ping"}, &out) == 0);
  CHECK_THAT(out, StartsWith("{\"count\":10,\"min_ns\":"));
}

TEST_CASE("depotctl status counts requests and errors", "[depotctl]") {
  Daemon d;
  Client c = d.Connect();
  CHECK(c.Get(Guid::Random()).status().IsNotFound());
  CHECK(c.Get(Guid::Random()).status().IsNotFound());
  CHECK(c.Create(std::vector<uint64_t>{}).status().IsInvalidArgument());
  std::string out;
  REQUIRE(Run({DEPOTCTL_PATH, "--socket", d.socket(), "--json", "status"}, &out) == 0);
  CHECK_THAT(out, Contains("\"errors\":{\"InvalidArgument\":1}"));  // a poll's NotFound is a result
  CHECK_THAT(out, Contains("\"fragmentation\":") && Contains("\"requests\":"));
  REQUIRE(Run({DEPOTCTL_PATH, "--socket", d.socket(), "status"}, &out) == 0);
  CHECK_THAT(out, Contains("1 errors (InvalidArgument 1)") && Contains("fragmentation 0%"));
}

TEST_CASE("verify: a checksum recorded at seal catches bytes changed afterwards", "[depotctl]") {
  Daemon d;
  Client c = d.Connect();
  CreateOptions with;
  with.checksum = true;
  auto large = c.Put(Pattern(200000, 1), with);  // created, written in place, then sealed
  auto small = c.Put(Pattern(1000, 2), with);    // sent inline with its seal
  auto plain = c.Put(Pattern(1000, 3));
  REQUIRE((large.ok() && small.ok() && plain.ok()));
  for (const Guid& g : {*large, *small}) {
    auto obj = c.Get(g);
    REQUIRE(obj.ok());
    CHECK(obj->checksum().has_value());
    CHECK(obj->Verify().ok());
  }
  CHECK(c.Get(*plain)->Verify().IsInvalidArgument());
  std::string out;
  REQUIRE(Ctl(d, {"verify", large->ToString(), small->ToString()}, &out) == 0);
  CHECK_THAT(out, Contains(large->ToString() + ": OK (xxh3 "));
  REQUIRE(Ctl(d, {"stat", large->ToString()}, &out) == 0);
  CHECK_THAT(out, Contains("checksum:  xxh3 "));
  CHECK(Ctl(d, {"verify", plain->ToString()}, &out) == 1);
  CHECK_THAT(out, Contains("sealed without a checksum"));

  // Change one byte behind the store's back, through the daemon's own descriptor of the segment
  // (as a stray writer of the daemon's uid could).
  auto info = c.Stat(*large);
  REQUIRE(info.ok());
  const FrameInfo& f = info->frames.at(0);
  std::string name = ShmSource::NamePrefix(d.socket()) + std::to_string(f.segment);
  std::string path = SegmentsOf(d.pid(), name).at(name);
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  char b = 0;
  REQUIRE(::pread(fd, &b, 1, static_cast<off_t>(f.offset + 4321)) == 1);
  b = static_cast<char>(b ^ 0x01);
  REQUIRE(::pwrite(fd, &b, 1, static_cast<off_t>(f.offset + 4321)) == 1);
  ::close(fd);
  Client fresh = d.Connect();
  Status st = fresh.Get(*large)->Verify();
  CHECK(st.IsDataLoss());
  CHECK_THAT(st.message(), Contains("recorded at seal"));
  CHECK(Ctl(d, {"verify", large->ToString()}, &out) == 1);
  CHECK_THAT(out, Contains("DataLoss"));
  REQUIRE(Ctl(d, {"--json", "verify", small->ToString()}, &out) == 0);
  CHECK_THAT(out, Contains("\"ok\":true"));
}
