// Device objects without a GPU: the real depotd without libcuda (device pools unavailable, host
// objects unaffected), and the same daemon code with stand-in GPUs whose chunks are memfd
// segments (memfd_depotd), which exercises the device protocol, sub-allocation in chunks, chunk
// fd passing, the client's chunk cache and cleanup. None of this is GPU coverage: that is
// cuda_test, on a machine with a GPU.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include <catch2/catch.hpp>

#include "tests/daemon_fixture.h"
#include "tests/other_users.h"

using namespace depot;
using namespace depot::test;
using namespace std::chrono_literals;

namespace {

const Place kGpu0 = Place::Gpu("GPU-00000000-0000-4000-8000-000000000001");
const Place kGpu1 = Place::Gpu("GPU-00000000-0000-4000-8000-000000000002");

Daemon StandIn(std::vector<std::string> args = {}) {
  args.insert(args.begin(), {"--capacity", "64MiB", "--device-chunk-size", "16MiB"});
  return Daemon(TempDir() + "/depot.sock", args, {}, MEMFD_DEPOTD_PATH);
}

uint64_t DeviceUsed(Client& c, uint32_t pool) {
  auto st = c.GetStatus();
  REQUIRE(st.ok());
  for (const auto& p : st->device_pools) {
    if (p.pool == pool) return p.used;
  }
  FAIL("no device pool " << pool);
  return 0;
}

}  // namespace

TEST_CASE("without libcuda the daemon serves host objects and says why it has no device pools",
          "[device]") {
#ifdef DEPOT_HAVE_CUDA
  const std::string why = "cannot load /nonexistent/libcuda.so.1";
  const std::string pin_why = "libcuda.so.1";  // this test process has no driver either
#else
  const std::string why = "this depotd is built without CUDA support";
  const std::string pin_why = "built without CUDA support";
#endif
  ::setenv("DEPOT_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
  Daemon d;
  ::unsetenv("DEPOT_LIBCUDA");
  CHECK(d.Log().find("device pools: unavailable (" + why) != std::string::npos);
  Client c = d.Connect();
  auto pools = c.DevicePools();
  REQUIRE(pools.status().IsUnavailable());
  CHECK(pools.status().message().find(why) != std::string::npos);
  CreateOptions o;
  o.places = {kGpu0};
  auto draft = c.Create({4096}, o);
  REQUIRE(draft.status().IsUnavailable());
  CHECK(draft.status().message().find("device pools: unavailable") != std::string::npos);
  auto id = c.Put(Pattern(100000, 1));
  REQUIRE(id.ok());
  CHECK(c.Get(*id).ok());
  Status pinned = c.PinHostMemory();
  CHECK(pinned.IsUnavailable());
  CHECK(pinned.message().find(pin_why) != std::string::npos);
  std::string out;
  REQUIRE(Run({DEPOTCTL_PATH, "--socket", d.socket(), "status"}, &out) == 0);
  CHECK(out.find("device pools  unavailable (" + why) != std::string::npos);
}

TEST_CASE("devices = none turns device pools off", "[device]") {
  Daemon d = StandIn({"--devices", "none"});
  auto pools = d.Connect().DevicePools();
  REQUIRE(pools.status().IsUnavailable());
  CHECK(pools.status().message().find("devices = none") != std::string::npos);
}

TEST_CASE("devices chooses GPUs by UUID", "[device]") {
  Daemon d = StandIn({"--devices", kGpu1.gpu});
  auto pools = d.Connect().DevicePools();
  REQUIRE(pools.ok());
  REQUIRE(pools->size() == 1);
  CHECK((*pools)[0].uuid == kGpu1.gpu);
  CHECK((*pools)[0].pool == 1);
  CHECK((*pools)[0].kind == "memfd-test");
}

TEST_CASE("an object of host and device frames round trips between processes", "[device]") {
  Daemon d = StandIn();
  const std::vector<uint64_t> sizes = {4096, 1 << 20, 3 << 20, 512 << 10};
  const std::vector<Place> places = {Place::Host(), kGpu0, kGpu0, kGpu1};
  Channel ch;
  pid_t producer = Spawn([&] {
    Client c = d.Connect();
    CreateOptions o;
    o.places = places;
    o.name = "mixed";
    auto draft = c.Create(sizes, o);
    if (!draft.ok()) return 1;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (draft->place(i) != places[i]) return 2;
      // The stand-in's device memory is host memory, so the test can fill it directly.
      auto bytes = Pattern(sizes[i], static_cast<uint32_t>(i));
      std::memcpy(draft->frame(i).data(), bytes.data(), bytes.size());
    }
    Guid g = draft->guid();
    if (!draft->Seal().ok()) return 3;
    ch.Send(g.ToString());
    return 0;
  });
  auto guid = Guid::Parse(ch.Receive());
  REQUIRE(guid.has_value());
  int status = Wait(producer);
  REQUIRE(WEXITSTATUS(status) == 0);
  int consumer = RunChild([&] {
    Client c = d.Connect();
    auto obj = c.Get(*guid);
    if (!obj.ok() || obj->frame_count() != sizes.size()) return 1;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (obj->place(i) != places[i]) return 2;
      if (std::memcmp(obj->frame(i).data(), Pattern(sizes[i], static_cast<uint32_t>(i)).data(),
                      sizes[i]) != 0) {
        return 3;
      }
    }
    return 0;
  });
  CHECK(consumer == 0);
  Client c = d.Connect();
  auto info = c.Stat(*guid);
  REQUIRE(info.ok());
  CHECK(info->frames[0].pool == 0);
  CHECK(info->frames[1].pool == 1);
  CHECK(info->frames[3].pool == 2);
  CHECK(info->frames[1].offset % 256 == 0);
  CHECK(DeviceUsed(c, 1) >= (4u << 20));
  std::string out;
  REQUIRE(Run({DEPOTCTL_PATH, "--socket", d.socket(), "status"}, &out) == 0);
  CHECK(out.find("gpu0 " + kGpu0.gpu + " (memfd stand-in 0, memfd-test)") != std::string::npos);
  REQUIRE(Run({DEPOTCTL_PATH, "--socket", d.socket(), "ls"}, &out) == 0);
  CHECK(out.find("1 host, 2 gpu0, 1 gpu1") != std::string::npos);
}

TEST_CASE("device objects in one chunk share one import", "[device]") {
  Daemon d = StandIn();
  Client producer = d.Connect();
  CreateOptions o;
  o.places = {kGpu0};
  std::vector<Guid> guids;
  for (int i = 0; i < 20; ++i) {
    auto id = producer.Put(Pattern(64 << 10, i), o);  // copied into device memory, not inline
    REQUIRE(id.ok());
    guids.push_back(*id);
  }
  Client consumer = d.Connect();
  auto objs = consumer.Get(std::span<const Guid>(guids), kNoWait);
  std::string first;
  for (size_t i = 0; i < objs.size(); ++i) {
    REQUIRE(objs[i].ok());
    CHECK(std::memcmp(objs[i]->frame(0).data(), Pattern(64 << 10, static_cast<int>(i)).data(),
                      64 << 10) == 0);
    std::string mapping = MappingOf(objs[i]->frame(0).data());
    CHECK(mapping.find("depot-test-gpu0-chunk") != std::string::npos);
    if (i == 0) first = mapping;
    CHECK(mapping == first);  // the same mapping: the chunk was imported once
  }
}

TEST_CASE("a killed client's device creates and references are given back", "[device]") {
  Daemon d = StandIn();
  Client c = d.Connect();
  CreateOptions o;
  o.places = {kGpu0};
  auto held = c.Put(Pattern(1 << 20, 1), o);
  REQUIRE(held.ok());
  uint64_t before = DeviceUsed(c, 1);
  Channel ch;
  pid_t victim = Spawn([&] {
    Client k = d.Connect();
    auto draft = k.Create({8 << 20}, o);  // never sealed
    auto obj = k.Get(*held);
    ch.Send(draft.ok() && obj.ok() ? "ready" : "failed");
    ::pause();
    return 0;
  });
  REQUIRE(ch.Receive() == "ready");
  CHECK(DeviceUsed(c, 1) > before);
  REQUIRE(c.Delete(*held).ok());  // still referenced by the victim: not freed yet
  CHECK(DeviceUsed(c, 1) > 0);
  ::kill(victim, SIGKILL);
  Wait(victim);
  CHECK(WaitFor([&] { return DeviceUsed(c, 1) == 0; }));
}

TEST_CASE("a deleted device range is reused only after its last reference goes", "[device]") {
  Daemon d = StandIn();
  Client producer = d.Connect();
  Client reader = d.Connect();
  CreateOptions o;
  o.places = {kGpu0};
  auto a = producer.Put(Pattern(1 << 20, 1), o);
  REQUIRE(a.ok());
  uint64_t a_offset = producer.Stat(*a)->frames[0].offset;
  std::optional<Object> view = *reader.Get(*a);
  REQUIRE(producer.Delete(*a).ok());
  auto b = producer.Put(Pattern(1 << 20, 2), o);
  REQUIRE(b.ok());
  CHECK(producer.Stat(*b)->frames[0].offset != a_offset);
  // The reader's view still shows A's bytes.
  CHECK(std::memcmp(view->frame(0).data(), Pattern(1 << 20, 1).data(), 1 << 20) == 0);
  view.reset();
  REQUIRE(WaitFor([&] { return DeviceUsed(producer, 1) < (2u << 20); }));
  auto c = producer.Put(Pattern(1 << 20, 3), o);
  REQUIRE(c.ok());
  CHECK(producer.Stat(*c)->frames[0].offset == a_offset);
}

TEST_CASE("a full device pool answers StoreFull naming the GPU", "[device]") {
  Daemon d = StandIn({"--device-capacity", "20MiB"});
  Client c = d.Connect();
  CreateOptions o;
  o.places = {kGpu0};
  auto big = c.Create({12 << 20}, o);  // more than half a chunk: a chunk of its own
  REQUIRE(big.ok());
  auto second = c.Create({12 << 20}, o);
  REQUIRE(second.status().IsStoreFull());
  CHECK(second.status().message().find("on the GPU") != std::string::npos);
  o.places = {kGpu1};
  CHECK(c.Create({12 << 20}, o).ok());  // the other GPU has room
}

TEST_CASE("checksums are refused for objects with device frames", "[device]") {
  Daemon d = StandIn();
  CreateOptions o;
  o.places = {Place::Host(), kGpu0};
  o.checksum = true;
  auto draft = d.Connect().Create({4096, 4096}, o);
  REQUIRE(draft.status().IsInvalidArgument());
  CHECK(draft.status().message().find("host frames only") != std::string::npos);
}

namespace {

// The stand-in's chunks this process holds (what the daemon sent it), with their access modes.
std::vector<std::pair<int, int>> ChunkFds() {
  std::vector<std::pair<int, int>> fds;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    std::string target = std::filesystem::read_symlink(e.path(), ec).string();
    if (!target.starts_with("/memfd:depot-test-gpu")) continue;
    int fd = std::stoi(e.path().filename().string());
    fds.emplace_back(fd, ::fcntl(fd, F_GETFL) & O_ACCMODE);
  }
  return fds;
}

}  // namespace

// Where the memory allows it (the memfd stand-in; a CUDA importer sets its own access), device
// chunks follow the host's rules: gets bring a read-only descriptor, and no descriptor resizes.
TEST_CASE("a reader's device chunk is read-only and no chunk can be resized", "[device]") {
  Daemon d = StandIn();
  CreateOptions o;
  o.places = {kGpu0};
  auto id = d.Connect().Put(Pattern(64 << 10, 3), o);
  REQUIRE(id.ok());
  int reader = RunChild([&] {
    Client c = d.Connect();
    auto obj = c.Get(*id);
    if (!obj.ok()) return 10;
    auto fds = ChunkFds();
    if (fds.empty()) return 11;
    for (auto [fd, mode] : fds) {
      if (mode != O_RDONLY) return 1;
      errno = 0;
      if (::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) != MAP_FAILED) return 2;
      if (errno != EACCES) return 3;
      if (::ftruncate(fd, 0) == 0) return 4;
    }
    return 0;
  });
  CHECK(reader == 0);
  int creator = RunChild([&] {
    Client c = d.Connect();
    auto draft = c.Create({4096}, o);
    if (!draft.ok()) return 10;
    auto fds = ChunkFds();
    if (fds.empty()) return 11;
    for (auto [fd, mode] : fds) {
      if (mode != O_RDWR) return 1;
      errno = 0;
      if (::ftruncate(fd, 0) == 0 || errno != EPERM) return 2;
      if (::ftruncate(fd, 1 << 30) == 0 || errno != EPERM) return 3;
    }
    return 0;
  });
  CHECK(creator == 0);
  Client c = d.Connect();
  auto obj = c.Get(*id);
  REQUIRE(obj.ok());
  CHECK(std::memcmp(obj->frame(0).data(), Pattern(64 << 10, 3).data(), 64 << 10) == 0);
}

TEST_CASE("creators of two uids never share a device chunk", "[device]") {
  NeedRoot();
  std::string dir = TempDir();
  REQUIRE(::chmod(dir.c_str(), 0755) == 0);
  Daemon d(dir + "/depot.sock",
           {"--capacity", "64MiB", "--device-chunk-size", "16MiB", "--socket-mode", "0666",
            "--allow-users", std::to_string(kAlice) + "," + std::to_string(kBob)},
           {}, MEMFD_DEPOTD_PATH);
  CreateOptions o;
  o.places = {kGpu0};
  auto put_as = [&](uid_t uid, uint32_t seed) {
    int rc =
        RunAs(uid, uid, {}, [&] { return d.Connect().Put(Pattern(4096, seed), o).ok() ? 0 : 1; });
    REQUIRE(rc == 0);
  };
  put_as(kAlice, 1);
  put_as(kBob, 2);
  put_as(kAlice, 3);
  auto page = d.Connect().List();
  REQUIRE(page.ok());
  std::map<uid_t, std::set<uint32_t>> chunks;
  Client c = d.Connect();
  for (const ObjectInfo& info : page->objects) {
    auto st = c.Stat(info.guid);
    REQUIRE(st.ok());
    chunks[info.creator_uid].insert(st->frames.at(0).segment);
  }
  REQUIRE(chunks[kAlice].size() == 1);  // alice's two objects share her chunk
  REQUIRE(chunks[kBob].size() == 1);
  CHECK(*chunks[kAlice].begin() != *chunks[kBob].begin());
}
