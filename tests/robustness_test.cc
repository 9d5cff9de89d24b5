// Bad input gets a clear error and harms nobody else: garbage on the socket, wrong versions,
// oversized or malformed messages, limits, a second daemon, a crashed daemon, a full /dev/shm,
// a silent or flooding peer, too few file descriptors, clients killed at random points.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "common/unix_socket.h"
#include "daemon/shm_source.h"
#include "proto/fd_passing.h"
#include "proto/wire.h"
#include "tests/daemon_fixture.h"
#include "tests/raw_connection.h"

using namespace depot;
using namespace depot::test;
using namespace std::chrono_literals;

namespace {

std::vector<uint8_t> HeaderBytes(proto::Header h) {
  std::vector<uint8_t> v(sizeof h);
  std::memcpy(v.data(), &h, sizeof h);
  return v;
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
    proto::Header h{proto::kMagic,
                    proto::kProtocolVersion,
                    static_cast<uint16_t>(proto::MsgType::kCreate),
                    2,
                    16,
                    0};
    auto bytes = HeaderBytes(h);
    for (int i = 0; i < 16; ++i) bytes.push_back(0xff);
    raw.Write(bytes);
    Status st = raw.ReadFinalError();
    CHECK(st.IsProtocolError());
    CHECK(st.message().find("create") != std::string::npos);
  }
  SECTION("a message larger than the limit") {
    raw.Hello();
    proto::Header h{proto::kMagic,
                    proto::kProtocolVersion,
                    static_cast<uint16_t>(proto::MsgType::kCreate),
                    2,
                    1u << 30,
                    0};
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
    proto::Header h{proto::kMagic,
                    proto::kProtocolVersion,
                    static_cast<uint16_t>(proto::MsgType::kStatus),
                    2,
                    64,
                    0};
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

  // More GUIDs than a request may name: the client splits them (the daemon's refusal of such a
  // request is store_test's), so each is simply not found.
  std::vector<Guid> guids(proto::kMaxGuidsPerRequest + 1, Guid::Random());
  auto results = c.Get(guids);
  REQUIRE(results.size() == guids.size());
  CHECK(results.back().status().IsNotFound());
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

TEST_CASE("a daemon killed with SIGKILL leaves no segment behind", "[robustness]") {
  std::string dir = TempDir();
  std::string path = dir + "/depot.sock";
  std::string prefix = ShmSource::NamePrefix(path);
  auto shm_files = [&] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
      n += e.path().filename().string().starts_with(prefix);
    }
    return n;
  };
  {
    Daemon crashed(path, {"--capacity", "64MiB"});
    auto id = crashed.Connect().Put(Pattern(1 << 20, 1));
    REQUIRE(id.ok());
    CHECK(SegmentsOf(crashed.pid(), prefix).size() == 1);  // named, for /proc and depotctl
    CHECK(shm_files() == 0);                               // but no file has that name
    crashed.Stop(SIGKILL);
  }
  CHECK(shm_files() == 0);
  Daemon restarted(path, {"--capacity", "64MiB"});
  CHECK(restarted.Connect().Put(Pattern(1 << 20, 2)).ok());
}

// A container's usual /dev/shm is 64 MiB: segments are memfds, so its size does not bound the
// pool. The daemon runs in its own mount namespace over such a /dev/shm.
TEST_CASE("a 64 MiB /dev/shm does not bound the pool", "[robustness]") {
  if (::getuid() != 0) Skip("needs root to mount a small tmpfs over /dev/shm in a mount namespace");
  if (Run({"unshare", "-m", "true"}) != 0) Skip("unshare -m is not permitted here");
  std::string dir = TempDir();
  Daemon d(dir + "/depot.sock", {"--capacity", "256MiB"},
           {"unshare", "-m", "sh", "-c",
            "mount --make-rprivate / && mount -t tmpfs -o size=64m tmpfs /dev/shm && "
            "exec \"$0\" \"$@\""});
  // The daemon's /dev/shm really is the small one.
  std::ifstream in("/proc/" + std::to_string(d.pid()) + "/mounts");
  std::string mounts((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(mounts.find("tmpfs /dev/shm tmpfs rw,relatime,size=65536k") != std::string::npos);
  Client c = d.Connect();
  std::vector<Guid> ids;
  for (uint32_t i = 0; i < 20; ++i) {  // 200 MiB in 10 MiB objects
    auto id = c.Put(Pattern(10 << 20, i + 1));
    INFO(id.status().message());
    REQUIRE(id.ok());
    ids.push_back(*id);
  }
  for (uint32_t i = 0; i < ids.size(); ++i) {
    auto obj = c.Get(ids[i]);
    REQUIRE(obj.ok());
    std::vector<std::byte> want = Pattern(10 << 20, i + 1);
    CHECK(std::memcmp(obj->frame(0).data(), want.data(), want.size()) == 0);
  }
  CHECK(c.GetStatus()->used >= 200u << 20);
}

TEST_CASE("start-up with a prefaulted capacity larger than /dev/shm serves", "[robustness]") {
  if (::getuid() != 0) Skip("needs root to mount a small tmpfs over /dev/shm in a mount namespace");
  if (Run({"unshare", "-m", "true"}) != 0) Skip("unshare -m is not permitted here");
  Daemon d(TempDir() + "/depot.sock", {"--capacity", "64MiB", "--prefault"},
           {"unshare", "-m", "sh", "-c",
            "mount --make-rprivate / && mount -t tmpfs -o size=16m tmpfs /dev/shm && "
            "exec \"$0\" \"$@\""});
  Client c = d.Connect();
  auto id = c.Put(Pattern(48 << 20, 1));
  REQUIRE(id.ok());
  CHECK(c.Get(*id).ok());
}

TEST_CASE("a capacity over free memory starts with a warning and serves", "[robustness]") {
  Daemon d({"--capacity", "64TiB"});
  CHECK(d.Log().find("the capacity is 64.0 TiB but only") != std::string::npos);
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
    // A proposed GUID takes the create path, whose reply can carry the error (a put in one
    // message has none: its connection would close).
    o.guid = Guid::Random();
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
