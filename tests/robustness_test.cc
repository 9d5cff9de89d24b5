// Bad input gets a clear error and harms nobody else: garbage on the socket, wrong versions,
// oversized or malformed messages, limits, a second daemon, a crashed daemon, a full /dev/shm,
// a silent or flooding peer, too few file descriptors, clients killed at random points.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include <catch2/catch.hpp>

#include "daemon/shm_source.h"
#include "common/unix_socket.h"
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
  explicit Raw(const std::string& path) : fd_(ConnectUnix(path)) {
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
  UniqueFd fd_;
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
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM, 0));
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
  std::string prefix = ShmSource::NamePrefix(path);
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

TEST_CASE("a peer that connects and never speaks is dropped at the handshake timeout",
          "[robustness]") {
  Daemon d({"--capacity", "64MiB", "--handshake-timeout-ms", "300"});
  Raw silent(d.socket());
  Client other = d.Connect();  // says hello at once: not affected
  Status st = silent.ReadFinalError();
  CHECK(st.IsTimeout());
  CHECK(st.message().find("no hello within 300 ms") != std::string::npos);
  CHECK(other.Ping().ok());
}

namespace {

// Reads /proc/PID/status's VmRSS of another process, in bytes.
uint64_t RssOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("VmRSS:")) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

std::vector<uint8_t> PingMessage(uint64_t id) {
  flatbuffers::FlatBufferBuilder fbb(64);
  fbb.Finish(wire::CreateEmptyReply(fbb));
  return proto::Encode(static_cast<uint16_t>(proto::MsgType::kPing), id, fbb);
}

}  // namespace

TEST_CASE("a client that sends without reading fills only its own socket", "[robustness]") {
  Daemon d({"--capacity", "64MiB", "--max-pending", "256"});
  uint64_t rss_before = RssOf(d.pid());
  int fd = ConnectUnix(d.socket()).release();
  UniqueFd owner(fd);
  flatbuffers::FlatBufferBuilder hello;
  hello.Finish(wire::CreateHelloRequest(hello, proto::kProtocolVersion, hello.CreateString("flood")));
  auto hello_bytes = proto::Encode(static_cast<uint16_t>(proto::MsgType::kHello), 1, hello);
  REQUIRE(::send(fd, hello_bytes.data(), hello_bytes.size(), MSG_NOSIGNAL) > 0);
  // Send pings, never reading, until the daemon stops taking them (a write that waits 300 ms).
  constexpr uint64_t kCap = 400000;
  uint64_t sent = 0;
  std::vector<uint8_t> pending;
  size_t offset = 0;
  while (sent < kCap) {
    if (offset == pending.size()) {
      pending = PingMessage(sent + 2);
      offset = 0;
    }
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, 300) == 0) break;
    ssize_t n = ::send(fd, pending.data() + offset, pending.size() - offset, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EAGAIN) continue;
    REQUIRE(n > 0);
    offset += static_cast<size_t>(n);
    if (offset == pending.size()) ++sent;
  }
  CHECK(sent < kCap);  // the daemon stopped reading this connection
  CHECK(RssOf(d.pid()) < rss_before + (32u << 20));  // and did not queue its replies without bound
  // Others are served meanwhile.
  Client other = d.Connect();
  for (int i = 0; i < 20; ++i) {
    auto id = other.Put(Pattern(100000, i));
    REQUIRE(id.ok());
    REQUIRE(other.Get(*id).ok());
  }
  // Nothing is lost: every ping fully sent is answered, in order, once the client reads.
  if (offset != 0) {  // finish the last partial message
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    REQUIRE(::send(fd, pending.data() + offset, pending.size() - offset, MSG_NOSIGNAL) > 0);
    ++sent;
  }
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  auto read_exactly = [&](void* p, size_t n) {
    auto* b = static_cast<uint8_t*>(p);
    while (n > 0) {
      ssize_t got = ::recv(fd, b, n, 0);
      if (got <= 0) return false;
      b += got;
      n -= static_cast<size_t>(got);
    }
    return true;
  };
  proto::Header h;
  std::vector<uint8_t> body;
  REQUIRE(read_exactly(&h, sizeof h));  // hello's reply
  body.resize(h.length);
  REQUIRE(read_exactly(body.data(), body.size()));
  uint64_t answered = 0;
  bool in_order = true;
  while (answered < sent && read_exactly(&h, sizeof h)) {
    body.resize(h.length);
    if (!read_exactly(body.data(), body.size())) break;
    in_order = in_order && h.type == proto::ReplyType(proto::MsgType::kPing) &&
               h.request_id == answered + 2;
    ++answered;
  }
  CHECK(answered == sent);
  CHECK(in_order);
}

TEST_CASE("gets waiting on one connection are bounded by max_pending", "[robustness]") {
  Daemon d({"--capacity", "64MiB", "--max-pending", "4"});
  Raw r(d.socket());
  r.Hello();
  for (uint64_t id = 2; id <= 6; ++id) {
    flatbuffers::FlatBufferBuilder fbb;
    wire::Guid g = proto::ToWire(Guid::Random());
    fbb.Finish(wire::CreateGetRequest(fbb, fbb.CreateVectorOfStructs(&g, 1), -1));
    r.Write(proto::Encode(static_cast<uint16_t>(proto::MsgType::kGet), id, fbb));
  }
  proto::Header h;
  std::vector<uint8_t> body;
  REQUIRE(r.Read(h, body));  // hello's reply
  REQUIRE(r.Read(h, body));  // the fifth get is refused; the first four wait
  REQUIRE(h.type == static_cast<uint16_t>(proto::MsgType::kError));
  CHECK(h.request_id == 6);
  REQUIRE(proto::VerifyBody(h.type, body));
  auto* e = proto::Body<wire::ErrorReply>(body);
  CHECK(static_cast<Status::Code>(e->code()) == Status::Code::kQuotaExceeded);
  CHECK(e->message()->str().find("max_pending") != std::string::npos);
  auto st = d.Connect().GetStatus();
  REQUIRE(st.ok());
  CHECK(st->gets_waiting == 4);
}

TEST_CASE("a daemon short of file descriptors answers errors and recovers", "[robustness]") {
  if (Run({"prlimit", "--nofile=40", "true"}) != 0) Skip("prlimit is not available");
  std::string dir = TempDir();
  Daemon d(dir + "/depot.sock", {"--capacity", "256MiB", "--segment-size", "1MiB"},
           {"prlimit", "--nofile=40"});
  Client c = d.Connect();
  // Objects larger than a segment get one each, and each segment holds a descriptor.
  std::vector<Guid> made;
  Status failed;
  for (int i = 0; i < 60 && failed.ok(); ++i) {
    auto id = c.Put(Pattern(2 << 20, i));
    if (id.ok()) {
      made.push_back(*id);
    } else {
      failed = id.status();
    }
  }
  REQUIRE(!failed.ok());
  INFO(failed.ToString());
  CHECK((failed.IsStoreFull() || failed.IsUnavailable()));
  CHECK(failed.message().find("Too many open files") != std::string::npos);
  CHECK(c.Ping().ok());  // alive, and this connection still served
  // Connections beyond the limit wait in the backlog; the accept loop says why and keeps going.
  std::vector<UniqueFd> extra;
  for (int i = 0; i < 20; ++i) extra.push_back(ConnectUnix(d.socket()));
  CHECK(WaitFor([&] { return d.Log().find("accept on") != std::string::npos; }));
  extra.clear();
  // Once descriptors are free again, everything works.
  for (const Guid& g : made) REQUIRE(c.Delete(std::span<const Guid>(&g, 1))[0].ok());
  auto id = c.Put(Pattern(2 << 20, 99));
  REQUIRE(id.ok());
  REQUIRE(c.Get(*id).ok());
  CHECK(d.Connect().Ping().ok());
}

TEST_CASE("start-up with a prefaulted capacity /dev/shm cannot hold fails and says why",
          "[robustness]") {
  if (::getuid() != 0) Skip("needs root to mount a small tmpfs over /dev/shm in a mount namespace");
  if (Run({"unshare", "-m", "true"}) != 0) Skip("unshare -m is not permitted here");
  std::string err;
  int rc = Run({"unshare", "-m", "sh", "-c",
                "mount --make-rprivate / && mount -t tmpfs -o size=16m tmpfs /dev/shm && "
                "exec \"$0\" \"$@\"",
                DEPOTD_PATH, "--socket", TempDir() + "/depot.sock", "--capacity", "64MiB",
                "--prefault"},
               nullptr, &err);
  CHECK(rc != 0);
  CHECK(err.find("/dev/shm") != std::string::npos);
  CHECK(err.find("64.0 MiB") != std::string::npos);
}

TEST_CASE("a capacity over free memory starts with a warning and serves", "[robustness]") {
  Daemon d({"--capacity", "64TiB"});
  CHECK(d.Log().find("but the capacity is 64.0 TiB") != std::string::npos);
  Client c = d.Connect();
  auto id = c.Put(Pattern(1 << 20, 1));
  REQUIRE(id.ok());
  CHECK(c.Get(*id).ok());
}

TEST_CASE("clients killed with SIGKILL at random points leave nothing behind", "[robustness]") {
  Daemon d({"--capacity", "128MiB", "--segment-size", "8MiB"});
  std::mt19937 rng(Catch::rngSeed());
  // Two processes put, read back, verify and delete objects throughout.
  auto load = [&](uint32_t seed) {
    return Spawn([&, seed] {
      Client c = d.Connect();
      CreateOptions o;
      o.checksum = true;
      auto until = std::chrono::steady_clock::now() + 3s;
      for (uint32_t i = 0; std::chrono::steady_clock::now() < until; ++i) {
        auto id = c.Put(Pattern(1000 + (i * 7919) % 300000, seed + i), o);
        if (!id.ok()) return 1;
        auto obj = c.Get(*id);
        if (!obj.ok() || !obj->Verify().ok()) return 2;
        if (!c.Delete(std::span<const Guid>(&*id, 1))[0].ok()) return 3;
      }
      return 0;
    });
  };
  std::vector<pid_t> loaders = {load(1), load(1u << 20)};
  // Victims create, write, seal, get and drop objects in a loop; each is killed at a random
  // moment of it.
  for (int round = 0; round < 30; ++round) {
    pid_t victim = Spawn([&, round] {
      Client c = d.Connect();
      std::vector<Object> held;
      for (uint32_t i = 0;; ++i) {
        auto draft = c.Create({uint64_t{4096} * (1 + (round + i) % 64)});
        if (!draft.ok()) return 1;
        std::memset(draft->frame(0).data(), 0x5a, draft->frame(0).size() / 2);
        if (i % 3 == 0) continue;  // dropped unsealed: aborted
        Guid g = draft->guid();
        if (!draft->Seal().ok()) return 2;
        auto obj = c.Get(g);
        if (!obj.ok()) return 3;
        held.push_back(*obj);
        if (held.size() > 8) held.erase(held.begin());
        if (i % 2 == 0) c.Delete(std::span<const Guid>(&g, 1));
      }
    });
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
    ::kill(victim, SIGKILL);
    Wait(victim);
  }
  for (pid_t p : loaders) {
    int status = Wait(p);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  Client c = d.Connect();
  // Every victim's creates were aborted and its references dropped.
  REQUIRE(WaitFor([&] {
    auto st = c.GetStatus();
    return st.ok() && st->clients == 1 && st->objects_creating == 0 && st->objects_deleted == 0;
  }));
  // Delete what the victims sealed and kept: the pool is empty again.
  for (;;) {
    auto page = c.List();
    REQUIRE(page.ok());
    if (page->objects.empty()) break;
    std::vector<Guid> guids;
    for (const auto& o : page->objects) guids.push_back(o.guid);
    for (const Status& s : c.Delete(guids)) CHECK(s.ok());
  }
  auto st = c.GetStatus();
  REQUIRE(st.ok());
  CHECK(st->used == 0);
  CHECK(st->objects_sealed == 0);
}

TEST_CASE("a daemon out of memory for metadata answers Unavailable and keeps serving",
          "[robustness]") {
  if (Run({"prlimit", "--as=300000000", "true"}) != 0) Skip("prlimit is not available");
  if (*DEPOT_SANITIZE != '\0') Skip("sanitizers reserve more address space than the limit");
  std::string dir = TempDir();
  // 300 MB of address space: the pool's 64 MiB mapping fits, 16 KiB of metadata per object
  // runs out after some thousands of objects.
  Daemon d(dir + "/depot.sock", {"--capacity", "64MiB"}, {"prlimit", "--as=300000000"});
  Client c = d.Connect();
  std::vector<std::byte> metadata(16 << 10, std::byte{7});
  CreateOptions o;
  o.metadata = metadata;
  std::vector<Guid> made;
  Status failed;
  while (failed.ok() && made.size() < 100000) {
    auto id = c.Put(Pattern(64, static_cast<uint32_t>(made.size())), o);
    if (id.ok()) {
      made.push_back(*id);
    } else {
      failed = id.status();
    }
  }
  INFO(failed.ToString() << " after " << made.size() << " objects");
  REQUIRE(!failed.ok());
  CHECK(failed.IsUnavailable());
  CHECK(failed.message().find("out of memory") != std::string::npos);
  CHECK(c.Ping().ok());
  CHECK(d.Log().find("out of memory answering create") != std::string::npos);
  // Deleting frees the daemon's memory for new requests; what was kept is intact.
  for (size_t i = 1; i < made.size(); i += 1000) {
    std::span<const Guid> batch(made.data() + i, std::min<size_t>(1000, made.size() - i));
    for (const Status& s : c.Delete(batch)) CHECK(s.ok());
  }
  auto first = c.Get(made.front());
  REQUIRE(first.ok());
  CHECK(first->metadata().size() == metadata.size());
  CHECK(std::memcmp(first->frame(0).data(), Pattern(64, 0).data(), 64) == 0);
  CHECK(c.Put(Pattern(64, 1), o).ok());
}

TEST_CASE("a hello with an overlong client name is refused", "[robustness]") {
  Daemon d({"--capacity", "64MiB"});
  Raw r(d.socket());
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateHelloRequest(fbb, proto::kProtocolVersion,
                                      fbb.CreateString(std::string(proto::kMaxNameSize + 1, 'n'))));
  r.Write(proto::Encode(static_cast<uint16_t>(proto::MsgType::kHello), 1, fbb));
  Status st = r.ReadFinalError();
  CHECK(st.IsInvalidArgument());
  CHECK(st.message().find("at most 256 bytes") != std::string::npos);
}
