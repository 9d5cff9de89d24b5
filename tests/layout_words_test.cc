// The layout words at the start of every shared-memory layout a client maps
// (proto/layout_words.h), on both sides: the daemon writes them into the index, the reference
// slots and the put ring it makes; the client library refuses, with a clear ProtocolError, memory
// whose words are not its own (unit level on the daemon's real memfds, and end to end from a fake
// daemon that sends a put ring of another version); and a client that overwrites the words in
// the memory it may write (its slots, its ring) has its connection closed with a protocol error,
// while the daemon goes on serving everyone else (a real depotd, the attacker as another uid
// when run as root).
#include "proto/layout_words.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <unordered_set>
#include <vector>

#include "client/src/index_reader.h"
#include "client/src/put_ring.h"
#include "client/src/slot_table.h"
#include "daemon/put_ring.h"
#include "daemon/reference_slots.h"
#include "proto/index_layout.h"
#include "proto/put_ring_layout.h"
#include "tests/other_users.h"
#include "tests/raw_connection.h"

namespace depot::test {
namespace {

using Catch::Matchers::Contains;

// A writable mapping of the first `bytes` of `fd`: the words, as anyone holding a writable
// descriptor could change them.
class Words {
 public:
  explicit Words(int fd, size_t bytes = 4096) : bytes_(bytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(p != MAP_FAILED);
    words_ = static_cast<uint64_t*>(p);
  }
  ~Words() { ::munmap(words_, bytes_); }
  Words(const Words&) = delete;
  Words& operator=(const Words&) = delete;
  std::atomic_ref<uint64_t> Word(uint64_t n) { return std::atomic_ref<uint64_t>(words_[n]); }
  uint64_t* data() { return words_; }

 private:
  size_t bytes_;
  uint64_t* words_ = nullptr;
};

UniqueFd Dup(int fd) { return UniqueFd(::fcntl(fd, F_DUPFD_CLOEXEC, 0)); }

TEST_CASE("a layout's magic word spells its name in memory, and each layout has its own",
          "[layout]") {
  uint64_t magic = put_ring::kPutRingLayout.magic;
  CHECK(std::string(reinterpret_cast<const char*>(&magic), 8) == "DEPOTRNG");
  magic = index::kIndexLayout.magic;
  CHECK(std::string(reinterpret_cast<const char*>(&magic), 8) == "DEPOTIDX");
  CHECK(index::kSlotsLayout.magic != index::kIndexLayout.magic);
  CHECK(index::kSlotsLayout.magic != put_ring::kPutRingLayout.magic);
  uint64_t words[layout::kHeaderWords] = {};
  CHECK_FALSE(layout::Intact(words, put_ring::kPutRingLayout));
  layout::Write(words, put_ring::kPutRingLayout);
  CHECK(layout::Intact(words, put_ring::kPutRingLayout));
  CHECK(layout::Check(words, put_ring::kPutRingLayout).ok());
  CHECK_FALSE(layout::Intact(words, index::kSlotsLayout));
}

TEST_CASE("the client refuses memory whose layout words are not its own, saying why", "[layout]") {
  auto ring = PutRing::Create("layout-ring");
  REQUIRE(ring.ok());
  auto slots = ReferenceSlots::Create("layout-slots");
  REQUIRE(slots.ok());
  // An index as the daemon lays it out, in a memfd this test may write.
  constexpr uint64_t kSets = 4, kArena = 4096;
  UniqueFd index_fd(::memfd_create("layout-index", MFD_CLOEXEC));
  REQUIRE(::ftruncate(index_fd.get(), static_cast<off_t>(index::IndexBytes(kSets, kArena))) == 0);
  Words index_words(index_fd.get());
  layout::Write(index_words.data(), index::kIndexLayout);
  // As the daemon made them: each maps.
  auto map_ring = [&] {
    return internal::PutRing::Map(Dup((*ring)->fd()), put_ring::kRingFileBytes);
  };
  auto map_slots = [&] { return internal::SlotTable::Map(Dup((*slots)->fd()), index::kSlotCount); };
  auto map_index = [&] { return internal::IndexReader::Map(index_fd, kSets, kArena); };
  REQUIRE(map_ring().ok());
  REQUIRE(map_slots().ok());
  REQUIRE(map_index().ok());
  Words ring_words((*ring)->fd());
  Words slot_words((*slots)->fd());

  // Another version: the error names the layout and both versions.
  ring_words.Word(layout::kVersion).store(2);
  Status st = map_ring().status();
  CHECK(st.IsProtocolError());
  CHECK(st.message() == "the put ring of depotd speaks layout version 2; this library reads 1");
  slot_words.Word(layout::kVersion).store(7);
  CHECK(map_slots().status().message() ==
        "the reference slots of depotd speaks layout version 7; this library reads 1");
  index_words.Word(layout::kVersion).store(0);
  CHECK(map_index().status().message() ==
        "the object index of depotd speaks layout version 0; this library reads 2");
  // Not the layout at all (an older daemon's, or anything else): the magic word says so.
  ring_words.Word(layout::kMagic).store(0);
  st = map_ring().status();
  CHECK(st.IsProtocolError());
  CHECK_THAT(st.message(), Contains("put ring") && Contains("magic word"));
  slot_words.Word(layout::kMagic).store(index::kIndexLayout.magic);
  CHECK_THAT(map_slots().status().message(), Contains("reference slots") && Contains("magic"));
}

TEST_CASE("the daemon's side sees overwritten layout words and reads nothing behind them",
          "[layout]") {
  SECTION("a put ring: its next take fails and breaks it, no lease is taken back through it") {
    auto ring = PutRing::Create("layout-ring-daemon");
    REQUIRE(ring.ok());
    Words words((*ring)->fd());
    CHECK((*ring)->Intact());
    CHECK_FALSE((*ring)->Pending());
    words.Word(layout::kMagic).store(words.Word(layout::kMagic).load() ^ 1);
    CHECK_FALSE((*ring)->Intact());
    CHECK((*ring)->Pending());  // so that it is taken, and its session closed
    CHECK_FALSE((*ring)->CanReturn());
    int taken = 0;
    Status st = (*ring)->Take([&](std::span<const uint8_t>, bool) {
      ++taken;
      return Status::OK();
    });
    CHECK(st.IsProtocolError());
    CHECK_THAT(st.message(), Contains("layout words were overwritten"));
    CHECK(taken == 0);
    CHECK_FALSE((*ring)->Pending());
    CHECK_FALSE((*ring)->Revoke());
  }
  SECTION("reference slots: they hold nothing while the words are wrong") {
    auto slots = ReferenceSlots::Create("layout-slots-daemon");
    REQUIRE(slots.ok());
    Words words((*slots)->fd(), index::kSlotBytes);
    words.Word(index::kSlotsWord).store(42);
    words.Word(index::kSlotHighWater).store(1);
    CHECK((*slots)->Intact());
    CHECK((*slots)->Holds(42));
    words.Word(layout::kVersion).store(2);
    CHECK_FALSE((*slots)->Intact());
    CHECK_FALSE((*slots)->Holds(42));
    std::unordered_set<ObjectId> ids;
    (*slots)->Collect(ids);
    CHECK(ids.empty());
    words.Word(layout::kVersion).store(index::kSlotsLayout.version);
    CHECK((*slots)->Holds(42));
  }
}

// A daemon Mallory may use, with the index on.
Daemon StartForMallory() {
  return StartOpen({"--allow-users", std::to_string(kMallory), "--segment-size", "8MiB"});
}

enum class Overwrite { kRingMagic, kRingVersion, kSlotsMagic, kSlotsVersion };

TEST_CASE("a client that overwrites its layout words is disconnected, and the daemon serves on",
          "[layout][hostile]") {
  NeedRoot();
  Daemon d = StartForMallory();
  Client root = d.Connect();
  std::vector<std::byte> bytes = Pattern(5000, 7);
  auto kept = root.Put(bytes);
  REQUIRE(kept.ok());
  for (Overwrite what : {Overwrite::kRingMagic, Overwrite::kRingVersion, Overwrite::kSlotsMagic,
                         Overwrite::kSlotsVersion}) {
    INFO("overwrite " << static_cast<int>(what));
    Channel message;
    int code = RunAs(kMallory, kMallory, {}, [&] {
      Raw r(d.socket());
      std::vector<uint8_t> reply;
      std::vector<UniqueFd> fds = r.HelloWithFds(reply);
      if (fds.size() != 3) return 101;  // the index's, the slots', the ring's
      bool ring = what == Overwrite::kRingMagic || what == Overwrite::kRingVersion;
      bool magic = what == Overwrite::kRingMagic || what == Overwrite::kSlotsMagic;
      Words words(fds[ring ? 2 : 1].get());
      words.Word(magic ? layout::kMagic : layout::kVersion).store(12345);
      // Any request of the session comes after the daemon looked at the words.
      flatbuffers::FlatBufferBuilder fbb(16);
      fbb.Finish(wire::CreateEmptyReply(fbb));
      r.TryWrite(proto::Encode(static_cast<uint16_t>(proto::MsgType::kPing), 5, fbb));
      Status st = r.ReadFinalError();
      message.Send(st.message());
      return static_cast<int>(st.code());
    });
    std::string said = message.Receive();
    CHECK(code == static_cast<int>(Status::Code::kProtocolError));
    CHECK_THAT(said, Contains("layout words were overwritten"));
    // Everyone else is served as before.
    auto got = root.Get(*kept, std::chrono::milliseconds(0));
    REQUIRE(got.ok());
    CHECK(Holds(*got, bytes));
    auto id = root.Put(Pattern(3000, 9));
    REQUIRE(id.ok());
    REQUIRE(root.Delete(*id).ok());
  }
  CHECK(WaitFor([&] { return StatusOf(root).clients == 1; }));
}

TEST_CASE("a library that reads another index layout is sent none, and the daemon serves on",
          "[layout]") {
  Daemon d;
  Client c = d.Connect();
  auto id = c.Put(Pattern(100, 3));
  REQUIRE(id.ok());
  // A library from before the index's layout changed says nothing of it (0: it reads version 1),
  // a later one a higher version: neither is sent this daemon's index, only the put ring.
  for (uint16_t reads : {uint16_t{0}, uint16_t{1}, uint16_t(index::kIndexLayout.version + 1)}) {
    INFO("reads layout " << reads);
    Raw r(d.socket());
    std::vector<uint8_t> reply;
    std::vector<UniqueFd> fds = r.HelloWithFds(reply, reads);
    CHECK(fds.size() == 1);
    CHECK(proto::Body<wire::HelloReply>(reply)->index_sets() == 0);
    CHECK(proto::Body<wire::HelloReply>(reply)->put_ring_bytes() == put_ring::kRingFileBytes);
  }
  Raw current(d.socket());
  std::vector<uint8_t> reply;
  CHECK(current.HelloWithFds(reply).size() == 3);  // the index's, the slots', the ring's
  CHECK(proto::Body<wire::HelloReply>(reply)->index_sets() > 0);
  CHECK_THAT(d.Log(), Contains("the client reads index layout 1, not " +
                               std::to_string(index::kIndexLayout.version)));
  // And the daemon serves everyone as before.
  auto got = c.Get(*id, std::chrono::milliseconds(0));
  REQUIRE(got.ok());
  CHECK(Holds(*got, Pattern(100, 3)));
}

// A fake daemon that answers a hello with a put ring whose version word it set.
TEST_CASE("a client sent a put ring of another layout version fails to connect, saying so",
          "[layout]") {
  std::string path = TempDir() + "/fake.sock";
  UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  REQUIRE(::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(listener.get(), 1) == 0);
  auto ring = PutRing::Create("fake-ring");
  REQUIRE(ring.ok());
  Words words((*ring)->fd());
  words.Word(layout::kVersion).store(put_ring::kPutRingLayout.version + 1);
  Channel message;
  pid_t client = Spawn([&] {
    ConnectOptions to_fake;
    to_fake.socket_path = path;
    auto c = Client::Connect(to_fake);
    message.Send(c.ok() ? "connected" : c.status().message());
    return c.ok() ? 0 : static_cast<int>(c.status().code());
  });
  UniqueFd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  REQUIRE(conn.valid());
  proto::Header h;
  REQUIRE(::recv(conn.get(), &h, sizeof h, MSG_WAITALL) == static_cast<ssize_t>(sizeof h));
  std::vector<uint8_t> body(h.length);
  REQUIRE(::recv(conn.get(), body.data(), body.size(), MSG_WAITALL) ==
          static_cast<ssize_t>(body.size()));
  flatbuffers::FlatBufferBuilder fbb(128);
  wire::HelloReplyBuilder b(fbb);
  b.add_version(proto::kProtocolVersion);
  b.add_put_ring_bytes(put_ring::kRingFileBytes);
  b.add_leases(true);
  fbb.Finish(b.Finish());
  std::vector<uint8_t> reply =
      proto::Encode(proto::ReplyType(proto::MsgType::kHello), h.request_id, fbb);
  std::vector<int> fds{(*ring)->fd()};
  REQUIRE(proto::SendWithFds(conn.get(), reply, fds, 0) == static_cast<ssize_t>(reply.size()));
  std::string said = message.Receive();
  conn.reset();
  int status = Wait(client);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == static_cast<int>(Status::Code::kProtocolError));
  CHECK(said == "the put ring of depotd speaks layout version 2; this library reads 1");
}

}  // namespace
}  // namespace depot::test
