// Put in one process, get in another: bytes identical, views zero-copy, many GUIDs in one call.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <thread>

#include "tests/daemon_fixture.h"

using namespace depot;
using namespace depot::test;
using namespace std::chrono_literals;

namespace {

bool SameBytes(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}

// Puts Pattern(size, seed) from a child process and returns the GUID.
Guid PutFromChild(const Daemon& d, size_t size, uint32_t seed) {
  Channel ch;
  pid_t pid = Spawn([&] {
    auto c = Client::Connect({d.socket(), "producer"});
    if (!c.ok()) return 1;
    auto data = Pattern(size, seed);
    auto id = c->Put(data);
    if (!id.ok()) return 2;
    ch.Send(id->ToString());
    return 0;
  });
  auto guid = Guid::Parse(ch.Receive());
  REQUIRE(WEXITSTATUS(Wait(pid)) == 0);
  REQUIRE(guid);
  return *guid;
}

}  // namespace

TEST_CASE("an object put by one process is read byte for byte by another", "[put_get]") {
  Daemon d;
  Client c = d.Connect();
  // Inline (one round trip), the inline limit, in a shared segment, and in a dedicated segment.
  for (size_t size : {size_t{1}, size_t{4096}, size_t{64 << 10}, size_t{64 << 10} + 1,
                      size_t{3 << 20}, size_t{100 << 20}}) {
    DYNAMIC_SECTION("size " << size) {
      Guid id = PutFromChild(d, size, static_cast<uint32_t>(size));
      auto obj = c.Get(id);
      INFO(obj.status().ToString());
      REQUIRE(obj.ok());
      REQUIRE(obj->frame_count() == 1);
      CHECK(obj->size() == size);
      CHECK(SameBytes(obj->frame(0), Pattern(size, static_cast<uint32_t>(size))));
      CHECK(obj->creator_uid() == ::getuid());  // the child's, which is this user
      CHECK(obj->creator_pid() != ::getpid());
      CHECK(obj->creator_pid() > 0);
    }
  }
}

TEST_CASE("a get maps the daemon's pages read-only without copying them", "[put_get]") {
  Daemon d({"--capacity", "1536MiB"});
  const size_t size = size_t{1} << 30;
  Channel ch;
  Channel done;
  // The producer keeps its own mapping and reports which file (device:inode) backs its frame.
  pid_t pid = Spawn([&] {
    auto c = Client::Connect({d.socket(), "producer"});
    auto draft = c->Create({size});
    if (!draft.ok()) return 1;
    std::memset(draft->frame(0).data(), 0x5a, size);
    std::string map = MappingOf(draft->frame(0).data());
    Guid id = draft->guid();
    if (!draft->Seal().ok()) return 2;
    ch.Send(id.ToString());
    ch.Send(map);
    done.Receive();
    return 0;
  });
  auto id = Guid::Parse(ch.Receive());
  std::string producer_map = ch.Receive();
  REQUIRE(id);

  Client c = d.Connect();
  uint64_t rss_before = ResidentBytes();
  auto obj = c.Get(*id);
  REQUIRE(obj.ok());
  uint64_t rss_after = ResidentBytes();
  // A copy would add 1 GiB to this process; a mapping adds nothing until the pages are read.
  CHECK(rss_after - rss_before < (32u << 20));

  std::string consumer_map = MappingOf(obj->frame(0).data());
  INFO("consumer: " << consumer_map << "\nproducer: " << producer_map);
  REQUIRE(!consumer_map.empty());
  CHECK(consumer_map.find("/memfd:depot-") != std::string::npos);
  CHECK(consumer_map.find(" r--s ") != std::string::npos);  // read-only, shared
  // Same device and inode as the producer's mapping: the very same pages.
  auto inode = [](const std::string& line) {
    std::istringstream in(line);
    std::string range, perms, offset, dev, ino;
    in >> range >> perms >> offset >> dev >> ino;
    return dev + ":" + ino;
  };
  CHECK(inode(consumer_map) == inode(producer_map));
  CHECK(obj->frame(0)[size / 2] == std::byte{0x5a});
  done.Send("bye");
  CHECK(WEXITSTATUS(Wait(pid)) == 0);
}

TEST_CASE("writing through a get's view faults", "[put_get]") {
  Daemon d;
  Client c = d.Connect();
  auto data = Pattern(1 << 20, 7);
  auto id = c.Put(data);
  REQUIRE(id.ok());
  int rc = RunChild([&] {
    auto child = Client::Connect({d.socket(), "writer"});
    auto obj = child->Get(*id);
    if (!obj.ok()) return 1;
    const_cast<std::byte*>(obj->frame(0).data())[0] = std::byte{1};
    return 0;
  });
  CHECK(rc == 128 + SIGSEGV);
  auto obj = c.Get(*id);
  REQUIRE(obj.ok());
  CHECK(SameBytes(obj->frame(0), data));
}

TEST_CASE("objects of several frames keep their frames and metadata and name", "[put_get]") {
  Daemon d;
  Client c = d.Connect();
  auto a = Pattern(100, 1), b = Pattern(0, 2), big = Pattern(5 << 20, 3);
  std::span<const std::byte> frames[] = {a, b, big};
  std::string meta = "dtype=f4;shape=3";
  CreateOptions opts;
  opts.metadata = std::as_bytes(std::span(meta));
  opts.name = "three frames";
  auto id = c.Put(frames, opts);
  REQUIRE(id.ok());

  Client other = d.Connect();
  auto obj = other.Get(*id);
  REQUIRE(obj.ok());
  REQUIRE(obj->frame_count() == 3);
  CHECK(SameBytes(obj->frame(0), a));
  CHECK(obj->frame(1).empty());
  CHECK(SameBytes(obj->frame(2), big));
  CHECK(SameBytes(obj->metadata(), std::as_bytes(std::span(meta))));
  CHECK(reinterpret_cast<uintptr_t>(obj->frame(2).data()) % 64 == 0);

  auto info = other.Stat(*id);
  REQUIRE(info.ok());
  CHECK(info->name == "three frames");
  CHECK(info->size == a.size() + big.size());
  CHECK(info->frames.size() == 3);
  CHECK(info->refcount == 1);  // `other` holds it
  CHECK(info->creator_pid == ::getpid());
  CHECK(info->state == ObjectInfo::State::kSealed);
}

TEST_CASE("a draft is written in place then sealed or aborted", "[put_get]") {
  Daemon d;
  Client c = d.Connect();
  auto draft = c.Create({1000, 2000});
  REQUIRE(draft.ok());
  std::memset(draft->frame(0).data(), 1, 1000);
  std::memset(draft->frame(1).data(), 2, 2000);
  Guid id = draft->guid();
  CHECK(c.Get(id).status().IsTimeout());  // exists, not sealed: a poll says so
  CHECK(!*c.Contains(id));
  REQUIRE(draft->Seal().ok());
  CHECK(draft->Seal().IsInvalidArgument());
  auto obj = c.Get(id);
  REQUIRE(obj.ok());
  CHECK(obj->frame(1)[1999] == std::byte{2});

  auto aborted = c.Create({4096});
  REQUIRE(aborted.ok());
  Guid gone = aborted->guid();
  REQUIRE(aborted->Abort().ok());
  CHECK(c.Get(gone).status().IsNotFound());
  {
    auto dropped = c.Create({4096});
    REQUIRE(dropped.ok());
    gone = dropped->guid();
  }  // destroyed unsealed: aborted
  CHECK(c.Get(gone).status().IsNotFound());
}

TEST_CASE("a proposed GUID names the object and a taken one is refused", "[put_get]") {
  Daemon d;
  Client c = d.Connect();
  Guid mine = Guid::Random();
  CreateOptions opts;
  opts.guid = mine;
  auto data = Pattern(10, 1);
  auto id = c.Put(data, opts);
  REQUIRE(id.ok());
  CHECK(*id == mine);
  auto again = c.Put(data, opts);
  CHECK(again.status().IsAlreadyExists());
  CHECK(again.status().message().find(mine.ToString()) != std::string::npos);
}

TEST_CASE("many GUIDs are fetched in one get", "[put_get]") {
  Daemon d;
  Client c = d.Connect();
  std::vector<Guid> ids;
  for (uint32_t i = 0; i < 200; ++i) {
    auto id = c.Put(Pattern(100 + i, i));
    REQUIRE(id.ok());
    ids.push_back(*id);
  }
  Guid unknown = Guid::Random();
  ids.push_back(unknown);

  Client reader = d.Connect();
  auto results = reader.Get(ids);
  REQUIRE(results.size() == ids.size());
  for (uint32_t i = 0; i < 200; ++i) {
    REQUIRE(results[i].ok());
    CHECK(SameBytes(results[i]->frame(0), Pattern(100 + i, i)));
  }
  CHECK(results[200].status().IsNotFound());
  auto status = c.GetStatus();
  REQUIRE(status.ok());
  CHECK(status->objects_sealed == 200);
}

TEST_CASE("get, contains and delete of more GUIDs than a request names go in batches",
          "[put_get]") {
  Daemon d;
  Client c = d.Connect();
  std::vector<Guid> ids;
  for (uint32_t i = 0; i < 3; ++i) ids.push_back(*c.Put(Pattern(10, i)));
  // 5,000 GUIDs (three requests) naming three objects over and over, and one unknown at the end.
  std::vector<Guid> many;
  for (uint32_t i = 0; i < 5000; ++i) many.push_back(ids[i % 3]);
  many.push_back(Guid::Random());

  Client reader = d.Connect();
  auto got = reader.Get(many, 100ms);
  REQUIRE(got.size() == many.size());
  for (uint32_t i = 0; i < 5000; ++i) {
    REQUIRE(got[i].ok());
    CHECK(SameBytes(got[i]->frame(0), Pattern(10, i % 3)));
  }
  CHECK(got.back().status().IsTimeout());

  auto present = reader.Contains(many);
  REQUIRE(present.size() == many.size());
  CHECK(std::all_of(present.begin(), present.end() - 1, [](auto& p) { return p.ok() && *p; }));
  CHECK((present.back().ok() && !*present.back()));

  auto deleted = c.Delete(many);
  REQUIRE(deleted.size() == many.size());
  CHECK((deleted[0].ok() && deleted[1].ok() && deleted[2].ok()));
  CHECK(deleted[3].IsNotFound());  // the same object again: deleted already
  CHECK(deleted.back().IsNotFound());
}

TEST_CASE("a repeated get of a held object is answered locally", "[put_get]") {
  Daemon d;
  Client c = d.Connect();
  auto id = c.Put(Pattern(1 << 20, 9));
  REQUIRE(id.ok());
  auto first = c.Get(*id);
  REQUIRE(first.ok());
  uint64_t requests = c.GetStatus()->requests;
  auto second = c.Get(*id);  // this process holds the object: no request reaches the daemon
  REQUIRE(second.ok());
  CHECK(second->frame(0).data() == first->frame(0).data());
  CHECK(c.GetStatus()->requests == requests + 1);  // the status request alone
}

TEST_CASE("threads share one client and a waiting get does not block the others", "[put_get]") {
  // Catch's assertions are not thread-safe: threads count what went wrong, the test checks it.
  Daemon d;
  Client c = d.Connect();
  Guid later = Guid::Random();
  Status waited = Status::Unavailable("not yet");
  std::thread waiter([&] { waited = c.Get(later, 20s).status(); });
  REQUIRE(WaitFor([&] { return c.GetStatus()->gets_waiting == 1; }));
  std::atomic<int> failures{0}, rounds{0};
  std::vector<std::thread> workers;
  for (uint32_t t = 0; t < 4; ++t) {
    workers.emplace_back([&, t] {
      for (uint32_t i = 0; i < 50; ++i) {
        size_t size = i % 5 == 0 ? (200u << 10) + i : 1000 + 97 * i;  // inline and in place
        auto data = Pattern(size, t * 100 + i);
        auto id = c.Put(data);
        auto obj = id.ok() ? c.Get(*id) : Result<Object>(id.status());
        bool ok = obj.ok() && SameBytes(obj->frame(0), data) && c.Delete(*id).ok();
        (ok ? rounds : failures).fetch_add(1);
      }
    });
  }
  for (auto& w : workers) w.join();
  CHECK(failures == 0);
  CHECK(rounds == 200);
  CHECK(c.GetStatus()->gets_waiting == 1);  // still parked while all of that went through
  CreateOptions opts;
  opts.guid = later;
  REQUIRE(c.Put(Pattern(10, 1), opts).ok());
  waiter.join();
  INFO(waited.ToString());
  CHECK(waited.ok());
}
