// Spilling to disk and restarts that keep objects, with a real depotd, real client processes and
// real files: more objects than the pool holds all read back, broken and missing files, a full
// disk, crashes during a spill and during a restore, a restart with a thousand objects, one
// restore for many readers, and per-user namespaces that never see each other's files.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <thread>

#include "tests/daemon_fixture.h"
#include "tests/other_users.h"

using namespace depot;
using namespace depot::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kKiB = 1 << 10;
constexpr uint64_t kMiB = 1 << 20;

// depotd's flags for a pool of `capacity` spilling into `dir`.
std::vector<std::string> SpillArgs(const std::string& dir, const std::string& capacity = "16MiB") {
  return {"--capacity", capacity, "--segment-size", "1MiB", "--spill-dir", dir};
}

// Every object the daemon lists, by GUID.
std::map<Guid, ObjectInfo> Listing(Client& c) {
  std::map<Guid, ObjectInfo> out;
  std::optional<Guid> after;
  while (true) {
    auto page = c.List(after, 1000);
    REQUIRE(page.ok());
    for (auto& o : page->objects) out[o.guid] = o;
    if (!page->more || page->objects.empty()) return out;
    after = page->objects.back().guid;
  }
}

// Complete spill files (and, in `temp`, unfinished ones) in a namespace's directory.
size_t FilesIn(const std::string& dir, size_t* temp = nullptr) {
  size_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename();
    if (name.ends_with(".obj")) ++n;
    if (temp != nullptr && name.starts_with(".tmp.")) ++*temp;
  }
  return n;
}

// Puts Pattern(size, seed) with a checksum; returns its GUID.
Guid PutChecked(Client& c, size_t size, uint32_t seed, CreateOptions opts = {}) {
  opts.checksum = true;
  auto g = c.Put(Pattern(size, seed), opts);
  INFO(g.status().ToString());
  REQUIRE(g.ok());
  return *g;
}

// Gets `g` and checks its bytes are Pattern(size, seed) and match the recorded checksum.
void CheckBytes(Client& c, const Guid& g, size_t size, uint32_t seed) {
  auto o = c.Get(g, 10s);
  INFO(g.ToString() << ": " << o.status().ToString());
  REQUIRE(o.ok());
  CHECK(o->Verify().ok());
  auto want = Pattern(size, seed);
  REQUIRE(o->frame(0).size() == size);
  CHECK(std::equal(want.begin(), want.end(), o->frame(0).begin()));
}

// The GUID of one object the daemon has on disk.
Guid OneOnDisk(Client& c) {
  for (const auto& [g, o] : Listing(c)) {
    if (o.residence == ObjectInfo::Residence::kDisk) return g;
  }
  FAIL("no object is on disk");
  return {};
}

}  // namespace

TEST_CASE("four times the pool from several processes: every object reads back", "[spill]") {
  std::string spill = TempDir() + "/spill";
  Daemon d(SpillArgs(spill));
  constexpr int kProcesses = 4;
  constexpr uint64_t kPerProcess = 16 * kMiB;  // together four times the 16 MiB pool
  std::vector<Channel> guids(kProcesses);
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    children.push_back(Spawn([&, p] {
      auto c = Client::Connect({d.socket(), "producer"});
      int rc = c.ok() ? 0 : 1;
      for (uint64_t i = 0, done = 0; rc == 0 && done < kPerProcess; ++i) {
        size_t size = (64 * kKiB) << (i % 5);  // 64 KiB to 1 MiB
        uint32_t seed = p * 1000 + i;
        CreateOptions opts;
        opts.checksum = true;
        auto g = c->Put(Pattern(size, seed), opts);
        if (!g.ok()) {
          std::fprintf(stderr, "put: %s\n", g.status().ToString().c_str());
          rc = 2;
        } else {
          guids[p].Send(fmt::format("{} {} {}", g->ToString(), size, seed));
          done += size;
        }
      }
      guids[p].Send("done");
      return rc;
    }));
  }
  struct Put {
    Guid guid;
    size_t size;
    uint32_t seed;
  };
  std::vector<Put> puts;
  for (int p = 0; p < kProcesses; ++p) {
    for (std::string line; (line = guids[p].Receive()) != "done" && !line.empty();) {
      char text[40];
      Put put{};
      REQUIRE(std::sscanf(line.c_str(), "%36s %zu %u", text, &put.size, &put.seed) == 3);
      put.guid = *Guid::Parse(text);
      puts.push_back(put);
    }
  }
  for (pid_t child : children) CHECK(WEXITSTATUS(Wait(child)) == 0);
  Client c = d.Connect();
  StoreStatus before = StatusOf(c);
  CHECK(before.spills > 0);
  CHECK(before.spilled_objects > 0);
  CHECK(before.used <= before.capacity);
  for (const Put& p : puts) CheckBytes(c, p.guid, p.size, p.seed);
  StoreStatus after = StatusOf(c);
  CHECK(after.restores >= before.spilled_objects);
  CHECK(after.objects_lost == 0);
  CHECK(after.spill_failures == 0);
}

TEST_CASE("a spilled object is listed on disk, gets restore it, and delete removes its file",
          "[spill]") {
  std::string spill = TempDir() + "/spill";
  Daemon d(SpillArgs(spill, "4MiB"));
  Client c = d.Connect();
  std::vector<Guid> guids;
  for (uint32_t i = 0; i < 12; ++i) guids.push_back(PutChecked(c, 900 * kKiB, i));
  Guid on_disk = OneOnDisk(c);
  auto info = c.Stat(on_disk);
  REQUIRE(info.ok());
  CHECK(info->residence == ObjectInfo::Residence::kDisk);
  CHECK(info->checksum.has_value());
  size_t files = FilesIn(spill + "/shared");
  CHECK(files == StatusOf(c).spilled_objects);
  // The spill directory and its files are the daemon's alone.
  struct stat st {};
  REQUIRE(::stat(spill.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  for (const auto& e : fs::directory_iterator(spill + "/shared")) {
    REQUIRE(::stat(e.path().c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
  }
  REQUIRE(c.Delete(on_disk).ok());
  CHECK(WaitFor([&] { return FilesIn(spill + "/shared") == files - 1; }));
  CHECK(c.Get(on_disk).status().IsNotFound());
  // A get that polls (timeout 0) still waits for the disk: the object exists.
  Guid next = OneOnDisk(c);
  for (uint32_t i = 0; i < guids.size(); ++i) {
    if (guids[i] == next) CheckBytes(c, next, 900 * kKiB, i);
  }
  auto polled = c.Get(OneOnDisk(c), kNoWait);
  INFO(polled.status().ToString());
  CHECK(polled.ok());
}

TEST_CASE("metrics count spills and restores, and show the spill directory as a disk pool",
          "[spill][metrics]") {
  std::string spill = TempDir() + "/spill";
  Daemon d(SpillArgs(spill, "4MiB"));
  Client c = d.Connect();
  for (uint32_t i = 0; i < 8; ++i) PutChecked(c, 900 * kKiB, i);
  Guid on_disk = OneOnDisk(c);
  REQUIRE(c.Get(on_disk, 10s).ok());
  auto text = c.Metrics();
  REQUIRE(text.ok());
  // The value of one series, as the exposition format writes it.
  auto value = [&](const std::string& series) {
    size_t at = text->find("\n" + series + " ");
    INFO(series);
    REQUIRE(at != std::string::npos);
    return std::stod(text->substr(at + series.size() + 2));
  };
  StoreStatus st = StatusOf(c);
  CHECK(value("depot_spills_total") == static_cast<double>(st.spills));
  CHECK(value("depot_spills_total") >= 1);
  CHECK(value("depot_restores_total") >= 1);
  CHECK(value("depot_objects{state=\"spilled\"}") == static_cast<double>(st.spilled_objects));
  CHECK(value("depot_objects{state=\"sealed\"}") + value("depot_objects{state=\"spilled\"}") ==
        static_cast<double>(st.objects_sealed));
  std::string disk = fmt::format("{{pool=\"{}\",kind=\"disk\"}}", spill);
  CHECK(value("depot_pool_capacity_bytes" + disk) == static_cast<double>(st.spill_capacity));
  CHECK(value("depot_pool_used_bytes" + disk) == static_cast<double>(st.spill_disk_bytes));
  CHECK(value("depot_spill_failures_total") == 0);
}

TEST_CASE("files of objects read back give way when spill_capacity is reached", "[spill]") {
  std::string spill = TempDir() + "/spill";
  auto args = SpillArgs(spill, "4MiB");
  args.insert(args.end(), {"--spill-capacity", "2MiB"});
  Daemon d(args);
  Client c = d.Connect();
  // Six objects of 900 KiB in a pool of four segments: the first two go to disk.
  std::vector<Guid> g;
  for (uint32_t i = 0; i < 6; ++i) g.push_back(PutChecked(c, 900 * kKiB, i));
  auto residence = [&](const Guid& id) { return c.Stat(id)->residence; };
  REQUIRE(residence(g[0]) == ObjectInfo::Residence::kDisk);
  REQUIRE(residence(g[1]) == ObjectInfo::Residence::kDisk);
  // Read back, both stay on disk too, as clean copies: the files fill spill_capacity.
  REQUIRE(c.Delete(g[2]).ok());
  REQUIRE(c.Delete(g[3]).ok());
  auto first = c.Get(g[0], 10s), second = c.Get(g[1], 10s);
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  CHECK(FilesIn(spill + "/shared") == 2);
  // The next spill needs their room: a clean copy is removed rather than the create refused.
  auto seventh = c.Put(Pattern(900 * kKiB, 6));
  INFO(seventh.status().ToString());
  REQUIRE(seventh.ok());
  CHECK(residence(g[4]) == ObjectInfo::Residence::kDisk);
  CHECK(StatusOf(c).spill_disk_bytes <= 2 * kMiB);
  // What was spilled reads back, and the objects whose copies went are whole in memory.
  REQUIRE(c.Delete(g[5]).ok());
  REQUIRE(c.Delete(*seventh).ok());
  CheckBytes(c, g[4], 900 * kKiB, 4);
  CHECK(std::memcmp(first->frame(0).data(), Pattern(900 * kKiB, 0).data(), 900 * kKiB) == 0);
  CHECK(std::memcmp(second->frame(0).data(), Pattern(900 * kKiB, 1).data(), 900 * kKiB) == 0);
}

TEST_CASE("spills and restores are events, and spill_capacity bounds the files", "[spill]") {
  std::string spill = TempDir() + "/spill";
  std::vector<std::string> args = SpillArgs(spill, "4MiB");
  args.insert(args.end(), {"--spill-capacity", "2MiB"});
  Daemon d(args);
  Client watcher = d.Connect();
  auto events = watcher.Subscribe();
  REQUIRE(events.ok());
  Client c = d.Connect();
  Status full;
  std::vector<Guid> guids;
  CreateOptions checked;
  checked.checksum = true;
  for (uint32_t i = 0; i < 12 && full.ok(); ++i) {
    auto g = c.Put(Pattern(900 * kKiB, i), checked);
    if (g.ok()) guids.push_back(*g);
    if (!g.ok()) full = g.status();
  }
  // Two files of 900 KiB fit in 2 MiB, a third does not.
  INFO(full.ToString());
  REQUIRE(full.IsStoreFull());
  CHECK(full.message().find("host pool") != std::string::npos);
  CHECK(full.message().find("the spill directory " + spill) != std::string::npos);
  CHECK(full.message().find("spill_capacity") != std::string::npos);
  StoreStatus st = StatusOf(c);
  CHECK(st.spilled_objects == 2);
  CHECK(st.spill_disk_bytes <= 2 * kMiB);
  // With the files at their limit nothing more can go out, so reading one back needs room
  // made by a delete.
  Guid on_disk = OneOnDisk(c);
  CHECK(c.Get(on_disk, 10s).status().IsStoreFull());
  for (const auto& [g, o] : Listing(c)) {
    if (o.residence == ObjectInfo::Residence::kMemory) {
      REQUIRE(c.Delete(g).ok());
      break;
    }
  }
  CheckBytes(c, on_disk, 900 * kKiB,
             static_cast<uint32_t>(std::find(guids.begin(), guids.end(), on_disk) - guids.begin()));
  bool spilled = false, restored = false;
  while (!(spilled && restored)) {
    auto e = events->Next(10s);
    REQUIRE(e.ok());
    spilled |= e->kind == Event::Kind::kSpilled;
    restored |= e->kind == Event::Kind::kRestored && e->guid == on_disk;
    if (restored) CHECK(Event::KindName(e->kind) == "restored");
  }
}

TEST_CASE("a corrupted and a missing spill file are DataLoss for those objects alone", "[spill]") {
  std::string spill = TempDir() + "/spill";
  Daemon d(SpillArgs(spill, "4MiB"));
  Client c = d.Connect();
  std::map<Guid, uint32_t> seeds;
  for (uint32_t i = 0; i < 12; ++i) seeds[PutChecked(c, 900 * kKiB, i)] = i;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(spill + "/shared")) files.push_back(e.path());
  REQUIRE(files.size() >= 3);
  auto guid_of = [](const fs::path& p) {
    return *Guid::Parse(p.filename().string().substr(0, 36));
  };
  // One byte of the data changed (past the 4 KiB header), one file gone, one header broken.
  Guid corrupted = guid_of(files[0]), missing = guid_of(files[1]), broken = guid_of(files[2]);
  {
    int fd = ::open(files[0].c_str(), O_RDWR);
    REQUIRE(fd >= 0);
    char b = 0;
    REQUIRE(::pread(fd, &b, 1, 8192) == 1);
    b ^= 0x5a;
    REQUIRE(::pwrite(fd, &b, 1, 8192) == 1);
    ::close(fd);
  }
  fs::remove(files[1]);
  fs::resize_file(files[2], 100);
  for (const Guid& g : {corrupted, missing, broken}) {
    auto o = c.Get(g, 10s);
    INFO(g.ToString() << ": " << o.status().ToString());
    CHECK(o.status().IsDataLoss());
    // Still DataLoss later, and listed as lost until deleted.
    CHECK(c.Get(g, 1s).status().IsDataLoss());
    auto info = c.Stat(g);
    REQUIRE(info.ok());
    CHECK(info->residence == ObjectInfo::Residence::kLost);
  }
  CHECK(StatusOf(c).objects_lost == 3);
  for (const auto& [g, seed] : seeds) {
    if (g != corrupted && g != missing && g != broken) CheckBytes(c, g, 900 * kKiB, seed);
  }
  CHECK(c.Delete(corrupted).ok());
  CHECK(StatusOf(c).objects_lost == 2);
  CHECK(::kill(d.pid(), 0) == 0);
}

// Two 1 MiB segments of one 768 KiB object each, none kept empty, and X on disk. The getter holds
// one of the two objects and has mapped the other's segment: to restore X the daemon spills that
// other object, and its segment, given back, stays counted until each client that mapped it says
// it unmapped it.
struct RetiredSegmentSetup {
  static constexpr size_t kSize = 768 * kKiB;
  std::string spill = TempDir() + "/spill";
  Daemon d{
      {"--capacity", "2MiB", "--segment-size", "1MiB", "--keep-warm", "0", "--spill-dir", spill}};
  Guid x, other, held;

  RetiredSegmentSetup() {
    {
      Client p = d.Connect();
      x = PutChecked(p, kSize, 1);
      other = PutChecked(p, kSize, 2);
    }
    Client p = d.Connect();
    held = PutChecked(p, kSize, 3);  // X, the least recently used, goes to disk
    REQUIRE(p.Stat(x)->residence == ObjectInfo::Residence::kDisk);
  }
  // `c` holds `held` in the result and maps the other object's segment.
  Object MapBoth(Client& c) const {
    auto h = c.Get(held);
    REQUIRE(h.ok());
    REQUIRE(c.Get(other).ok());
    (void)StatusOf(c);  // the release of `other` reaches the daemon
    return std::move(*h);
  }
};

TEST_CASE("a restore waits for the memory its getter is letting go of", "[spill]") {
  RetiredSegmentSetup s;
  Client g = s.d.Connect();
  Object held = s.MapBoth(g);
  // The getter says it unmapped the segment while it waits for X: then X fits.
  auto got = g.Get(s.x, kNoWait);
  INFO(got.status().ToString());
  REQUIRE(got.ok());
  CheckBytes(g, s.x, s.kSize, 1);
}

TEST_CASE("a client that never unmaps a retired segment costs a restore a bounded wait",
          "[spill]") {
  RetiredSegmentSetup s;
  std::optional<Client> idle(s.d.Connect());
  std::optional<Object> held(s.MapBoth(*idle));  // and then it reads nothing more
  Client g = s.d.Connect();
  auto start = std::chrono::steady_clock::now();
  auto got = g.Get(s.x, kNoWait);
  INFO(got.status().ToString());
  CHECK(got.status().IsStoreFull());
  CHECK(got.status().message().find("are in retired segments that clients have not unmapped") !=
        std::string::npos);
  CHECK(std::chrono::steady_clock::now() - start >= 250ms);
  // Once the idle client goes, its segments come back and X is restored.
  held.reset();
  idle.reset();
  CHECK(WaitFor([&] { return g.Get(s.x, kNoWait).ok(); }));
}

TEST_CASE("many processes getting one spilled object restore it once", "[spill]") {
  std::string spill = TempDir() + "/spill";
  Daemon d(SpillArgs(spill, "8MiB"));
  Client c = d.Connect();
  Guid first = PutChecked(c, 4 * kMiB, 1);
  for (uint32_t i = 0; i < 4; ++i) PutChecked(c, 2 * kMiB, 10 + i);
  auto info = c.Stat(first);
  REQUIRE(info.ok());
  REQUIRE(info->residence == ObjectInfo::Residence::kDisk);
  uint64_t restores = StatusOf(c).restores;
  // Every reader connects, then waits on a pipe; closing it lets them all ask at once.
  int go[2];
  REQUIRE(::pipe(go) == 0);
  std::vector<pid_t> readers;
  for (int i = 0; i < 8; ++i) {
    readers.push_back(Spawn([&] {
      ::close(go[1]);
      auto r = Client::Connect({d.socket(), "reader"});
      if (!r.ok()) return 1;
      char b;
      (void)::read(go[0], &b, 1);
      auto o = r->Get(first, 10s);
      return o.ok() && o->Verify().ok() ? 0 : 2;
    }));
  }
  ::close(go[0]);
  REQUIRE(WaitFor([&] { return StatusOf(c).clients == 9; }));
  ::close(go[1]);
  for (pid_t r : readers) CHECK(WEXITSTATUS(Wait(r)) == 0);
  CHECK(StatusOf(c).restores == restores + 1);
}

TEST_CASE("a restart after SIGTERM serves a thousand objects of mixed sizes", "[spill]") {
  std::string spill = TempDir() + "/spill";
  std::string socket = TempDir() + "/depot.sock";
  struct Kept {
    size_t size;
    uint32_t seed;
    ObjectInfo info;
  };
  std::map<Guid, Kept> kept;
  {
    Daemon d(socket, SpillArgs(spill, "32MiB"));
    Client c = d.Connect();
    for (uint32_t i = 0; i < 1000; ++i) {
      size_t size = i % 100 == 0 ? 2 * kMiB : (i % 7 + 1) * 9 * kKiB + i;
      CreateOptions opts;
      opts.name = fmt::format("object {}", i);
      std::string meta = fmt::format("metadata of {}", i);
      opts.metadata = std::as_bytes(std::span(meta));
      opts.evictable = i % 10 == 3;
      kept[PutChecked(c, size, i, opts)] = {size, i, {}};
    }
    // Evictable objects may have been evicted to make room (as they are without spilling);
    // every object there at the stop must be there after it.
    auto before = Listing(c);
    for (auto it = kept.begin(); it != kept.end();) {
      it = before.contains(it->first) ? std::next(it) : kept.erase(it);
    }
    for (auto& [g, k] : kept) k.info = before.at(g);
    size_t non_evictable = 0;
    for (auto& [g, k] : kept) non_evictable += !k.info.evictable;
    CHECK(non_evictable == 900);
    CHECK(d.Stop(SIGTERM) == 0);
    CHECK(d.Log().find(fmt::format("{} objects", kept.size())) != std::string::npos);
  }
  Daemon d(socket, SpillArgs(spill, "32MiB"));
  Client c = d.Connect();
  auto listing = Listing(c);
  REQUIRE(listing.size() == kept.size());
  // What the user stores still counts against its quota (its objects alone: no lease is held).
  uint64_t bytes = 0;
  for (const auto& [g, k] : kept) bytes += k.size;
  CHECK(StatusOf(c).users == std::vector<StoreStatus::UserUsage>{{::getuid(), kept.size(), bytes}});
  for (const auto& [g, k] : kept) {
    const ObjectInfo& o = listing.at(g);
    CHECK(o.residence == ObjectInfo::Residence::kDisk);
    CHECK(o.name == k.info.name);
    CHECK(o.size == k.size);
    CHECK(o.checksum == k.info.checksum);
    CHECK(o.creator_pid == k.info.creator_pid);
    CHECK(o.creator_uid == k.info.creator_uid);
    CHECK(o.evictable == k.info.evictable);
    CHECK(o.created_unix_ns == k.info.created_unix_ns);
    CHECK(o.sealed_unix_ns == k.info.sealed_unix_ns);
  }
  for (const auto& [g, k] : kept) {
    auto meta = c.Stat(g);
    REQUIRE(meta.ok());
    std::string want = fmt::format("metadata of {}", k.seed);
    CHECK(std::string(reinterpret_cast<const char*>(meta->metadata.data()),
                      meta->metadata.size()) == want);
    CheckBytes(c, g, k.size, k.seed);
  }
  CHECK(d.Log().find(fmt::format("{0} of the {0} objects", kept.size())) != std::string::npos);
}

TEST_CASE("an owner-scoped object on disk at a crash goes when its process does not come back",
          "[spill][owner_scoped]") {
  std::string spill = TempDir() + "/spill";
  std::string socket = TempDir() + "/depot.sock";
  std::optional<Daemon> first(std::in_place, socket, SpillArgs(spill));
  Client c = first->Connect();
  // Another process makes the object, owner-scoped, and keeps its connection until it is killed.
  auto [maker, scoped] = SpawnScopedMaker(socket, Pattern(4 * kKiB, 2));
  // More than the pool holds: the oldest objects, the owner-scoped one first, go to disk.
  std::vector<Guid> plain;
  for (uint32_t i = 0; i < 96; ++i) plain.push_back(PutChecked(c, 256 * kKiB, 10 + i));
  REQUIRE(WaitFor([&] {
    auto listing = Listing(c);
    return listing.contains(scoped) && listing.at(scoped).residence == ObjectInfo::Residence::kDisk;
  }));
  first->Stop(SIGKILL);  // a crash: nothing more is written
  first.reset();
  ::kill(maker, SIGKILL);  // its process is gone before the next daemon starts
  Wait(maker);
  std::vector<std::string> args = SpillArgs(spill);
  args.insert(args.end(), {"--restart-grace-ms", "300"});
  Daemon second(socket, args);
  Client d = second.Connect();
  INFO(second.Log());
  CHECK(d.Stat(scoped).ok());  // during the grace period, it is there
  CHECK(WaitFor([&] { return d.Stat(scoped).status().IsNotFound(); }, 10s));
  CHECK(second.Log().find("1 owner-scoped objects deleted") != std::string::npos);
  // The objects of no scope that were on disk stay.
  size_t on_disk = 0;
  for (const auto& [g, o] : Listing(d)) on_disk += o.residence == ObjectInfo::Residence::kDisk;
  CHECK(on_disk > 0);
}

TEST_CASE("kill -9 during spills and restores loses nothing on disk and leaves no half files",
          "[spill]") {
  std::string spill = TempDir() + "/spill";
  std::string socket = TempDir() + "/depot.sock";
  std::map<Guid, uint32_t> seeds;
  {
    Daemon d(socket, SpillArgs(spill, "16MiB"));
    Client c = d.Connect();
    // Large objects, so that spills are under way when the daemon dies.
    for (uint32_t i = 0; i < 12; ++i) seeds[PutChecked(c, 4 * kMiB, i)] = i;
    // The census, rewritten within a second, is how the next start counts what was lost.
    REQUIRE(WaitFor([&] {
      std::ifstream in(spill + "/CENSUS");
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      return text.find("shared 12 ") != std::string::npos;
    }));
    REQUIRE(d.Stop(SIGKILL) != 0);
  }
  size_t on_disk = FilesIn(spill + "/shared");
  CHECK(on_disk > 0);
  {
    Daemon d(socket, SpillArgs(spill, "16MiB"));
    Client c = d.Connect();
    size_t temp = 0;
    CHECK(FilesIn(spill + "/shared", &temp) == on_disk);
    CHECK(temp == 0);  // unfinished writes were removed, never served
    auto listing = Listing(c);
    CHECK(listing.size() == on_disk);
    CHECK(d.Log().find("did not stop cleanly") != std::string::npos);
    CHECK(d.Log().find(fmt::format("{} objects it held in memory only are lost (of 12",
                                   12 - on_disk)) != std::string::npos);
    // Now die while restores run: gets of everything from another process.
    pid_t reader = Spawn([&] {
      auto r = Client::Connect({d.socket(), "reader"});
      if (!r.ok()) return 1;
      for (const auto& [g, o] : listing) (void)r->Get(g, 10s);
      return 0;
    });
    REQUIRE(WaitFor([&] { return StatusOf(c).restores > 0; }));
    d.Stop(SIGKILL);
    Wait(reader);
  }
  Daemon d(socket, SpillArgs(spill, "16MiB"));
  Client c = d.Connect();
  auto listing = Listing(c);
  CHECK(listing.size() > 0);
  for (const auto& [g, o] : listing) CheckBytes(c, g, 4 * kMiB, seeds.at(g));
}

TEST_CASE("a full disk: the create gets StoreFull naming the pool and the spill directory",
          "[spill]") {
  NeedRoot();
  if (Run({"unshare", "-m", "true"}) != 0) Skip("cannot make a mount namespace (unshare -m)");
  std::string dir = TempDir();
  std::string spill = dir + "/spill";
  fs::create_directory(spill);
  ::chmod(spill.c_str(), 0700);
  // The daemon's own mount namespace, where its spill directory is a 3 MiB tmpfs.
  std::vector<std::string> wrapper = {
      "unshare",
      "-m",
      "sh",
      "-c",
      "mount --make-rprivate / && mount -t tmpfs -o size=3m,mode=0700 spill " + spill +
          " && exec \"$@\"",
      "sh"};
  std::vector<std::string> args = SpillArgs(spill, "4MiB");
  args.insert(args.end(), {"--spill-capacity", "1GiB"});  // more than the disk: the disk fills
  Daemon d(dir + "/depot.sock", args, wrapper);
  Client c = d.Connect();
  Status full;
  for (uint32_t i = 0; i < 12 && full.ok(); ++i) {
    auto g = c.Put(Pattern(900 * kKiB, i));
    if (!g.ok()) full = g.status();
  }
  INFO(full.ToString());
  REQUIRE(full.IsStoreFull());
  CHECK(full.message().find(spill) != std::string::npos);
  CHECK(full.message().find("host pool") != std::string::npos);
  CHECK(full.message().find("No space left on device") != std::string::npos);
  CHECK(StatusOf(c).spill_failures > 0);
  // The daemon goes on: deletes make room, and what it spilled reads back.
  for (const auto& [g, o] : Listing(c)) {
    if (o.residence == ObjectInfo::Residence::kMemory) REQUIRE(c.Delete(g).ok());
  }
  Guid on_disk = OneOnDisk(c);
  auto got = c.Get(on_disk, 10s);
  INFO(got.status().ToString());
  CHECK(got.ok());
}

TEST_CASE("per-user namespaces spill to places of their own and never see each other's",
          "[spill][hostile]") {
  NeedRoot();
  std::string spill = TempDir() + "/spill";
  Daemon d = StartOpen({"--namespaces", "per_user", "--segment-size", "1MiB", "--spill-dir", spill,
                        "--allow-users", fmt::format("{},{}", kAlice, kBob)});
  // Alice puts twice the 64 MiB pool; much of it goes to disk.
  std::vector<Guid> alice;
  Channel guids;
  int rc = RunAs(kAlice, kAlice, {}, [&] {
    Client a = d.Connect();
    for (uint32_t i = 0; i < 16; ++i) {
      auto g = a.Put(Pattern(8 * kMiB - i, i));
      if (!g.ok()) return 1;
      guids.Send(g->ToString());
    }
    return 0;
  });
  REQUIRE(rc == 0);
  for (int i = 0; i < 16; ++i) alice.push_back(*Guid::Parse(guids.Receive()));
  CHECK(FilesIn(spill + "/uid-41001") > 0);
  CHECK_FALSE(fs::exists(spill + "/uid-41002"));
  // Bob sees none of them, on disk or in memory, and cannot reach the files.
  rc = RunAs(kBob, kBob, {}, [&] {
    Client bob = d.Connect();
    auto page = bob.List();
    if (!page.ok() || !page->objects.empty()) return 1;
    for (const Guid& g : alice) {
      if (!bob.Get(g).status().IsNotFound()) return 2;
    }
    int fd = ::open((spill + "/uid-41001").c_str(), O_RDONLY | O_DIRECTORY);
    if (fd >= 0 || errno != EACCES) return 3;
    return 0;
  });
  CHECK(rc == 0);
  // Alice reads every one back.
  rc = RunAs(kAlice, kAlice, {}, [&] {
    Client a = d.Connect();
    for (uint32_t i = 0; i < alice.size(); ++i) {
      auto o = a.Get(alice[i], 10s);
      auto want = Pattern(8 * kMiB - i, i);
      if (!o.ok() || !std::equal(want.begin(), want.end(), o->frame(0).begin())) return 1;
    }
    return 0;
  });
  CHECK(rc == 0);
}

TEST_CASE("a spill directory that others may open is refused", "[spill]") {
  std::string spill = TempDir() + "/spill";
  fs::create_directory(spill);
  ::chmod(spill.c_str(), 0755);
  std::string out, err;
  int rc =
      Run({DEPOTD_PATH, "--socket", TempDir() + "/depot.sock", "--spill-dir", spill}, &out, &err);
  CHECK(rc != 0);
  CHECK(err.find("refusing to spill into " + spill) != std::string::npos);
  CHECK(Run({DEPOTD_PATH, "--spill-dir", "relative/dir", "--check-config"}, &out, &err) == 2);
  CHECK(err.find("absolute") != std::string::npos);
}
