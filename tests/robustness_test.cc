// Bad input gets a clear error and harms nobody else: garbage on the socket, wrong versions,
// oversized or malformed messages, limits, a second daemon, a crashed daemon, a full /dev/shm.
#include <dirent.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <set>

#include <catch2/catch.hpp>

#include "daemon/host_pool.h"
#include "proto/fd_passing.h"
#include "proto/wire.h"
#include "tests/daemon_fixture.h"

using namespace depot;
using namespace depot::test;
using namespace std::chrono_literals;

namespace {

// A raw connection that speaks bytes, not the client library.
class Raw {
 public:
  explicit Raw(const std::string& path) : fd_(proto::ConnectUnix(path)) {
    REQUIRE(fd_.valid());
    timeval tv{10, 0};
    ::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  void Write(std::span<const uint8_t> bytes) {
    REQUIRE(::send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(bytes.size()));
  }
  void Write(const std::string& s) { Write({reinterpret_cast<const uint8_t*>(s.data()), s.size()}); }
  void Hello(uint16_t version = proto::kProtocolVersion) {
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreateHelloRequest(fbb, version, fbb.CreateString("raw")));
    Write(proto::Encode(static_cast<uint16_t>(proto::MsgType::kHello), 1, fbb));
  }
  // Reads one message; false at end of stream.
  bool Read(proto::Header& h, std::vector<uint8_t>& body) {
    if (!ReadExactly(&h, sizeof h)) return false;
    body.resize(h.length);
    return ReadExactly(body.data(), body.size());
  }
  // Reads the error that ends the connection, then checks that the connection did end.
  Status ReadFinalError() {
    proto::Header h;
    std::vector<uint8_t> body;
    while (Read(h, body)) {
      if (h.type != static_cast<uint16_t>(proto::MsgType::kError)) continue;
      REQUIRE(proto::VerifyBody(h.type, body));
      auto* e = proto::Body<wire::ErrorReply>(body);
      Status st(static_cast<Status::Code>(e->code()), e->message()->str());
      CHECK(!Read(h, body));  // closed after the error
      return st;
    }
    FAIL("the connection ended without an error");
    return Status();
  }

 private:
  bool ReadExactly(void* p, size_t n) {
    auto* b = static_cast<uint8_t*>(p);
    while (n > 0) {
      ssize_t got = ::recv(fd_.get(), b, n, 0);
      if (got <= 0) return false;
      b += got;
      n -= static_cast<size_t>(got);
    }
    return true;
  }
  proto::UniqueFd fd_;
};

std::vector<uint8_t> HeaderBytes(proto::Header h) {
  std::vector<uint8_t> v(sizeof h);
  std::memcpy(v.data(), &h, sizeof h);
  return v;
}

std::set<std::string> ShmNames(const std::string& prefix) {
  std::set<std::string> names;
  DIR* dir = ::opendir("/dev/shm");
  while (dirent* e = ::readdir(dir)) {
    if (std::string_view(e->d_name).starts_with(prefix)) names.insert(e->d_name);
  }
  ::closedir(dir);
  return names;
}

// ctest reports exit code 77 as skipped (SKIP_RETURN_CODE), with this line as the reason.
[[noreturn]] void Skip(const std::string& why) {
  std::printf("SKIPPED: %s\n", why.c_str());
  std::fflush(stdout);
  std::_Exit(77);
}

}  // namespace

TEST_CASE("garbage on the socket closes that connection only", "[robustness]") {
  Daemon d;
  Client good = d.Connect();
  auto id = good.Put(Pattern(1000, 1));
  REQUIRE(id.ok());

  Raw raw(d.socket());
  raw.Write("GET / HTTP/1.1\r\nHost: depot\r\n\r\n");
  Status st = raw.ReadFinalError();
  CHECK(st.IsProtocolError());
  CHECK(st.message().find("bad magic") != std::string::npos);

  // The other client and its objects are untouched.
  auto obj = good.Get(*id);
  REQUIRE(obj.ok());
  CHECK(good.Put(Pattern(10, 2)).ok());
  CHECK(d.Log().find("bad magic") != std::string::npos);
}

TEST_CASE("a peer speaking another protocol version is told both versions", "[robustness]") {
  Daemon d;
  SECTION("in the header") {
    Raw raw(d.socket());
    proto::Header h{proto::kMagic, 7, static_cast<uint16_t>(proto::MsgType::kHello), 1, 0, 0};
    raw.Write(HeaderBytes(h));
    Status st = raw.ReadFinalError();
    CHECK(st.IsProtocolError());
    CHECK(st.message().find("version 7") != std::string::npos);
    CHECK(st.message().find("version 1") != std::string::npos);
  }
  SECTION("in the hello") {
    Raw raw(d.socket());
    raw.Hello(9);
    Status st = raw.ReadFinalError();
    CHECK(st.IsProtocolError());
    CHECK(st.message().find("version 9") != std::string::npos);
    CHECK(st.message().find("version 1") != std::string::npos);
  }
  CHECK(d.Connect().GetStatus().ok());
}

TEST_CASE("malformed messages are refused with ProtocolError", "[robustness]") {
  Daemon d;
  Raw raw(d.socket());
  SECTION("a request before hello") {
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreateEmptyReply(fbb));
    raw.Write(proto::Encode(static_cast<uint16_t>(proto::MsgType::kStatus), 5, fbb));
    Status st = raw.ReadFinalError();
    CHECK(st.IsProtocolError());
    CHECK(st.message().find("hello") != std::string::npos);
  }
  SECTION("a body that does not verify") {
    raw.Hello();
    proto::Header h{proto::kMagic, proto::kProtocolVersion,
                    static_cast<uint16_t>(proto::MsgType::kCreate), 2, 16, 0};
    auto bytes = HeaderBytes(h);
    for (int i = 0; i < 16; ++i) bytes.push_back(0xff);
    raw.Write(bytes);
    Status st = raw.ReadFinalError();
    CHECK(st.IsProtocolError());
    CHECK(st.message().find("create") != std::string::npos);
  }
  SECTION("a message larger than the limit") {
    raw.Hello();
    proto::Header h{proto::kMagic, proto::kProtocolVersion,
                    static_cast<uint16_t>(proto::MsgType::kCreate), 2, 1u << 30, 0};
    raw.Write(HeaderBytes(h));
    Status st = raw.ReadFinalError();
    CHECK(st.IsProtocolError());
    CHECK(st.message().find("exceeds the limit") != std::string::npos);
  }
  SECTION("an unknown message type") {
    raw.Hello();
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreateEmptyReply(fbb));
    raw.Write(proto::Encode(999, 3, fbb));
    CHECK(raw.ReadFinalError().IsProtocolError());
  }
  SECTION("a reply sent as a request") {
    raw.Hello();
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreateEmptyReply(fbb));
    raw.Write(proto::Encode(proto::ReplyType(proto::MsgType::kSeal), 3, fbb));
    CHECK(raw.ReadFinalError().IsProtocolError());
  }
  CHECK(d.Connect().GetStatus().ok());
}

TEST_CASE("a peer that sends half a frame and leaves harms nobody", "[robustness]") {
  Daemon d;
  Client good = d.Connect();
  {
    Raw raw(d.socket());
    raw.Hello();
    proto::Header h{proto::kMagic, proto::kProtocolVersion,
                    static_cast<uint16_t>(proto::MsgType::kStatus), 2, 64, 0};
    raw.Write(HeaderBytes(h));  // the header promises 64 bytes that never come
  }
  REQUIRE(WaitFor([&] { return good.GetStatus()->clients == 1; }));
  CHECK(good.Put(Pattern(100, 1)).ok());
}

TEST_CASE("limits are answered with InvalidArgument", "[robustness]") {
  Daemon d;
  Client c = d.Connect();
  std::vector<uint64_t> many(proto::kMaxFrames + 1, 64);
  auto frames = c.Create(many);
  CHECK(frames.status().IsInvalidArgument());
  CHECK(frames.status().message().find("frames") != std::string::npos);

  std::vector<std::byte> meta(proto::kMaxMetadataSize + 1);
  CreateOptions big_meta;
  big_meta.metadata = meta;
  CHECK(c.Create({64}, big_meta).status().IsInvalidArgument());

  CreateOptions long_name;
  long_name.name = std::string(proto::kMaxNameSize + 1, 'x');
  CHECK(c.Create({64}, long_name).status().IsInvalidArgument());

  std::vector<Guid> guids(proto::kMaxGuidsPerRequest + 1, Guid::Random());
  auto results = c.Get(guids);
  CHECK(results.front().status().IsInvalidArgument());
  CHECK(c.Create(std::vector<uint64_t>{}).status().IsInvalidArgument());
  // The connection survives every one of these.
  CHECK(c.Put(Pattern(10, 1)).ok());
}

TEST_CASE("a second daemon on the same socket refuses to start", "[robustness]") {
  Daemon first;
  std::string out, err;
  int rc = Run({DEPOTD_PATH, "--socket", first.socket(), "--capacity", "64MiB"}, &out, &err);
  CHECK(rc == 1);
  CHECK(err.find("already serving " + first.socket()) != std::string::npos);
  CHECK(err.find(std::to_string(first.pid())) != std::string::npos);
  CHECK(first.Connect().GetStatus().ok());  // the first one was not disturbed
}

TEST_CASE("a stale socket file is replaced", "[robustness]") {
  std::string dir = TempDir();
  std::string path = dir + "/depot.sock";
  {
    proto::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  }  // closed without unlinking: a socket file nobody listens on
  Daemon d(path, {"--capacity", "64MiB"});
  CHECK(d.Connect().GetStatus().ok());
  CHECK(d.Log().find("replaced stale socket") != std::string::npos);
}

TEST_CASE("a daemon restarted after SIGKILL removes the segments of its predecessor",
          "[robustness]") {
  std::string dir = TempDir();
  std::string path = dir + "/depot.sock";
  std::string prefix = HostPool::NamePrefix(path);
  {
    Daemon crashed(path, {"--capacity", "64MiB"});
    auto id = crashed.Connect().Put(Pattern(1 << 20, 1));
    REQUIRE(id.ok());
    REQUIRE(ShmNames(prefix).size() == 1);
    crashed.Stop(SIGKILL);
  }
  REQUIRE(ShmNames(prefix).size() == 1);  // left behind
  Daemon restarted(path, {"--capacity", "64MiB"});
  CHECK(ShmNames(prefix).empty());
  CHECK(restarted.Log().find("removed 1 shared-memory segment") != std::string::npos);
  CHECK(restarted.Connect().Put(Pattern(1 << 20, 2)).ok());
  restarted.Stop(SIGTERM);
  CHECK(ShmNames(prefix).empty());  // a clean shutdown removes its own
}

TEST_CASE("a /dev/shm too small for a new segment gives StoreFull and no SIGBUS", "[robustness]") {
  if (::getuid() != 0) Skip("needs root to mount a small tmpfs over /dev/shm in a mount namespace");
  if (Run({"unshare", "-m", "true"}) != 0) Skip("unshare -m is not permitted here");
  std::string dir = TempDir();
  // The daemon runs in its own mount namespace with a 16 MiB /dev/shm; clients receive segment
  // fds over the socket, so they need no access to that /dev/shm.
  Daemon d(dir + "/depot.sock", {"--capacity", "64MiB", "--segment-size", "8MiB"},
           {"unshare", "-m", "sh", "-c",
            "mount --make-rprivate / && mount -t tmpfs -o size=16m tmpfs /dev/shm && "
            "exec \"$0\" \"$@\""});
  CHECK(d.Log().find("/dev/shm has 16.0 MiB free but the capacity is 64.0 MiB") != std::string::npos);
  Client c = d.Connect();
  auto a = c.Put(Pattern(6 << 20, 1));  // first 8 MiB segment
  REQUIRE(a.ok());
  auto b = c.Put(Pattern(6 << 20, 2));  // second one: /dev/shm is now full
  REQUIRE(b.ok());
  auto full = c.Put(Pattern(6 << 20, 3));  // a third segment cannot be reserved
  REQUIRE(full.status().IsStoreFull());
  CHECK(full.status().message().find("/dev/shm") != std::string::npos);
  CHECK(full.status().message().find("8.0 MiB") != std::string::npos);
  // What was stored is intact and readable: no page of it is missing.
  auto obj = c.Get(*b);
  REQUIRE(obj.ok());
  CHECK(std::memcmp(obj->frame(0).data(), Pattern(6 << 20, 2).data(), 6 << 20) == 0);
}
