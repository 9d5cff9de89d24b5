// depotd run with a configuration: --check-config, --print-config, the socket's mode and group,
// limits, eviction off, and SIGHUP re-reading the log level.
#include <grp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>

#include "common/system_memory.h"
#include "common/unix_socket.h"
#include "proto/fd_passing.h"
#include "proto/wire.h"
#include "tests/daemon_fixture.h"

using namespace depot;
using namespace depot::test;
using Catch::Matchers::Contains;

namespace {

std::string WriteConfig(const std::string& dir, const std::string& text) {
  std::string path = dir + "/depotd.conf";
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("depotd --check-config accepts a good file and names the line of a bad one", "[config]") {
  std::string dir = TempDir();
  std::string out, err;
  std::string good = WriteConfig(dir, "capacity = 64MiB\nmax_clients = 8\n");
  CHECK(Run({DEPOTD_PATH, "--config", good, "--check-config"}, &out, &err) == 0);
  CHECK(out == "configuration OK\n");

  std::string bad = WriteConfig(dir, "capacity = 64MiB\nsegment_size = huge\n");
  CHECK(Run({DEPOTD_PATH, "--config", bad, "--check-config"}, &out, &err) == 2);
  CHECK_THAT(err, Contains(bad + ":2: segment_size = huge"));
  // The daemon itself refuses to start with it, before touching the socket.
  CHECK(Run({DEPOTD_PATH, "--config", bad, "--socket", dir + "/d.sock"}, &out, &err) == 2);
  CHECK(access((dir + "/d.sock").c_str(), F_OK) != 0);

  std::string no_group = WriteConfig(dir, "socket_group = no-such-group-here\n");
  CHECK(Run({DEPOTD_PATH, "--config", no_group, "--check-config"}, &out, &err) == 2);
  CHECK_THAT(err, Contains("socket_group no-such-group-here: no such group"));

  // Keys that cannot go together fail the check, not the start that follows it.
  std::string clash = WriteConfig(dir, "prefault = on\nnamespaces = per_user\n");
  CHECK(Run({DEPOTD_PATH, "--config", clash, "--check-config"}, &out, &err) == 2);
  CHECK_THAT(err, Contains("cannot be combined with namespaces = per_user"));
}

TEST_CASE("depotd --print-config shows flags over the file", "[config]") {
  std::string dir = TempDir();
  std::string conf = WriteConfig(dir, "capacity = 64MiB\nprefault = on\nmax_frames = 4\n");
  std::string out;
  REQUIRE(Run({DEPOTD_PATH, "--config", conf, "--max-frames", "7", "--print-config"}, &out) == 0);
  CHECK_THAT(out, Contains("capacity = 67108864\n") && Contains("prefault = on\n") &&
                      Contains("max_frames = 7\n") && Contains("eviction = on\n"));
}

TEST_CASE("the socket gets the configured mode and group", "[config]") {
  group* g = ::getgrnam("daemon");
  if (g == nullptr) g = ::getgrgid(::getgid());
  REQUIRE(g != nullptr);
  std::string name = g->gr_name;
  gid_t gid = g->gr_gid;
  Daemon d({"--capacity", "64MiB", "--socket-mode", "0600", "--socket-group", name});
  struct stat st {};
  REQUIRE(::stat(d.socket().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(st.st_gid == gid);
}

TEST_CASE("connections beyond max_clients are refused with a reason", "[config]") {
  Daemon d({"--capacity", "64MiB", "--max-clients", "2"});
  Client a = d.Connect();
  Client b = d.Connect();
  auto c = Client::Connect({d.socket(), "third"});
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().IsUnavailable());
  CHECK_THAT(c.status().message(), Contains("at most 2 clients"));
  CHECK(a.GetStatus().ok());  // the others carry on
  CHECK_THAT(d.Log(), Contains("max_clients"));
}

TEST_CASE("configured limits on frames, metadata and message size are enforced", "[config]") {
  Daemon d({"--capacity", "64MiB", "--max-frames", "2", "--max-metadata", "100",
            "--max-message-size", "1MiB"});
  Client c = d.Connect();
  CHECK(c.Create({1, 2}).ok());
  auto three = c.Create({1, 2, 3});
  CHECK(three.status().IsInvalidArgument());
  CHECK_THAT(three.status().message(), Contains("1 to 2 frames"));
  std::vector<std::byte> meta(101);
  CreateOptions opts;
  opts.metadata = meta;
  CHECK(c.Create({1}, opts).status().IsInvalidArgument());

  // After hello, a header announcing more than max_message_size closes that connection with the
  // limit named.
  UniqueFd fd = ConnectUnix(d.socket());
  REQUIRE(fd.valid());
  flatbuffers::FlatBufferBuilder fbb(64);
  fbb.Finish(wire::CreateHelloRequest(fbb, proto::kProtocolVersion));
  auto hello = proto::Encode(static_cast<uint16_t>(proto::MsgType::kHello), 1, fbb);
  REQUIRE(::send(fd.get(), hello.data(), hello.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(hello.size()));
  proto::Header reply{};
  REQUIRE(::recv(fd.get(), &reply, sizeof reply, MSG_WAITALL) == sizeof reply);
  std::vector<uint8_t> hello_body(reply.length);
  REQUIRE(::recv(fd.get(), hello_body.data(), hello_body.size(), MSG_WAITALL) ==
          static_cast<ssize_t>(hello_body.size()));
  REQUIRE(reply.type == proto::ReplyType(proto::MsgType::kHello));
  proto::Header h{proto::kMagic,
                  proto::kProtocolVersion,
                  static_cast<uint16_t>(proto::MsgType::kPing),
                  2,
                  2u << 20,
                  0};
  REQUIRE(::send(fd.get(), &h, sizeof h, MSG_NOSIGNAL) == sizeof h);
  REQUIRE(::recv(fd.get(), &reply, sizeof reply, MSG_WAITALL) == sizeof reply);
  std::vector<uint8_t> body(reply.length);
  REQUIRE(::recv(fd.get(), body.data(), body.size(), MSG_WAITALL) ==
          static_cast<ssize_t>(body.size()));
  REQUIRE(proto::VerifyBody(reply.type, body));
  CHECK_THAT(proto::Body<wire::ErrorReply>(body)->message()->str(), Contains("limit of 1048576"));
}

TEST_CASE("with eviction off evictable objects stay and puts fail with StoreFull", "[config]") {
  Daemon d({"--capacity", "8MiB", "--segment-size", "8MiB", "--eviction=off"});
  Client c = d.Connect();
  CreateOptions evictable;
  evictable.evictable = true;
  auto a = c.Put(Pattern(3 << 20, 1), evictable);
  auto b = c.Put(Pattern(3 << 20, 2), evictable);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(c.Put(Pattern(3 << 20, 3), evictable).status().IsStoreFull());
  CHECK(*c.Contains(*a));
  CHECK(*c.Contains(*b));
  CHECK(c.GetStatus()->evictions == 0);
}

TEST_CASE("SIGHUP re-reads the log level from the config file", "[config]") {
  std::string dir = TempDir();
  std::string conf = WriteConfig(dir, "log_level = warn\ncapacity = 64MiB\n");
  Daemon d({"--config", conf});
  d.Connect();
  CHECK_THAT(d.Log(), !Contains("client connected"));  // info lines are off at warn

  WriteConfig(dir, "log_level = info\ncapacity = 64MiB\n");
  ::kill(d.pid(), SIGHUP);
  REQUIRE(WaitFor([&] { return d.Log().find("log level is now info") != std::string::npos; }));
  d.Connect();
  CHECK_THAT(d.Log(), Contains("client connected"));

  WriteConfig(dir, "log_level = loud\n");
  ::kill(d.pid(), SIGHUP);
  REQUIRE(WaitFor([&] { return d.Log().find("log level unchanged") != std::string::npos; }));
  CHECK_THAT(d.Log(), Contains(conf + ":1: log_level = loud"));

  // To a level that hides info lines: the reload is still said, with the old and new level.
  WriteConfig(dir, "log_level = error\ncapacity = 64MiB\n");
  ::kill(d.pid(), SIGHUP);
  CHECK(WaitFor(
      [&] { return d.Log().find("SIGHUP: log level info -> error") != std::string::npos; }));
}

TEST_CASE("the log says when the object index cannot have huge pages, and only then", "[config]") {
  bool off = !ShmemHugePagesAllowed();
  INFO("shmem_enabled: " << ShmemHugePagePolicy());
  const std::string line = "the object index is on 4 KiB pages";
  Daemon d;
  d.Connect();
  CHECK((d.Log().find(line) != std::string::npos) == off);
  Daemon without({"--index-entries", "0"});  // no index: nothing to say of it
  without.Connect();
  CHECK(without.Log().find(line) == std::string::npos);
}
