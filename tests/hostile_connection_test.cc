// Hostile connections: a peer that tries to swell the daemon's memory (before saying hello, or
// with requests whose replies it never reads), and a fake daemon that feeds a client lying
// replies. The daemon's memory is read from /proc/PID/status; a client under attack runs in a
// child process, so that a crash shows as its exit code. Attacks on the daemon run as a throwaway
// uid when the test runs as root, as the test's own uid elsewhere (they need no privilege).
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "common/unix_socket.h"
#include "proto/fd_passing.h"
#include "proto/index_layout.h"
#include "proto/wire.h"
#include "tests/other_users.h"

using namespace depot;
using namespace depot::test;
namespace fb = flatbuffers;

namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr int kProtocolErrorCode = static_cast<int>(Status::Code::kProtocolError);

// Runs `fn` in a child: as Mallory when root, else as this user.
int AsAttacker(const std::function<int()>& fn) {
  return ::geteuid() == 0 ? RunAs(kMallory, kMallory, {}, fn) : RunChild(fn);
}

bool SendAll(int fd, const std::vector<uint8_t>& bytes) {
  return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}

// Reads one whole message (header and body) within 5 s; empty on timeout or end of stream.
std::vector<uint8_t> ReadMessage(int fd) {
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::vector<uint8_t> out(sizeof(proto::Header));
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::recv(fd, out.data() + got, out.size() - got, 0);
    if (n <= 0) return {};
    got += static_cast<size_t>(n);
    if (got == sizeof(proto::Header)) {
      proto::Header h;
      std::memcpy(&h, out.data(), sizeof h);
      out.resize(sizeof h + h.length);
    }
  }
  return out;
}

std::vector<uint8_t> Hello(uint64_t id) {
  fb::FlatBufferBuilder fbb(128);
  fbb.Finish(wire::CreateHelloRequest(fbb, proto::kProtocolVersion, fbb.CreateString("hostile"),
                                      index::kIndexLayout.version));
  return proto::Encode(static_cast<uint16_t>(proto::MsgType::kHello), id, fbb);
}

}  // namespace

TEST_CASE("headers announcing large bodies before hello neither grow the daemon nor stay open",
          "[hostile]") {
  Daemon d = StartOpen({"--allow-users", std::to_string(kMallory)});
  uint64_t before = ResidentOf(d.pid());
  REQUIRE(before > 0);
  Channel sent, done;
  pid_t attacker = Spawn([&] {
    return AsAttacker([&] {
      constexpr int kConnections = 6;
      std::vector<UniqueFd> socks;
      proto::Header h{proto::kMagic,
                      proto::kProtocolVersion,
                      static_cast<uint16_t>(proto::MsgType::kHello),
                      1,
                      64u << 20,
                      0};
      std::vector<uint8_t> bytes(sizeof h + 4096, 0xAB);
      std::memcpy(bytes.data(), &h, sizeof h);
      for (int i = 0; i < kConnections; ++i) {
        socks.push_back(ConnectUnix(d.socket()));
        if (!socks.back().valid() || !SendAll(socks.back().get(), bytes)) return 1;
      }
      int refused = 0;
      for (auto& s : socks) {
        auto reply = ReadMessage(s.get());
        std::string text(reply.begin(), reply.end());
        if (text.find("before hello") != std::string::npos) ++refused;
      }
      sent.Send("sent");
      done.Receive();  // the connections stay open while the daemon is measured
      return refused == kConnections ? 0 : 2;
    });
  });
  REQUIRE(sent.Receive() == "sent");
  uint64_t after = ResidentOf(d.pid());
  done.Send("done");
  CHECK(Wait(attacker) == 0);  // every connection was refused with the reason
  CHECK(after < before + 16 * kMiB);
  CHECK(d.Connect().Put(Pattern(1000, 1)).ok());  // and the daemon serves on
}

TEST_CASE("gets naming one GUID many times do not build huge replies nor swell the daemon",
          "[hostile]") {
  Daemon d = StartOpen({"--allow-users", std::to_string(kMallory)});
  Client owner = d.Connect();
  std::vector<std::byte> metadata(proto::kMaxMetadataSize, std::byte{7});
  CreateOptions with_metadata;
  with_metadata.metadata = metadata;
  auto guid = owner.Put(Pattern(4096, 3), with_metadata);
  REQUIRE(guid.ok());
  uint64_t before = ResidentOf(d.pid());
  Channel sent, done;
  pid_t attacker = Spawn([&] {
    return AsAttacker([&] {
      UniqueFd s = ConnectUnix(d.socket());
      if (!s.valid() || !SendAll(s.get(), Hello(1)) || ReadMessage(s.get()).empty()) return 1;
      fb::FlatBufferBuilder fbb(64 << 10);
      std::vector<wire::Guid> ids(proto::kMaxGuidsPerRequest, proto::ToWire(*guid));
      fbb.Finish(wire::CreateGetRequest(fbb, fbb.CreateVectorOfStructs(ids), 0));
      constexpr auto kGet = static_cast<uint16_t>(proto::MsgType::kGet);
      for (uint64_t id = 2; id < 10; ++id) {
        if (!SendAll(s.get(), proto::Encode(kGet, id, fbb))) return 2;
      }
      sent.Send("sent");
      done.Receive();  // the replies stay unread while the daemon is measured
      auto reply = ReadMessage(s.get());
      return !reply.empty() && reply.size() < kMiB ? 0 : 3;
    });
  });
  REQUIRE(sent.Receive() == "sent");
  // Give the daemon time to answer every get; the replies of today's code took 35 MiB each.
  bool swollen =
      WaitFor([&] { return ResidentOf(d.pid()) > before + 64 * kMiB; }, std::chrono::seconds(2));
  CHECK_FALSE(swollen);
  // Another client is served meanwhile.
  auto obj = owner.Get(*guid);
  CHECK(obj.ok());
  CHECK(d.Connect().Put(Pattern(1000, 2)).ok());
  done.Send("done");
  CHECK(Wait(attacker) == 0);  // and a reply, when read, is small
}

TEST_CASE("unread replies are bounded in bytes (max_pending_bytes), not only in count",
          "[hostile]") {
  Daemon d = StartOpen({"--allow-users", std::to_string(kMallory), "--max-pending-bytes", "1MiB"});
  Client owner = d.Connect();
  std::vector<std::byte> metadata(proto::kMaxMetadataSize, std::byte{9});
  std::vector<wire::Guid> ids;
  for (int i = 0; i < 64; ++i) {  // a get of all of them is a reply of over 1 MiB
    CreateOptions with_metadata;
    with_metadata.metadata = metadata;
    auto guid = owner.Put(Pattern(64, i), with_metadata);
    REQUIRE(guid.ok());
    ids.push_back(proto::ToWire(*guid));
  }
  uint64_t before = ResidentOf(d.pid());
  Channel sent, done;
  pid_t attacker = Spawn([&] {
    return AsAttacker([&] {
      UniqueFd s = ConnectUnix(d.socket());
      if (!s.valid() || !SendAll(s.get(), Hello(1)) || ReadMessage(s.get()).empty()) return 1;
      fb::FlatBufferBuilder fbb(4096);
      fbb.Finish(wire::CreateGetRequest(fbb, fbb.CreateVectorOfStructs(ids), 0));
      auto get = proto::Encode(static_cast<uint16_t>(proto::MsgType::kGet), 2, fbb);
      for (int i = 0; i < 64; ++i) {  // 64 MiB of replies, were they all built
        if (!SendAll(s.get(), get)) return 2;
      }
      sent.Send("sent");
      done.Receive();
      return 0;
    });
  });
  REQUIRE(sent.Receive() == "sent");
  bool swollen =
      WaitFor([&] { return ResidentOf(d.pid()) > before + 32 * kMiB; }, std::chrono::seconds(2));
  CHECK_FALSE(swollen);
  CHECK(owner.Get(proto::FromWire(ids[0])).ok());  // others are served
  done.Send("done");
  CHECK(Wait(attacker) == 0);
}

namespace {

// A fake daemon: a listening socket the test serves itself, one scripted connection at a time.
class FakeDaemon {
 public:
  FakeDaemon() : path_(TempDir() + "/fake.sock") {
    listener_ = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof addr.sun_path - 1);
    REQUIRE(::bind(listener_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(listener_.get(), 4) == 0);
  }
  const std::string& path() const { return path_; }
  UniqueFd Accept() { return UniqueFd(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC)); }

 private:
  std::string path_;
  UniqueFd listener_;
};

// A memfd of `size` zero bytes.
UniqueFd Memfd(size_t size) {
  UniqueFd fd(::memfd_create("fake-segment", MFD_CLOEXEC));
  REQUIRE(::ftruncate(fd.get(), static_cast<off_t>(size)) == 0);
  return fd;
}

// Sends `message`, with `fds` riding on its first byte.
void SendWith(int sock, const std::vector<uint8_t>& message, std::vector<int> fds) {
  REQUIRE(proto::SendWithFds(sock, message, fds, 0) == static_cast<ssize_t>(message.size()));
}

// Reads the client's next request; returns its request id, or nothing when the client hung up.
std::optional<uint64_t> NextRequest(int sock) {
  auto m = ReadMessage(sock);
  if (m.size() < sizeof(proto::Header)) return std::nullopt;
  proto::Header h;
  std::memcpy(&h, m.data(), sizeof h);
  return h.request_id;
}

std::vector<uint8_t> HelloReply(uint64_t id) {
  fb::FlatBufferBuilder fbb(128);
  fbb.Finish(wire::CreateHelloReply(fbb, proto::kProtocolVersion));
  return proto::Encode(proto::ReplyType(proto::MsgType::kHello), id, fbb);
}

// One frame at `offset` of `size` bytes in a segment claimed to hold `segment_size` bytes.
std::vector<uint8_t> CreateReply(uint64_t id, uint64_t offset, uint64_t size,
                                 uint64_t segment_size) {
  fb::FlatBufferBuilder fbb(256);
  wire::Guid g(1, 2);
  wire::FrameLocation f(offset, size, 5, 0);
  auto frames = fbb.CreateVectorOfStructs(&f, 1);
  auto seg = wire::CreateSegmentInfo(fbb, 5, segment_size, false, 0);
  fbb.Finish(wire::CreateCreateReply(fbb, &g, frames, fbb.CreateVector(&seg, 1)));
  return proto::Encode(proto::ReplyType(proto::MsgType::kCreate), id, fbb);
}

std::vector<uint8_t> GetReply(uint64_t id, const Guid& named) {
  fb::FlatBufferBuilder fbb(256);
  wire::Guid g = proto::ToWire(named);
  wire::FrameLocation f(0, 4096, 6, 0);
  auto frames = fbb.CreateVectorOfStructs(&f, 1);
  std::vector<fb::Offset<wire::GetResult>> results{
      wire::CreateGetResult(fbb, &g, wire::Code::Ok, 0, 9, frames)};
  auto seg = wire::CreateSegmentInfo(fbb, 6, 4096, false, 0);
  fbb.Finish(wire::CreateGetReply(fbb, fbb.CreateVector(results), fbb.CreateVector(&seg, 1)));
  return proto::Encode(proto::ReplyType(proto::MsgType::kGet), id, fbb);
}

enum class Lie { kFrameSize, kShortMemfd, kStrayFd, kOtherGuid };

// Serves one client that connects and then creates a 4096-byte frame (or gets an object), lying
// as `lie` says; returns the client's exit code: the status code it got, 0 when it got none,
// 128 + signal when it crashed. `outside_written` counts the bytes of the fake's segment outside
// the frame asked for (its first 4096 bytes) that the client changed.
int RunAgainstFake(Lie lie, int& outside_written) {
  FakeDaemon fake;
  pid_t client = Spawn([&] {
    ConnectOptions to_fake;
    to_fake.socket_path = fake.path();
    auto c = Client::Connect(to_fake);
    if (!c.ok()) return static_cast<int>(c.status().code());
    if (lie == Lie::kOtherGuid) {
      auto obj = c->Get(Guid{3, 4}, std::chrono::milliseconds(0));
      return obj.ok() ? 0 : static_cast<int>(obj.status().code());
    }
    std::array<uint64_t, 1> sizes{4096};
    auto draft = c->Create(sizes);
    if (!draft.ok()) return static_cast<int>(draft.status().code());
    std::memset(draft->frame(0).data(), 0xAB, draft->frame(0).size());
    return 0;
  });
  UniqueFd conn = fake.Accept();
  REQUIRE(conn.valid());
  UniqueFd segment = Memfd(lie == Lie::kShortMemfd ? 4096 : 1 * kMiB);
  UniqueFd stray = Memfd(0);
  std::optional<uint64_t> hello = NextRequest(conn.get());
  REQUIRE(hello);
  std::vector<int> hello_fds;
  if (lie == Lie::kStrayFd) hello_fds.push_back(stray.get());
  SendWith(conn.get(), HelloReply(*hello), hello_fds);
  // The request that follows, unless the client gave up on the connection already.
  if (std::optional<uint64_t> id = NextRequest(conn.get())) {
    switch (lie) {
      case Lie::kFrameSize:  // asked 4096, told 64 KiB
        SendWith(conn.get(), CreateReply(*id, 0, 64 << 10, kMiB), {segment.get()});
        break;
      case Lie::kShortMemfd:  // a frame past the end of the file, within the size claimed
        SendWith(conn.get(), CreateReply(*id, 512 << 10, 4096, kMiB), {segment.get()});
        break;
      case Lie::kStrayFd:  // an honest reply: the stray fd must not be taken for its segment
        SendWith(conn.get(), CreateReply(*id, 0, 4096, kMiB), {segment.get()});
        break;
      case Lie::kOtherGuid:
        SendWith(conn.get(), GetReply(*id, Guid{7, 7}), {segment.get()});
        break;
    }
  }
  conn.reset();  // the client's later requests (an abort) see the end of the stream
  int status = Wait(client);
  std::vector<uint8_t> bytes(kMiB);
  ssize_t n = ::pread(segment.get(), bytes.data(), bytes.size(), 0);
  outside_written = 0;
  for (ssize_t i = 4096; i < n; ++i) outside_written += bytes[i] != 0;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

TEST_CASE("a client fed lying replies by a fake daemon returns ProtocolError, never crashes",
          "[hostile]") {
  for (Lie lie : {Lie::kFrameSize, Lie::kShortMemfd, Lie::kStrayFd, Lie::kOtherGuid}) {
    INFO("lie " << static_cast<int>(lie));
    int outside = -1;
    CHECK(RunAgainstFake(lie, outside) == kProtocolErrorCode);
    CHECK(outside == 0);  // nothing was written outside the frame asked for
  }
}
