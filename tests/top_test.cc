// depotctl top in a real terminal (tmux: a detached session, keys sent with send-keys, the
// screen read with capture-pane) and as plain text when stdout is not a terminal.
#include <fmt/format.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "tests/daemon_fixture.h"

using namespace depot;
using namespace depot::test;
using Catch::Matchers::Contains;

namespace {

std::string Tmux() {
  std::string out;
  if (Run({"sh", "-c", "command -v tmux"}, &out) != 0) return "";
  return out.substr(0, out.find('\n'));
}

}  // namespace

TEST_CASE("top draws in a terminal and quits on q", "[top]") {
  std::string tmux = Tmux();
  if (tmux.empty()) Skip("tmux (Debian package tmux) is not installed; scripts/deps installs it");
  Daemon d;
  Client c = d.Connect();
  REQUIRE(c.Put(Pattern(5 << 20, 1), Named("largest-one")).ok());
  REQUIRE(c.Put(Pattern(10, 2), Named("small-one")).ok());
  // A server of its own (-L), so that no other tmux is touched.
  std::string server = fmt::format("depot-top-test-{}", ::getpid());
  std::string command = fmt::format("{} --socket {} top --interval 200", DEPOTCTL_PATH, d.socket());
  REQUIRE(Run({tmux, "-L", server, "new-session", "-d", "-s", "top", "-x", "150", "-y", "50",
               command}) == 0);
  struct KillServer {
    std::string tmux, server;
    ~KillServer() { Run({tmux, "-L", server, "kill-server"}); }
  } cleanup{tmux, server};
  std::string screen;
  auto capture = [&] {
    Run({tmux, "-L", server, "capture-pane", "-p", "-t", "top"}, &screen);
    return screen;
  };
  CHECK(WaitFor([&] { return capture().find("largest-one") != std::string::npos; }));
  INFO(screen);
  CHECK_THAT(screen, Contains("host pool:"));
  CHECK_THAT(screen, Contains("busiest clients"));
  CHECK_THAT(screen, Contains("q quits"));
  // The rates appear from the second refresh on.
  CHECK(WaitFor([&] { return capture().find("puts/s") != std::string::npos; }));
  // The largest object comes first.
  CHECK(screen.find("largest-one") < screen.find("small-one"));
  REQUIRE(Run({tmux, "-L", server, "send-keys", "-t", "top", "q"}) == 0);
  // The session ends with the program.
  CHECK(WaitFor([&] { return Run({tmux, "-L", server, "has-session", "-t", "top"}) != 0; }));
}

TEST_CASE("top prints plain snapshots when stdout is not a terminal", "[top]") {
  Daemon d;
  REQUIRE(d.Connect().Put(Pattern(100, 1), Named("plain-one")).ok());
  std::string out, err;
  REQUIRE(Run({DEPOTCTL_PATH, "--socket", d.socket(), "top", "--interval", "100", "--count", "2"},
              &out, &err) == 0);
  INFO(out << err);
  size_t first = out.find("host pool:");
  REQUIRE(first != std::string::npos);
  CHECK(out.find("host pool:", first + 1) != std::string::npos);  // two snapshots
  CHECK_THAT(out, Contains("plain-one"));
  CHECK_THAT(out, Contains("puts/s"));
  CHECK(out.find('\x1b') == std::string::npos);  // no terminal control
}
