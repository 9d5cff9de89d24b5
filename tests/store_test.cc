// Tests of the daemon's request handling (daemon/store.h) without sockets or processes: a real
// Store with a small real host pool, driven through fake peers (tests/store_fixture.h). Parked
// gets, disconnects and eviction are in store_waits_test.cc.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/store_fixture.h"

using namespace depot;
using namespace depot::test;
using Catch::Matchers::Contains;
namespace fb = flatbuffers;

namespace {

using Codes = std::vector<std::string>;

Status Ping(StoreHarness& h, FakeClient& c) {
  fb::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateEmptyReply(fbb));
  return h.Send(c, MsgType::kPing, fbb);
}

int AccessMode(const UniqueFd& fd) { return ::fcntl(fd.get(), F_GETFL) & O_ACCMODE; }

off_t FdSize(const UniqueFd& fd) {
  struct stat st {};
  REQUIRE(::fstat(fd.get(), &st) == 0);
  return st.st_size;
}

}  // namespace

TEST_CASE("store: hello comes first, once, in this protocol version", "[store]") {
  StoreHarness h;
  FakeClient& watcher = h.Hello();

  SECTION("anything before hello is a protocol error, answered by nobody") {
    FakeClient& c = h.Connect();
    Status st = Ping(h, c);
    CHECK(st.IsProtocolError());
    CHECK_THAT(st.message(), Contains("expected hello") && Contains("ping"));
    CHECK(h.Create(watcher, {}).code() == "OK");  // others go on
    fb::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreateGuidRequest(fbb));
    CHECK(h.Send(c, MsgType::kSeal, fbb).IsProtocolError());
    CHECK(c.peer.received.empty());  // the session, not the store, writes the error
    CHECK(h.StatusOf(watcher).errors_of(Status::Code::kProtocolError) == 2);
  }
  SECTION("hello twice") {
    FakeClient& c = h.Hello();
    Status st = h.SayHello(c);
    CHECK(st.IsProtocolError());
    CHECK_THAT(st.message(), Contains("twice"));
  }
  SECTION("another protocol version") {
    FakeClient& c = h.Connect();
    Status st = h.SayHello(c, proto::kProtocolVersion + 1);
    CHECK(st.IsProtocolError());
    CHECK_THAT(st.message(), Contains("version 2") && Contains("version 1"));
    CHECK(Ping(h, c).IsProtocolError());  // still not greeted
  }
  SECTION("a client name of at most 256 bytes") {
    CHECK(h.SayHello(h.Connect(), proto::kProtocolVersion, std::string(256, 'n')).ok());
    FakeClient& c = h.Connect();
    Status st = h.SayHello(c, proto::kProtocolVersion, std::string(257, 'n'));
    CHECK(st.IsInvalidArgument());
    CHECK_THAT(st.message(), Contains("257"));
    CHECK(Ping(h, c).IsProtocolError());
  }
  SECTION("the hello reply") {
    FakeClient& c = h.Connect();
    fb::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreateHelloRequestDirect(fbb, proto::kProtocolVersion, "x"));
    Message m = h.Call(c, MsgType::kHello, fbb);
    const auto* r = m.As<wire::HelloReply>();
    CHECK(r->session_id() == c.id);
    CHECK(r->daemon_version()->str() == "store_test");
    CHECK(r->devices_unavailable()->str() == kNoDevices);
    CHECK(r->device_pools()->size() == 0);
  }
}

TEST_CASE("store: who may connect", "[store]") {
  auto hello = [](StoreHarness& h, uid_t uid, gid_t gid, std::vector<gid_t> groups = {}) {
    return h.SayHello(h.Connect(uid, gid, std::move(groups)));
  };
  constexpr gid_t kOther = 7;

  SECTION("allow lists") {
    StoreHarness h({.allow_users = {1001}, .allow_groups = {2001}});
    CHECK(hello(h, 0, kOther).ok());           // root
    CHECK(hello(h, kDaemonUid, kOther).ok());  // the daemon's own user
    CHECK(hello(h, 1001, kOther).ok());
    CHECK(hello(h, 1002, 2001).ok());               // primary group
    CHECK(hello(h, 1003, kOther, {8, 2001}).ok());  // supplementary group
    // With a list given, the socket's group no longer admits anybody by itself.
    Status st = hello(h, 1004, kSocketGid, {kSocketGid});
    CHECK(st.IsPermissionDenied());
    CHECK_THAT(st.message(), Contains("uid 1004") && Contains("allow_users"));
    CHECK(h.store().sessions() == 6);  // a refused one stays until its Session closes it
  }
  SECTION("the socket's group when both lists are empty") {
    StoreHarness h;
    CHECK(hello(h, 1005, kSocketGid).ok());
    CHECK(hello(h, 1006, kOther, {kSocketGid}).ok());
    Status st = hello(h, 1007, kOther, {8});
    CHECK(st.IsPermissionDenied());
    CHECK_THAT(st.message(), Contains("uid 1007") && Contains("gid " + std::to_string(kSocketGid)));
    h.store().SetSocketGroup(8);
    CHECK(hello(h, 1007, kOther, {8}).ok());
    CHECK(hello(h, 1005, kSocketGid).IsPermissionDenied());
  }
  SECTION("a refusal is counted among the errors of status") {
    StoreHarness h;
    FakeClient& watcher = h.Hello();
    CHECK(hello(h, 1007, kOther).IsPermissionDenied());
    CHECK(h.StatusOf(watcher).errors_of(Status::Code::kPermissionDenied) == 1);
  }
}

TEST_CASE("store: status says while an index moves to a bigger one", "[store][index]") {
  StoreHarness h({.capacity = 16 * kMiB, .segment_size = 4 * kMiB, .index_entries = 4096});
  FakeClient& c = h.Hello();
  CHECK(h.StatusOf(c).index_moving == 0);
  // Puts until the index is crowded: the bigger one is made on the daemon's helper thread and
  // handed to the loop, which this test has not run yet, and the move's steps go there too.
  uint64_t puts = 0;
  while (h.StatusOf(c).index_moving == 0) {
    REQUIRE(puts < 4096);
    h.Put(c, 64);
    ++puts;
  }
  CHECK(h.StatusOf(c).index_growths == 0);
  for (int i = 0; i < 500 && h.StatusOf(c).index_moving != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    h.RunFor(std::chrono::milliseconds(10));
  }
  StatusSummary st = h.StatusOf(c);
  CHECK(st.index_moving == 0);
  CHECK(st.index_growths == 1);
  CHECK(st.index_entries == 8192);
}

TEST_CASE("store: create, seal, get, release, delete", "[store]") {
  StoreHarness h;
  FakeClient& c = h.Hello();
  FakeClient& other = h.Hello();
  Message created = h.Create(c, {.sizes = {1000, 24}, .metadata = {1, 2, 3}, .name = "obj"});
  REQUIRE(created.code() == "OK");
  Guid g = CreatedGuid(created);
  CHECK_FALSE(g.is_nil());
  CHECK((g.hi & 0xf000) == 0x4000);  // a UUID v4
  const auto* frames = created.As<wire::CreateReply>()->frames();
  REQUIRE(frames->size() == 2);
  CHECK(frames->Get(0)->size() == 1000);
  CHECK(frames->Get(1)->size() == 24);

  // Being created: present, but neither contained, nor gettable, nor deletable.
  CHECK(ResultCodes(h.Contains(c, {g})) == Codes{"NotFound"});
  CHECK(h.Stat(c, g).As<wire::StatReply>()->info()->state() == wire::State::Creating);
  CHECK(ResultCodes(h.Get(c, {g})) == Codes{"Timeout"});  // a poll: "not sealed yet"
  CHECK(ResultCodes(h.Delete(c, {g})) == Codes{"InvalidArgument"});
  CHECK(h.Seal(other, g).code() == "PermissionDenied");
  CHECK(h.Abort(other, g).code() == "PermissionDenied");

  CHECK(h.Seal(c, g, 77).code() == "OK");
  CHECK(h.Seal(c, g).code() == "InvalidArgument");
  CHECK(ResultCodes(h.Contains(other, {g, G(1)})) == Codes{"OK", "NotFound"});
  Message stat = h.Stat(other, g);
  const wire::ObjectInfo* info = stat.As<wire::StatReply>()->info();
  CHECK(info->state() == wire::State::Sealed);
  CHECK(info->size() == 1024);
  CHECK(info->name()->str() == "obj");
  CHECK(info->metadata()->size() == 3);
  CHECK(info->creator_uid() == kDaemonUid);
  CHECK(h.List(other).As<wire::ListReply>()->objects()->size() == 1);

  Message got = h.Get(other, {g});
  REQUIRE(ResultCodes(got) == Codes{"OK"});
  const wire::GetResult* r = got.As<wire::GetReply>()->results()->Get(0);
  CHECK(r->frames()->Get(1)->offset() == frames->Get(1)->offset());
  CHECK(r->metadata()->Get(2) == 3);
  CHECK(r->checksum() == 77u);
  uint64_t handle = Handles(got)[0];
  CHECK(h.Stat(c, g).As<wire::StatReply>()->info()->refcount() == 1);

  // Deleted while held: gone from view at once, freed at the last release.
  CHECK(ResultCodes(h.Delete(c, {g})) == Codes{"OK"});
  CHECK(ResultCodes(h.Get(c, {g})) == Codes{"NotFound"});
  StatusSummary s = h.StatusOf(c);
  CHECK(s.deleted == 1);
  CHECK(s.used > 0);
  h.Release(other, {handle});
  h.Release(other, {handle});  // once too often: ignored
  s = h.StatusOf(c);
  CHECK(s.deleted == 0);
  CHECK(s.used == 0);
  CHECK(ResultCodes(h.Delete(c, {g})) == Codes{"NotFound"});

  Guid aborted = CreatedGuid(h.Create(c, {}));
  CHECK(h.Abort(c, aborted).code() == "OK");
  CHECK(h.Stat(c, aborted).code() == "NotFound");
  CHECK(h.StatusOf(c).used == 0);
}

TEST_CASE("store: one reply is bounded whatever the request", "[store]") {
  StoreHarness h({.max_metadata = 16 * kKiB, .max_message_size = 1 * kMiB});
  FakeClient& c = h.Hello();
  std::vector<uint8_t> metadata(16 * kKiB, 7);
  Guid g = CreatedGuid(
      h.Create(c, {.metadata = metadata, .inline_data = std::vector<uint8_t>(1024), .seal = true}));

  // One GUID named 2,048 times: every result answered, its frames and metadata stored once.
  Message repeated = h.Get(c, std::vector<Guid>(proto::kMaxGuidsPerRequest, g));
  REQUIRE(repeated.code() == "OK");
  CHECK(ResultCodes(repeated) == Codes(proto::kMaxGuidsPerRequest, "OK"));
  CHECK(repeated.As<wire::GetReply>()->results()->Get(2047)->metadata()->size() == 16 * kKiB);
  CHECK(repeated.body.size() < 256 * kKiB);  // not 2,048 copies of 16 KiB
  // One more is refused: the request itself (the client library splits longer lists).
  CHECK(h.Get(c, std::vector<Guid>(proto::kMaxGuidsPerRequest + 1, g)).code() == "InvalidArgument");

  // Distinct objects whose metadata alone passes max_message_size: refused, nothing held.
  std::vector<Guid> many;
  for (int i = 0; i < 80; ++i) {
    many.push_back(CreatedGuid(h.Create(c, {.sizes = {8},
                                            .metadata = metadata,
                                            .inline_data = std::vector<uint8_t>(8),
                                            .seal = true})));
  }
  Message refused = h.Get(c, many);
  CHECK(refused.code() == "InvalidArgument");
  CHECK_THAT(refused.message(), Contains("max_message_size") && Contains("1048576"));
  CHECK(h.Stat(c, many[0]).As<wire::StatReply>()->info()->refcount() == 0);
}

TEST_CASE("store: create and seal in one request", "[store]") {
  StoreHarness h;
  FakeClient& c = h.Hello();
  std::vector<uint8_t> data{'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'};
  Message created = h.Create(c, {.sizes = {5, 3}, .inline_data = data, .seal = true});
  REQUIRE(created.code() == "OK");
  Guid g = CreatedGuid(created);
  // Nothing to map for the creator: no segment travels with the reply.
  CHECK(created.fds.empty());
  CHECK(created.As<wire::CreateReply>()->segments()->size() == 0);
  CHECK(ResultCodes(h.Contains(c, {g})) == Codes{"OK"});

  Message got = h.Get(c, {g});
  REQUIRE(got.fds.size() == 1);
  const auto* r = got.As<wire::GetReply>();
  auto size = static_cast<size_t>(r->segments()->Get(0)->size());
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, got.fds[0].get(), 0);
  REQUIRE(map != MAP_FAILED);
  std::string bytes;
  for (const wire::FrameLocation* f : *r->results()->Get(0)->frames()) {
    bytes.append(static_cast<const char*>(map) + f->offset(), f->size());
  }
  ::munmap(map, size);
  CHECK(bytes == "abcdefgh");
}

TEST_CASE("store: what a create may ask for", "[store]") {
  StoreHarness h;
  FakeClient& c = h.Hello();
  auto refused = [&](const CreateArgs& args, const std::string& code, const std::string& text) {
    Message m = h.Create(c, args);
    CHECK(m.code() == code);
    CHECK_THAT(m.message(), Contains(text));
  };
  refused({.sizes = {}}, "InvalidArgument", "1 to 8 frames, not 0");
  refused({.sizes = std::vector<uint64_t>(9, 1)}, "InvalidArgument", "not 9");
  refused({.metadata = std::vector<uint8_t>(1025)}, "InvalidArgument", "metadata of 1025");
  refused({.name = std::string(257, 'n')}, "InvalidArgument", "name of 257");
  refused({.guid = Guid{}}, "InvalidArgument", "nil GUID");
  refused({.sizes = {5 * kMiB}}, "StoreFull", "larger than the store's capacity");
  refused({.inline_data = std::vector<uint8_t>(1024)}, "InvalidArgument", "come with seal");
  refused({.inline_data = std::vector<uint8_t>(10), .seal = true}, "InvalidArgument",
          "inline data of 10 bytes");
  refused({.seal = true}, "InvalidArgument", "needs the inline data");
  refused({.pools = {1}}, "Unavailable", std::string("device pools: unavailable (") + kNoDevices);
  refused({.pools = {0, 0}}, "InvalidArgument", "2 frame pools given for 1 frames");
  CHECK(h.Create(c, {.pools = {0}}).code() == "OK");

  h.Put(c, 100, false, G(1));
  CHECK(h.Create(c, {.guid = G(2)}).code() == "OK");
  refused({.guid = G(1)}, "AlreadyExists", G(1).ToString());  // sealed
  refused({.guid = G(2)}, "AlreadyExists", G(2).ToString());  // being created
  StatusSummary s = h.StatusOf(c);
  CHECK(s.creating == 2);
  CHECK(s.sealed == 1);
  CHECK(s.errors_of(Status::Code::kInvalidArgument) == 9);
}

TEST_CASE("store: quotas", "[store]") {
  SECTION("per user, over all its connections") {
    StoreHarness h({.user_quota = {.bytes = 10 * kKiB, .objects = 3}, .allow_users = {1001, 1002}});
    FakeClient& a1 = h.Hello(1001);
    FakeClient& a2 = h.Hello(1001);
    FakeClient& b = h.Hello(1002);
    Guid first = h.Put(a1, 4 * kKiB);
    h.Put(a2, 4 * kKiB);
    Message m = h.Create(a1, {.sizes = {4 * kKiB}});
    CHECK(m.code() == "QuotaExceeded");
    CHECK_THAT(m.message(), Contains("uid 1001") && Contains("user_quota_bytes"));
    h.Put(b, 4 * kKiB);  // another user's quota
    // An object counts from its create, sealed or not.
    Guid unsealed = CreatedGuid(h.Create(a2, {.sizes = {kKiB}}));
    m = h.Create(a1, {.sizes = {1}});
    CHECK(m.code() == "QuotaExceeded");
    CHECK_THAT(m.message(), Contains("uid 1001 has 3 objects") && Contains("user_quota_objects"));
    StatusSummary s = h.StatusOf(b);
    CHECK(s.users[1001] == std::pair<uint64_t, uint64_t>{3, 9 * kKiB});
    CHECK(s.users[1002] == std::pair<uint64_t, uint64_t>{1, 4 * kKiB});

    // Only the creating user may delete; deleting and aborting give the use back.
    CHECK(ResultCodes(h.Delete(b, {first})) == Codes{"PermissionDenied"});
    CHECK(ResultCodes(h.Delete(a2, {first})) == Codes{"OK"});
    CHECK(h.Abort(a2, unsealed).code() == "OK");
    h.Put(a1, 6 * kKiB);
    CHECK(h.StatusOf(b).users[1001] == std::pair<uint64_t, uint64_t>{2, 10 * kKiB});
  }
  SECTION("per connection") {
    StoreHarness h({.client_quota = {.bytes = 8 * kKiB, .objects = 2}});
    FakeClient& c = h.Hello();
    Guid first = h.Put(c, 4 * kKiB);
    h.Put(c, 4 * kKiB);
    Message m = h.Create(c, {.sizes = {1}});
    CHECK(m.code() == "QuotaExceeded");
    CHECK_THAT(m.message(),
               Contains("this connection has 2 objects") && Contains("client_quota_objects"));
    h.Put(h.Hello(), 4 * kKiB);  // the same user on another connection
    CHECK(ResultCodes(h.Delete(c, {first})) == Codes{"OK"});
    m = h.Create(c, {.sizes = {5 * kKiB}});
    CHECK(m.code() == "QuotaExceeded");
    CHECK_THAT(m.message(), Contains("client_quota_bytes"));
    h.Put(c, 4 * kKiB);
  }
}

TEST_CASE("store: per-user namespaces", "[store]") {
  StoreHarness h({.per_user_namespaces = true, .allow_users = {1001, 1002, 1003}});
  FakeClient& root = h.Hello(0);
  FakeClient& a = h.Hello(1001);
  FakeClient& b = h.Hello(1002);
  CHECK(h.StatusOf(root).namespaces == 3);

  // One GUID, two objects.
  h.Put(a, 1000, false, G(1));
  h.Put(b, 2000, false, G(1));
  CHECK(h.Stat(a, G(1)).As<wire::StatReply>()->info()->size() == 1000);
  CHECK(h.Stat(b, G(1)).As<wire::StatReply>()->info()->creator_uid() == 1002);

  h.Put(a, 100, false, G(2));
  CHECK(ResultCodes(h.Contains(b, {G(2)})) == Codes{"NotFound"});
  CHECK(ResultCodes(h.Get(b, {G(2)})) == Codes{"NotFound"});
  CHECK(h.Stat(b, G(2)).code() == "NotFound");
  CHECK(h.List(b).As<wire::ListReply>()->objects()->size() == 1);
  CHECK(ResultCodes(h.Delete(b, {G(2)})) == Codes{"NotFound"});
  CHECK(ResultCodes(h.Contains(a, {G(2)})) == Codes{"OK"});

  // A get waits for its own namespace's object.
  uint64_t waiting = h.SendGet(b, {G(3)}, -1);
  h.Put(a, 100, false, G(3));
  CHECK_FALSE(StoreHarness::Reply(b, waiting));
  h.Put(b, 100, false, G(3));
  std::optional<Message> answer = StoreHarness::Reply(b, waiting);
  REQUIRE(answer);
  CHECK(ResultCodes(*answer) == Codes{"OK"});

  // A namespace goes with its last session, unless it holds objects.
  h.Close(h.Hello(1003));
  CHECK(h.StatusOf(root).namespaces == 3);
  h.Close(a);
  CHECK(h.StatusOf(root).namespaces == 3);
  FakeClient& again = h.Hello(1001);
  CHECK(ResultCodes(h.Delete(again, {G(1), G(2), G(3)})) == Codes{"OK", "OK", "OK"});
  h.Close(again);
  CHECK(h.StatusOf(root).namespaces == 2);
}

TEST_CASE("store: events name the session that caused them", "[store]") {
  StoreHarness h;
  FakeClient& watcher = h.Hello();
  FakeClient& quiet = h.Hello();
  CHECK(h.Subscribe(watcher).code() == "OK");
  FakeClient& c = h.Hello();
  Guid g = CreatedGuid(h.Create(c, {.sizes = {100}, .name = "evented"}));
  h.Seal(c, g);
  h.Delete(c, {g});
  h.Abort(c, CreatedGuid(h.Create(c, {})));
  h.Close(c);

  using K = wire::EventKind;
  std::vector<K> kinds;
  for (const Message& m : StoreHarness::Events(watcher)) {
    const auto* e = m.As<wire::Event>();
    kinds.push_back(e->kind());
    CHECK(m.request_id == 0);
    CHECK(e->session_id() == c.id);
    CHECK(e->uid() == kDaemonUid);
    if (kinds.size() >= 2 && kinds.size() <= 4) {  // created, sealed, deleted: the named object
      CHECK(proto::FromWire(*e->guid()) == g);
      CHECK(e->name()->str() == "evented");
      CHECK(e->size() == 100);
    }
  }
  CHECK(kinds == std::vector<K>{K::ClientConnected, K::Created, K::Sealed, K::Deleted, K::Created,
                                K::Aborted, K::ClientDisconnected});
  CHECK(StoreHarness::Events(quiet).empty());

  // A subscriber that does not read loses events, and learns how many with the next one.
  watcher.peer.backlog = 1 << 20;
  h.Put(quiet, 10);
  watcher.peer.backlog = 0;
  h.Put(quiet, 10);
  std::vector<Message> events = StoreHarness::Events(watcher);
  REQUIRE(events.size() == 2);
  CHECK(events[0].As<wire::Event>()->dropped() == 2);
  CHECK(events[1].As<wire::Event>()->dropped() == 0);

  // Today a subscriber that closes is sent its own disconnect (the Session, closed, drops it).
  h.Close(watcher);
  events = StoreHarness::Events(watcher);
  REQUIRE(events.size() == 1);
  CHECK(events[0].As<wire::Event>()->kind() == K::ClientDisconnected);
  CHECK(events[0].As<wire::Event>()->session_id() == watcher.id);
}

TEST_CASE("store: a segment's fds travel once per session each, a large object's too", "[store]") {
  StoreHarness h({.keep_warm = 2 * kMiB});  // 1 MiB segments
  FakeClient& a = h.Hello();
  FakeClient& b = h.Hello();
  Message first = h.Create(a, {.sizes = {kKiB}});
  REQUIRE(first.fds.size() == 1);
  const wire::SegmentInfo* seg = first.As<wire::CreateReply>()->segments()->Get(0);
  CHECK_FALSE(seg->dedicated());
  CHECK(seg->size() == kMiB);
  CHECK(FdSize(first.fds[0]) == static_cast<off_t>(kMiB));
  Message second = h.Create(a, {.sizes = {kKiB}});
  CHECK(second.fds.empty());
  CHECK(second.As<wire::CreateReply>()->segments()->size() == 0);
  Guid x = CreatedGuid(first);
  Guid y = CreatedGuid(second);
  h.Seal(a, x);
  h.Seal(a, y);
  // Creates bring the read-write fd; gets the read-only one, even to the creator.
  CHECK(AccessMode(first.fds[0]) == O_RDWR);
  Message own = h.Get(a, {x, y});
  REQUIRE(own.fds.size() == 1);
  CHECK(AccessMode(own.fds[0]) == O_RDONLY);
  CHECK(h.Get(a, {x, y}).fds.empty());
  Message other = h.Get(b, {x, y});
  REQUIRE(other.fds.size() == 1);  // one segment
  CHECK(AccessMode(other.fds[0]) == O_RDONLY);
  CHECK(h.Get(b, {x}).fds.empty());

  // A large object's segment is kept warm for the next large objects when it falls empty, so
  // its clients keep it mapped like any other: its fds too travel once per session.
  constexpr uint64_t kLarge = kMiB + kMiB / 2;  // two fit beside the shared segment
  Message big = h.Create(a, {.sizes = {kLarge}});
  REQUIRE(big.fds.size() == 1);
  CHECK_FALSE(big.As<wire::CreateReply>()->segments()->Get(0)->dedicated());
  CHECK(FdSize(big.fds[0]) == static_cast<off_t>(kLarge));
  CHECK(AccessMode(big.fds[0]) == O_RDWR);
  Guid z = CreatedGuid(big);
  h.Seal(a, z);
  Message large = h.Get(b, {z, z});
  REQUIRE(large.fds.size() == 1);
  CHECK(AccessMode(large.fds[0]) == O_RDONLY);
  CHECK(h.Get(b, {z}).fds.empty());
  CHECK(h.Get(a, {z}).fds.size() == 1);  // its read-only one, once
  CHECK(h.Get(a, {z, x}).fds.empty());
  // Another, in a segment of its own (z's is full); deleted, then made again: the same segment,
  // reused without its fd again.
  Message other_big = h.Create(a, {.sizes = {kLarge}});
  REQUIRE(other_big.fds.size() == 1);
  Guid w = CreatedGuid(other_big);
  h.Seal(a, w);
  CHECK(ResultCodes(h.Delete(a, {w})) == Codes{"OK"});
  Message again = h.Create(a, {.sizes = {kLarge}});
  CHECK(again.fds.empty());
  CHECK(again.As<wire::CreateReply>()->frames()->Get(0)->segment() ==
        other_big.As<wire::CreateReply>()->frames()->Get(0)->segment());
}

TEST_CASE("store: each uid creates in segments of its own", "[store]") {
  StoreHarness h;
  FakeClient& alice = h.Hello(41001);
  FakeClient& bob = h.Hello(41002);
  FakeClient& alice2 = h.Hello(41001);
  auto segment_of = [](const Message& m) {
    return m.As<wire::CreateReply>()->frames()->Get(0)->segment();
  };
  Message a = h.Create(alice, {.sizes = {kKiB}});
  Message b = h.Create(bob, {.sizes = {kKiB}});
  Message a2 = h.Create(alice2, {.sizes = {kKiB}});
  CHECK(segment_of(a) != segment_of(b));
  CHECK(segment_of(a2) == segment_of(a));  // one uid's sessions share its segments
  REQUIRE(b.fds.size() == 1);
  CHECK(AccessMode(b.fds[0]) == O_RDWR);
  h.Seal(alice, CreatedGuid(a));
  // Bob reads alice's object through a read-only fd of alice's segment.
  Message got = h.Get(bob, {CreatedGuid(a)});
  REQUIRE(got.fds.size() == 1);
  CHECK(AccessMode(got.fds[0]) == O_RDONLY);
}

TEST_CASE("store: sessions that have a segment are told when it is given back", "[store]") {
  StoreHarness h;  // 1 MiB segments: objects of 600 KiB take one each
  FakeClient& a = h.Hello();
  FakeClient& b = h.Hello();
  FakeClient& never = h.Hello();
  Guid p = h.Put(a, 600 * kKiB);
  Guid q = h.Put(a, 600 * kKiB);
  Message got = h.Get(b, {p, q});
  REQUIRE(got.fds.size() == 2);
  h.Release(b, Handles(got));
  h.Delete(a, {p});  // its segment is kept, empty, as the spare
  CHECK(a.peer.received.empty());
  h.Delete(a, {q});  // a second empty segment is given back
  for (FakeClient* c : {&a, &b}) {
    REQUIRE(c->peer.received.size() == 1);
    const Message& m = c->peer.received.front();
    CHECK(m.type == static_cast<uint16_t>(MsgType::kSegmentsRetired));
    const auto* retired = m.As<wire::SegmentsRetired>();
    CHECK(retired->pool() == 0);
    REQUIRE(retired->ids()->size() == 1);
    CHECK(retired->ids()->Get(0) == got.As<wire::GetReply>()->segments()->Get(1)->id());
  }
  CHECK(never.peer.received.empty());
  // The spare is reused without its fd again; a new segment's fd comes with the create.
  CHECK(h.Create(a, {.sizes = {600 * kKiB}}).fds.empty());
  CHECK(h.Create(a, {.sizes = {600 * kKiB}}).fds.size() == 1);
}

// A retired segment stays counted (reserved, and retired_held) until every session told of it
// has said it dropped it, or has gone; nobody else can let go in its place.
TEST_CASE("store: a retired segment is held until the sessions told of it drop it", "[store]") {
  StoreHarness h;  // 1 MiB segments: objects of 600 KiB take one each
  FakeClient& a = h.Hello();
  FakeClient& b = h.Hello();
  FakeClient& c = h.Hello();
  FakeClient& other = h.Hello();
  Guid p = h.Put(a, 600 * kKiB);
  Guid q = h.Put(a, 600 * kKiB);
  for (FakeClient* reader : {&b, &c}) {
    Message got = h.Get(*reader, {q});
    h.Release(*reader, Handles(got));
  }
  h.Delete(a, {p});
  h.Delete(a, {q});  // q's segment is given back; a, b and c have it
  CHECK(h.StatusOf(a).retired_held == kMiB);
  CHECK(h.StatusOf(a).reserved == 2 * kMiB);
  // A session that never had it cannot let go for the others; a repeated drop counts once.
  fb::FlatBufferBuilder fbb;
  uint32_t id = 0;
  for (const Message& m : a.peer.received) {
    if (m.type == static_cast<uint16_t>(MsgType::kSegmentsRetired)) {
      id = m.As<wire::SegmentsRetired>()->ids()->Get(0);
    }
  }
  REQUIRE(id != 0);
  std::vector<uint32_t> ids{id, id, 999};
  fbb.Finish(wire::CreateSegmentsRetired(fbb, fbb.CreateVector(ids), 0));
  REQUIRE(h.Send(other, MsgType::kSegmentsDropped, fbb).ok());
  CHECK(h.StatusOf(a).retired_held == kMiB);
  CHECK(h.DropRetired(a) == 1);
  CHECK(h.DropRetired(a) == 0);
  CHECK(h.StatusOf(a).retired_held == kMiB);  // b and c still map it
  CHECK(h.DropRetired(b) == 1);
  CHECK(h.StatusOf(a).retired_held == kMiB);
  h.Close(c);  // gone: its mappings with it
  CHECK(h.StatusOf(a).retired_held == 0);
  CHECK(h.StatusOf(a).reserved == kMiB);  // the spare
}
