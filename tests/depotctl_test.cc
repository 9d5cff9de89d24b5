// depotctl against a real daemon: what it prints, and its exit codes.
#include <fstream>

#include <catch2/catch.hpp>

#include "tests/daemon_fixture.h"

using namespace depot;
using namespace depot::test;

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
               "--metadata", "hello meta"}, &out, &err) == 0);
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
  REQUIRE(Run({DEPOTCTL_PATH, "--socket", d.socket(), "put", "-"}, &out, nullptr, "from stdin") == 0);
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
  for (size_t p = out.find("\"guid\""); p != std::string::npos; p = out.find("\"guid\"", p + 1)) ++count;
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
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
}
