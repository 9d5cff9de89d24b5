// Gets without a round trip, against a real daemon from real processes: a sealed object found in
// the namespace's shared index is held through a reference slot, with no request; deletes,
// eviction and kill -9 respect those holds; garbage another user writes into its own slots
// harms nobody; each per-user namespace has an index of its own; and a full or absent index
// leaves every get to the daemon, as before.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "proto/index_layout.h"
#include "tests/other_users.h"
#include "tests/raw_connection.h"

using namespace depot;
using namespace depot::test;

namespace {

// This process's mappings whose file name starts with `prefix` ("/memfd:index-", say): each
// one's address and size, and its name.
struct Mapping {
  void* addr;
  size_t size;
  std::string name;
};
std::vector<Mapping> MappingsOf(const std::string& prefix) {
  std::vector<Mapping> out;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    size_t at = line.find(prefix);
    if (at == std::string::npos) continue;
    uintptr_t start = std::stoull(line.substr(0, line.find('-')), nullptr, 16);
    uintptr_t end = std::stoull(line.substr(line.find('-') + 1), nullptr, 16);
    out.push_back({reinterpret_cast<void*>(start), end - start, line.substr(at)});
  }
  return out;
}

TEST_CASE("a get of a sealed object not held yet costs no round trip", "[index]") {
  Daemon d;
  Client writer = d.Connect();
  const std::byte metadata[] = {std::byte{1}, std::byte{2}, std::byte{3}};
  CreateOptions with;
  with.metadata = metadata;
  with.checksum = true;
  std::vector<Guid> ids;
  for (uint32_t i = 0; i < 4; ++i) {
    auto id = writer.Put(Pattern(4096, i), with);
    REQUIRE(id.ok());
    ids.push_back(*id);
  }
  // A request of the writer's: the daemon takes its put ring first, so every put is indexed.
  REQUIRE(writer.GetStatus().ok());
  auto reader = Client::Connect({d.socket(), "reader"});
  REQUIRE(reader.ok());
  // The first get brings the segment's descriptor: a round trip.
  auto first = reader->Get(ids[0]);
  REQUIRE(first.ok());
  uint64_t before = Requests(*reader, "reader");
  auto second = reader->Get(ids[1]);
  REQUIRE(second.ok());
  auto batch = reader->Get(std::span<const Guid>(ids).subspan(2), kNoWait);
  CHECK(*reader->Contains(ids[3]));
  // Only the clients request itself went to the daemon.
  CHECK(Requests(*reader, "reader") == before + 1);
  CHECK(reader->index_gets() == 3);  // the second get and the batch of two
  CHECK(Holds(*second, Pattern(4096, 1)));
  REQUIRE(batch.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    REQUIRE(batch[i].ok());
    CHECK(Holds(*batch[i], Pattern(4096, static_cast<uint32_t>(i + 2))));
  }
  CHECK(second->metadata().size() == 3);
  CHECK(second->metadata()[2] == std::byte{3});
  CHECK(second->Verify().ok());
  CHECK(second->creator_pid() == ::getpid());
  CHECK(second->creator_uid() == ::getuid());
  // Objects held through slots count as the connection's references.
  auto clients = writer.Clients();
  REQUIRE(clients.ok());
  for (const ClientInfo& i : *clients) {
    if (i.name == "reader") CHECK(i.references == 4);
  }
  auto stat = writer.Stat(ids[1]);
  REQUIRE(stat.ok());
  CHECK(stat->holders.size() == 1);
  CHECK(stat->refcount == 1);  // the slot hold counts as a reference, as in holders
}

TEST_CASE("a get of an object this process has just put in one message waits for the index",
          "[index]") {
  Daemon d;
  auto c = Client::Connect({d.socket(), "own"});
  REQUIRE(c.ok());
  REQUIRE(c->Put(Pattern(1024, 0)).ok());  // takes the lease
  constexpr uint32_t kPairs = 200;
  uint64_t before = Requests(*c, "own");
  for (uint32_t i = 1; i <= kPairs; ++i) {
    auto id = c->Put(Pattern(1024, i));
    REQUIRE(id.ok());
    auto got = c->Get(*id);
    REQUIRE(got.ok());
    CHECK(Holds(*got, Pattern(1024, i)));
  }
  // A get finds its object in the index once the daemon has read the put, which it does within
  // a wait of 100 µs unless the machine is very busy; then the get asks it. Most go without.
  // Each put is one request (with no reply), and so is the clients request that counts them.
  uint64_t asked = Requests(*c, "own") - before - 1 - kPairs;
  INFO(asked << " of " << kPairs << " gets were round trips");
  if (std::string_view(DEPOT_SANITIZE).find("thread") != std::string_view::npos) {
    // A daemon built with ThreadSanitizer often reads a put in more than that wait (37-181 of
    // 200 gets were round trips on a 2-vCPU VM): there the bytes are checked, and the bound is
    // for the other builds to check.
    WARN("ThreadSanitizer build: " << asked << " of " << kPairs
                                   << " gets were round trips; the bound is not checked");
    return;
  }
  CHECK(asked < kPairs / 2);
}

TEST_CASE("an object deleted while a slot holds it keeps its bytes, and is freed at release",
          "[index]") {
  Daemon d;
  Client c = d.Connect();
  auto data = Pattern(100000, 5);
  auto warm = c.Put(Pattern(1000, 4));
  auto id = c.Put(data);
  REQUIRE(id.ok());
  REQUIRE(warm.ok());
  uint64_t used = StatusOf(c).used;
  Channel holding, deleted, released, done;
  pid_t reader = Spawn([&] {
    auto r = Client::Connect({d.socket(), "reader"});
    auto first = r->Get(*warm);  // maps the segment
    uint64_t before = Requests(*r, "reader");
    auto obj = r->Get(*id);
    if (!first.ok() || !obj.ok() || Requests(*r, "reader") != before + 1) return 1;
    holding.Send("holding");
    deleted.Receive();
    bool same = Holds(*obj, data);
    obj = Status::NotFound("dropped");  // the last Object goes: the slot is cleared
    released.Send("released");
    done.Receive();
    return same ? 0 : 2;
  });
  REQUIRE(holding.Receive() == "holding");
  REQUIRE(c.Delete(*id).ok());
  CHECK(c.Get(*id, kNoWait).status().IsNotFound());
  auto s = StatusOf(c);
  CHECK(s.objects_deleted == 1);
  CHECK(s.used == used);
  deleted.Send("deleted");
  REQUIRE(released.Receive() == "released");
  // Freed while the reader still runs: its slot was read again, no message needed.
  CHECK(WaitFor([&] { return StatusOf(c).objects_deleted == 0; }));
  CHECK(StatusOf(c).used < used);
  done.Send("done");
  CHECK(WEXITSTATUS(Wait(reader)) == 0);
}

TEST_CASE(
    "a delete of many objects reads the slots once for all, and frees at once what none holds",
    "[index]") {
  Daemon d;
  Client c = d.Connect();
  constexpr uint32_t kCount = 200;
  std::vector<Guid> ids;
  for (uint32_t i = 0; i < kCount; ++i) {
    auto id = c.Put(Pattern(4096, i));
    REQUIRE(id.ok());
    ids.push_back(*id);
  }
  // Other connections, whose slots a delete reads too.
  std::vector<Client> idle;
  for (int i = 0; i < 8; ++i) idle.push_back(d.Connect());
  Channel holding, deleted, done;
  pid_t reader = Spawn([&] {
    auto r = Client::Connect({d.socket(), "reader"});
    std::vector<Object> held;
    uint64_t before = Requests(*r, "reader");
    for (uint32_t i = 0; i < kCount; i += 2) {  // the even ones, through slots
      auto obj = r->Get(ids[i]);
      if (!obj.ok()) return 1;
      held.push_back(std::move(*obj));
    }
    if (Requests(*r, "reader") > before + 3) return 2;  // the segments mapped, no more
    holding.Send("holding");
    deleted.Receive();
    for (uint32_t i = 0; i < kCount; i += 2) {
      if (!Holds(held[i / 2], Pattern(4096, i))) return 3;
    }
    held.clear();
    done.Receive();
    return 0;
  });
  REQUIRE(holding.Receive() == "holding");
  StoreStatus before = StatusOf(c);
  for (const Status& st : c.Delete(ids)) CHECK(st.ok());
  StoreStatus after = StatusOf(c);
  // One read for the request (and at most two of the timer that reads for held ones, 5 ms and
  // then 10 ms later, when this machine is slow, as under ThreadSanitizer), not one for each of
  // the 200 objects.
  CHECK(after.slot_reads - before.slot_reads >= 1);
  CHECK(after.slot_reads - before.slot_reads <= 3);
  // The odd ones were freed before the reply; the even ones wait for the reader.
  CHECK(after.objects_deleted == kCount / 2);
  CHECK(after.objects_sealed == before.objects_sealed - kCount);
  deleted.Send("deleted");
  CHECK(WaitFor([&] { return StatusOf(c).objects_deleted == 0; }));
  done.Send("done");
  CHECK(WEXITSTATUS(Wait(reader)) == 0);
}

TEST_CASE("eviction passes over an evictable object a slot holds", "[index]") {
  Daemon d({"--capacity", "16MiB", "--segment-size", "1MiB"});
  Client c = d.Connect();
  auto data = Pattern(200000, 9);
  auto warm = c.Put(Pattern(1000, 1), Named("warm", true));
  auto id = c.Put(data, Named("held", true));
  REQUIRE(id.ok());
  REQUIRE(warm.ok());
  Channel holding, filled;
  pid_t reader = Spawn([&] {
    auto r = Client::Connect({d.socket(), "reader"});
    auto first = r->Get(*warm);
    uint64_t before = Requests(*r, "reader");
    auto obj = r->Get(*id);
    if (!obj.ok() || Requests(*r, "reader") != before + 1) return 1;
    holding.Send("holding");
    filled.Receive();
    return Holds(*obj, data) ? 0 : 2;
  });
  REQUIRE(holding.Receive() == "holding");
  // Held (the warm one by a daemon reference, this one by a slot): neither is evictable.
  auto metrics = c.Metrics();
  REQUIRE(metrics.ok());
  CHECK(metrics->find("\ndepot_evictable_objects 0\n") != std::string::npos);
  CHECK(metrics->find("\ndepot_pinned_objects 2\n") != std::string::npos);
  for (uint32_t i = 0; i < 300; ++i) REQUIRE(c.Put(Pattern(200000, 100 + i), Named("", true)).ok());
  CHECK(StatusOf(c).evictions > 0);
  filled.Send("filled");
  CHECK(WEXITSTATUS(Wait(reader)) == 0);
  auto still = c.Get(*id, kNoWait);
  REQUIRE(still.ok());
  CHECK(Holds(*still, data));
}

TEST_CASE("room for a large object out of many small ones takes a few reads of the slots",
          "[index]") {
  Daemon d({"--capacity", "8MiB", "--segment-size", "1MiB"});
  Client c = d.Connect();
  // Small evictable objects fill the pool (until one put evicts), every one indexed; another
  // process holds one of them through a slot.
  std::vector<Guid> small;
  while (StatusOf(c).evictions == 0) {
    auto id = c.Put(Pattern(16 << 10, static_cast<uint32_t>(small.size())), Named("", true));
    REQUIRE(id.ok());
    small.push_back(*id);
  }
  const Guid held = small.back();  // the most recently used: no eviction took it
  const auto held_bytes = Pattern(16 << 10, static_cast<uint32_t>(small.size() - 1));
  Channel holding, done;
  pid_t reader = Spawn([&] {
    auto r = Client::Connect({d.socket(), "reader"});
    for (const Guid& g : small) (void)r->Get(g);  // maps every segment: the next get is held
    uint64_t before = Requests(*r, "reader");     // through a slot
    auto obj = r->Get(held);
    if (obj.ok() && Requests(*r, "reader") != before + 1) obj = Status::NotFound("a round trip");
    holding.Send(obj.ok() ? "holding" : obj.status().message());
    if (!obj.ok()) return 1;
    done.Receive();
    return obj.ok() && Holds(*obj, held_bytes) ? 0 : 2;
  });
  REQUIRE(holding.Receive() == "holding");
  CHECK(c.Get(held, kNoWait).ok());  // recently used: it would go last but for the slot
  for (int i = 0; i < 64; ++i) {     // objects put after it: it is no longer the most recent
    REQUIRE(c.Put(Pattern(16 << 10, 9999), Named("", true)).ok());
  }
  StoreStatus before = StatusOf(c);
  auto large = c.Put(Pattern(900 << 10, 7), Named("", true));
  REQUIRE(large.ok());
  StoreStatus after = StatusOf(c);
  uint64_t evicted = after.evictions - before.evictions;
  uint64_t reads = after.slot_reads - before.slot_reads;
  INFO(evicted << " evicted with " << reads << " reads of the slots");
  CHECK(evicted >= 16);
  CHECK(reads <= 10);  // 1, 2, 4, ... objects a read: one read each before
  // The one a slot held stayed, and the rest of what the reads covered is served as before.
  done.Send("done");
  CHECK(WEXITSTATUS(Wait(reader)) == 0);
  auto still = c.Get(held, kNoWait);
  REQUIRE(still.ok());
  CHECK(Holds(*still, held_bytes));
  for (const Guid& g : small) {
    auto o = c.Get(g, kNoWait);
    CHECK((o.ok() || o.status().IsNotFound()));
  }
}

TEST_CASE("kill -9 of a process holding objects through slots frees them", "[index]") {
  Daemon d;
  Client c = d.Connect();
  auto warm = c.Put(Pattern(1000, 1));
  auto id = c.Put(Pattern(300000, 2));
  REQUIRE(id.ok());
  REQUIRE(warm.ok());
  Channel holding;
  pid_t reader = Spawn([&] {
    auto r = Client::Connect({d.socket(), "reader"});
    auto first = r->Get(*warm);
    auto obj = r->Get(*id);
    if (!first.ok() || !obj.ok()) return 1;
    holding.Send("holding");
    ::pause();
    return 0;
  });
  REQUIRE(holding.Receive() == "holding");
  REQUIRE(c.Delete(*id).ok());
  CHECK(StatusOf(c).objects_deleted == 1);
  ::kill(reader, SIGKILL);
  Wait(reader);
  CHECK(WaitFor([&] { return StatusOf(c).objects_deleted == 0; }));
}

TEST_CASE("garbage another user writes into its own slots harms nobody", "[index][hostile]") {
  NeedRoot();
  Daemon d = StartOpen({"--allow-users", std::to_string(kAlice) + "," + std::to_string(kMallory),
                        "--segment-size", "8MiB"});
  Guid kept = PutAs(d, kAlice, 50000, 1);
  Guid doomed = PutAs(d, kAlice, 60000, 2);
  Channel scribbled, deleted;
  pid_t mallory = Spawn([&] {
    if (::setresgid(kMallory, kMallory, kMallory) != 0 ||
        ::setresuid(kMallory, kMallory, kMallory) != 0) {
      return 100;
    }
    Client m = d.Connect();
    // A put first: the daemon reads the slots of a session it sent a segment, as it did here.
    if (!m.Put(Pattern(1000, 4)).ok()) return 6;
    // The library maps its slots read-write and the index read-only, and keeps no descriptor
    // of either; an attacker writes through the mapping.
    auto slots = MappingsOf("/memfd:slots-");
    auto indexes = MappingsOf("/memfd:index-");
    if (slots.size() != 1 || indexes.size() != 1) {
      scribbled.Send("no slots");
      return 1;
    }
    auto* words = static_cast<uint64_t*>(slots[0].addr);
    size_t count = slots[0].size / 8;
    // Every id the daemon has handed out so far (a record number in the low word, generation 1
    // above: ObjectTable), and then garbage, everywhere but the layout words (layout_words_test
    // overwrites those).
    for (size_t i = index::kSlotsWord; i < count; ++i) {
      uint64_t n = i - index::kSlotsWord;
      words[i] = n < 64 ? uint64_t{1} << 32 | n : ~uint64_t{0} - i;
    }
    // The index cannot be made writable.
    if (::mprotect(indexes[0].addr, 4096, PROT_READ | PROT_WRITE) == 0) return 4;
    scribbled.Send("scribbled");
    deleted.Receive();
    auto own = m.Put(Pattern(1000, 3));  // it is still served
    return own.ok() ? 0 : 5;
  });
  std::string line = scribbled.Receive();
  INFO(d.Log());
  REQUIRE(line == "scribbled");
  Client admin = d.Connect();
  REQUIRE(admin.Delete(doomed).ok());
  // The garbage pins what a get could have pinned, no more, and only while Mallory is there.
  CHECK(StatusOf(admin).objects_deleted == 1);
  deleted.Send("deleted");
  CHECK(WEXITSTATUS(Wait(mallory)) == 0);
  CHECK(WaitFor([&] { return StatusOf(admin).objects_deleted == 0; }));
  auto alice = RunAs(kAlice, kAlice, {}, [&] {
    auto obj = d.Connect().Get(kept);
    return obj.ok() && Holds(*obj, Pattern(50000, 1)) ? 0 : 1;
  });
  CHECK(alice == 0);
}

TEST_CASE("the slots of a connection that was sent no segment are not read until it is",
          "[index][hostile]") {
  NeedRoot();
  Daemon d = StartOpen({"--allow-users", std::to_string(kAlice) + "," + std::to_string(kMallory),
                        "--segment-size", "8MiB"});
  Guid first = PutAs(d, kAlice, 60000, 1);
  Guid second = PutAs(d, kAlice, 50000, 2);  // PutAs tells them apart by size
  Channel scribbled, deleted, mapped, again;
  pid_t mallory = Spawn([&] {
    if (::setresgid(kMallory, kMallory, kMallory) != 0 ||
        ::setresuid(kMallory, kMallory, kMallory) != 0) {
      return 100;
    }
    Client m = d.Connect();
    auto slots = MappingsOf("/memfd:slots-");
    if (slots.size() != 1) {
      scribbled.Send("no slots");
      return 1;
    }
    // Every id the daemon has handed out so far (ObjectTable: a record number in the low word,
    // generation 1 above), as a client holding every object would publish them.
    auto* words = static_cast<uint64_t*>(slots[0].addr);
    for (uint64_t n = 0; n < 64; ++n) words[index::kSlotsWord + n] = uint64_t{1} << 32 | n;
    words[index::kSlotHighWater] = 64;
    scribbled.Send("scribbled");
    deleted.Receive();
    // A put maps a segment (its lease's): from now on the daemon reads these slots.
    auto own = m.Put(Pattern(1000, 3));
    mapped.Send(own.ok() ? "mapped" : "no put");
    again.Receive();
    return 0;
  });
  std::string line = scribbled.Receive();
  INFO(d.Log());
  REQUIRE(line == "scribbled");
  Client admin = d.Connect();
  // Never sent a segment, Mallory's connection can hold nothing: its slots keep nothing, and
  // stat reports no holder.
  auto before = admin.Stat(first);
  REQUIRE(before.ok());
  CHECK(before->holders.empty());
  REQUIRE(admin.Delete(first).ok());
  CHECK(StatusOf(admin).objects_deleted == 0);
  deleted.Send("deleted");
  REQUIRE(mapped.Receive() == "mapped");
  // Sent one, it could hold any object of the namespace through them: they are read.
  auto after = admin.Stat(second);
  REQUIRE(after.ok());
  CHECK(after->holders.size() == 1);
  REQUIRE(admin.Delete(second).ok());
  CHECK(StatusOf(admin).objects_deleted == 1);
  again.Send("done");
  CHECK(WEXITSTATUS(Wait(mallory)) == 0);
  CHECK(WaitFor([&] { return StatusOf(admin).objects_deleted == 0; }));
}

TEST_CASE("a user whose metadata fills the index leaves the other users their part of it",
          "[index][hostile]") {
  NeedRoot();
  // 4096 entries, and no more: an arena of 128 KiB, which 8 objects of 16 KiB of metadata nearly
  // fill.
  Daemon d = StartOpen({"--allow-users", std::to_string(kAlice) + "," + std::to_string(kMallory),
                        "--segment-size", "8MiB", "--index-entries", "4096", "--index-max-entries",
                        "4096"});
  int filled = RunAs(kMallory, kMallory, {}, [&] {
    Client m = d.Connect();
    // Records of 16 KiB of metadata, then of 1 KiB and of none for the crumbs between them.
    std::vector<std::byte> metadata(16 << 10, std::byte{7});
    uint32_t seed = 0;
    for (auto [count, size] : {std::pair{40, 16 << 10}, {40, 1 << 10}, {400, 0}}) {
      CreateOptions options;
      options.metadata = std::span(metadata).first(static_cast<size_t>(size));
      for (int i = 0; i < count; ++i) {
        if (!m.Put(Pattern(1, seed++), options).ok()) return 1;
      }
    }
    return m.GetStatus().ok() ? 0 : 2;  // its puts are taken, and indexed where they fit
  });
  REQUIRE(filled == 0);
  // Alice's objects are indexed all the same: another connection of hers gets them with no round
  // trip, once the first get brought the segment of her lease.
  int alice = RunAs(kAlice, kAlice, {}, [&] {
    Client writer = d.Connect();
    std::vector<Guid> ids;
    for (uint32_t i = 0; i < 4; ++i) {
      auto id = writer.Put(Pattern(100, i));
      if (!id.ok()) return 1;
      ids.push_back(*id);
    }
    if (!writer.GetStatus().ok()) return 2;
    auto reader = Client::Connect({d.socket(), "reader"});
    if (!reader.ok() || !reader->Get(ids[0]).ok()) return 3;
    for (uint32_t i = 1; i < 4; ++i) {
      auto obj = reader->Get(ids[i]);
      if (!obj.ok() || !Holds(*obj, Pattern(100, i))) return 4;
    }
    return reader->index_gets() == 3 ? 0 : 5;
  });
  CHECK(alice == 0);
}

TEST_CASE("each per-user namespace has an index of its own", "[index][hostile]") {
  NeedRoot();
  Daemon d = StartOpen({"--allow-users", std::to_string(kAlice) + "," + std::to_string(kBob),
                        "--namespaces", "per_user"});
  // Each process holds the index of its own user's namespace, named after it, and no other.
  auto own_index_only = [&](uid_t uid) {
    auto indexes = MappingsOf("/memfd:index-");
    return indexes.size() == 1 &&
           indexes[0].name.find("-u" + std::to_string(uid) + "-") != std::string::npos;
  };
  Channel guid, asked;
  pid_t alice = Spawn([&] {
    if (::setresgid(kAlice, kAlice, kAlice) != 0 || ::setresuid(kAlice, kAlice, kAlice) != 0) {
      return 100;
    }
    Client a = d.Connect();
    auto id = a.Put(Pattern(1000, 1));
    if (!id.ok() || !own_index_only(kAlice)) return 1;
    auto again = a.Get(*id);
    if (!again.ok()) return 2;
    guid.Send(id->ToString());
    asked.Receive();
    return 0;
  });
  auto text = guid.Receive();
  auto alices = Guid::Parse(text);
  REQUIRE(alices);
  int bob = RunAs(kBob, kBob, {}, [&] {
    Client b = d.Connect();
    if (!own_index_only(kBob)) return 1;
    auto got = b.Get(*alices, kNoWait);
    if (!got.status().IsNotFound()) return 2;
    return *b.Contains(*alices) ? 3 : 0;
  });
  CHECK(bob == 0);
  asked.Send("asked");
  CHECK(WEXITSTATUS(Wait(alice)) == 0);
}

TEST_CASE("with the index full or off, every get still goes through the daemon", "[index]") {
  std::string entries = GENERATE("4", "0");
  Daemon d({"--capacity", "256MiB", "--index-entries", entries, "--index-max-entries", entries});
  Client c = d.Connect();
  std::vector<Guid> ids;
  for (uint32_t i = 0; i < 40; ++i) {
    auto id = c.Put(Pattern(3000, i));
    REQUIRE(id.ok());
    ids.push_back(*id);
  }
  auto reader = Client::Connect({d.socket(), "reader"});
  REQUIRE(reader.ok());
  uint64_t before = Requests(*reader, "reader");
  std::vector<Object> held;
  for (uint32_t i = 0; i < 40; ++i) {
    auto obj = reader->Get(ids[i]);
    REQUIRE(obj.ok());
    CHECK(Holds(*obj, Pattern(3000, i)));
    held.push_back(*obj);
  }
  uint64_t asked = Requests(*reader, "reader") - before - 1;
  INFO("index_entries " << entries << ": " << asked << " gets asked the daemon");
  // Off: every get asked; four entries: at most four (the first, for the segment, included)
  // were answered from the index.
  CHECK(asked >= (entries == "0" ? 40u : 36u));
  CHECK(asked <= 40u);
}

TEST_CASE("with the index off, a full pool evicts to make room", "[index]") {
  Daemon d({"--capacity", "8MiB", "--segment-size", "1MiB", "--index-entries", "0"});
  Client c = d.Connect();
  for (uint32_t i = 0; i < 1000; ++i) {
    REQUIRE(c.Put(Pattern(16 << 10, i), Named("", true)).ok());
  }
  auto large = c.Put(Pattern(900 << 10, 7), Named("", true));
  REQUIRE(large.ok());
  CHECK(StatusOf(c).evictions > 100);
  auto back = c.Get(*large, kNoWait);
  REQUIRE(back.ok());
  CHECK(Holds(*back, Pattern(900 << 10, 7)));
}

TEST_CASE("a process holds thousands of objects from an index that grows with the store",
          "[index][scale]") {
  Daemon d({"--capacity", "256MiB", "--index-entries", "1024"});
  Client c = d.Connect();
  constexpr uint32_t kCount = 6000;
  std::vector<Guid> ids;
  for (uint32_t i = 0; i < kCount; ++i) {
    auto id = c.Put(Pattern(64, i));
    REQUIRE(id.ok());
    ids.push_back(*id);
  }
  REQUIRE(c.GetStatus().ok());  // every put taken
  auto reader = Client::Connect({d.socket(), "reader"});
  REQUIRE(reader.ok());
  std::vector<Object> held;
  for (uint32_t i = 0; i < kCount; ++i) {
    auto obj = reader->Get(ids[i]);
    REQUIRE(obj.ok());
    REQUIRE(Holds(*obj, Pattern(64, i)));
    held.push_back(*obj);
  }
  StoreStatus st = StatusOf(c);
  INFO(reader->index_gets() << " gets through the index; " << st.index_growths << " growths, "
                            << st.slots_granted << " slots granted, " << st.index_left_out
                            << " left out");
  // The first get brings the segment's descriptor; a full pair of sets may leave out a few.
  CHECK(reader->index_gets() >= kCount * 99 / 100);
  CHECK(st.index_growths >= 3);  // 1024 entries at first: 2048, 4096, 8192 at least
  CHECK(st.index_entries >= 8192);
  CHECK(st.slots_granted >= kCount - index::kSlotCount);
  // The daemon reads the slots past the first 1,024: a deleted object one of them holds keeps
  // its bytes until let go.
  REQUIRE(c.Delete(ids[kCount - 1]).ok());
  CHECK(StatusOf(c).objects_deleted == 1);
  CHECK(Holds(held.back(), Pattern(64, kCount - 1)));
  held.pop_back();
  CHECK(WaitFor([&] { return StatusOf(c).objects_deleted == 0; }));
}

TEST_CASE("a user asking for every slot it can gets its part, and the others theirs",
          "[index][scale][hostile]") {
  NeedRoot();
  Daemon d = StartOpen({"--allow-users", std::to_string(kMallory), "--max-slots-per-user", "4096"});
  Channel asked, done;
  pid_t mallory = Spawn([&] {
    if (::setresgid(kMallory, kMallory, kMallory) != 0 ||
        ::setresuid(kMallory, kMallory, kMallory) != 0) {
      return 100;
    }
    // Three connections each asking for every slot there is.
    std::vector<std::unique_ptr<Raw>> raws;
    for (int i = 0; i < 3; ++i) {
      raws.push_back(std::make_unique<Raw>(d.socket()));
      std::vector<uint8_t> hello;
      raws.back()->HelloWithFds(hello);
      flatbuffers::FlatBufferBuilder fbb(64);
      fbb.Finish(wire::CreateIndexRequest(fbb, ~uint32_t{0}, 1));
      raws.back()->Write(proto::Encode(static_cast<uint16_t>(proto::MsgType::kIndex), 7, fbb));
      proto::Header h;
      std::vector<uint8_t> body;
      if (!raws.back()->Read(h, body) || h.type != proto::ReplyType(proto::MsgType::kIndex)) {
        return 2;
      }
    }
    asked.Send("asked");
    done.Receive();
    return 0;
  });
  REQUIRE(asked.Receive() == "asked");
  Client c = d.Connect();
  StoreStatus st = StatusOf(c);
  CHECK(st.slots_granted == 4096);  // its part, on the first connection
  CHECK(st.slot_grants_refused == 2);
  CHECK(st.max_slots_per_user == 4096);
  // This user's connection still gets the slots it needs.
  std::vector<Guid> ids;
  for (uint32_t i = 0; i < 3000; ++i) {
    auto id = c.Put(Pattern(64, i));
    REQUIRE(id.ok());
    ids.push_back(*id);
  }
  REQUIRE(c.GetStatus().ok());
  auto reader = Client::Connect({d.socket(), "reader"});
  REQUIRE(reader.ok());
  std::vector<Object> held;
  for (const Guid& id : ids) {
    auto obj = reader->Get(id);
    REQUIRE(obj.ok());
    held.push_back(*obj);
  }
  CHECK(reader->index_gets() >= 2900);
  done.Send("done");
  CHECK(WEXITSTATUS(Wait(mallory)) == 0);
  // Its grants go back with its connections; the reader's stay (1,024 granted twice over).
  CHECK(WaitFor([&] { return StatusOf(c).slots_granted == 4096 - index::kSlotCount; }));
}

}  // namespace
