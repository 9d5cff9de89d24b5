// Device objects without a GPU: the real depotd without libcuda (device pools unavailable, host
// objects unaffected), and the same daemon code with stand-in GPUs whose chunks are memfd
// segments (memfd_depotd), which exercises the device protocol, sub-allocation in chunks, chunk
// fd passing, the client's chunk cache and cleanup. None of this is GPU coverage: that is
// cuda_test, on a machine with a GPU.
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

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

TEST_CASE("a GPU named in devices that is not here is said, with the MIG rule", "[device]") {
  const std::string absent = "GPU-00000000-0000-4000-8000-000000000009";
  const std::string mig = "MIG-00000000-0000-4000-8000-000000000009";
  {
    // One of two found: pooled, and the other named in the log.
    Daemon d = StandIn({"--devices", kGpu1.gpu + "," + absent});
    auto pools = d.Connect().DevicePools();
    REQUIRE(pools.ok());
    CHECK(pools->size() == 1);
    CHECK(d.Log().find(absent + " named in devices is not here") != std::string::npos);
  }
  // A MIG instance a CUDA process cannot see: the reason says why it may not be.
  Daemon d = StandIn({"--devices", mig});
  auto pools = d.Connect().DevicePools();
  REQUIRE(pools.status().IsUnavailable());
  CHECK(pools.status().message().find(mig + " named in devices is not here (a CUDA process sees "
                                            "only one MIG instance") != std::string::npos);
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

namespace {

// Mappings in process `pid` whose /proc maps line contains `name` and ends with `suffix`.
int MappingsIn(pid_t pid, const std::string& name, const std::string& suffix = "") {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) {
    n += line.find(name) != std::string::npos && line.ends_with(suffix);
  }
  return n;
}

}  // namespace

// A client maps a shared segment (or chunk) once and keeps it for the objects to come; when the
// daemon gives it back, a client that is not reading its socket still maps it. Until it says it
// has unmapped it (it does so when it next talks to the daemon) or it is gone, the segment's
// bytes stay counted against the capacity, so the daemon never promises memory that a mapping
// still holds.
TEST_CASE("a retired segment an idle client still maps is counted until it lets go", "[device]") {
  const bool device = GENERATE(false, true);
  const bool killed = GENERATE(false, true);
  CAPTURE(device, killed);
  // Two segments' worth of capacity: 4 MiB host segments, or 16 MiB chunks.
  const uint64_t seg = device ? 16 << 20 : 4 << 20;
  // One empty segment (or chunk) is kept warm, as on a GPU.
  Daemon d = StandIn({"--capacity", "8MiB", "--segment-size", "4MiB", "--keep-warm", "4MiB",
                      "--device-capacity", "32MiB"});
  CreateOptions o;
  if (device) o.places = {kGpu0};
  auto held_bytes = [&](Client& c) -> uint64_t {
    auto st = c.GetStatus();
    REQUIRE(st.ok());
    return device ? st->device_pools.at(0).retired_held : st->retired_held;
  };
  // Two halves fill the first segment; the third object opens the second. They are put by a
  // process of their own, so that no child forked here inherits a mapping of them.
  Channel guids;
  REQUIRE(RunChild([&] {
            Client p = d.Connect();
            for (uint32_t seed : {1, 2, 3}) {
              auto id = p.Put(Pattern(seg / 2, seed), o);
              if (!id.ok()) return 1;
              guids.Send(id->ToString());
            }
            return 0;
          }) == 0);
  std::optional<Guid> a1 = Guid::Parse(guids.Receive()), a2 = Guid::Parse(guids.Receive()),
                      b = Guid::Parse(guids.Receive());
  Client c = d.Connect();
  uint32_t b_segment = c.Stat(*b)->frames.at(0).segment;
  REQUIRE(b_segment != c.Stat(*a1)->frames.at(0).segment);
  const std::string name = device ? "/memfd:depot-test-gpu0-chunk" : "/memfd:depot-";
  const std::string suffix = device ? "" : fmt::format("-{} (deleted)", b_segment);

  Channel from_child, to_child;
  pid_t idle = Spawn([&] {
    Client k = d.Connect();
    {
      auto obj = k.Get(*b);  // maps the second segment; dropping the object keeps the mapping
      if (!obj.ok() || std::memcmp(obj->frame(0).data(), Pattern(seg / 2, 3).data(), seg / 2)) {
        from_child.Send("failed");
        return 1;
      }
    }
    from_child.Send("ready");
    to_child.Receive();                 // idle: reads nothing from the daemon meanwhile
    if (!k.GetStatus().ok()) return 2;  // any request reads the notice that waits
    from_child.Send("talked");
    ::pause();
    return 0;
  });
  REQUIRE(from_child.Receive() == "ready");
  REQUIRE(MappingsIn(idle, name, suffix) == 1);
  // Its reference goes within a millisecond; then the object is freed as soon as it is deleted.
  REQUIRE(WaitFor([&] { return c.GetStatus()->objects_deleted == 0; }));
  REQUIRE(c.Delete(*a1).ok());
  REQUIRE(c.Delete(*a2).ok());  // the first segment, empty, is kept warm
  REQUIRE(c.Delete(*b).ok());   // the second is given back, but the idle client maps it
  REQUIRE(WaitFor([&] { return c.GetStatus()->objects_deleted == 0; }));
  CHECK(held_bytes(c) == seg);
  CHECK(MappingsIn(idle, name, suffix) == 1);
  // More than one segment's worth needs both: the held one is not free.
  auto refused = c.Create({seg + seg / 8}, o);
  INFO(refused.status().ToString());
  REQUIRE(refused.status().IsStoreFull());
  CHECK(refused.status().message().find("in retired segments that clients have not unmapped") !=
        std::string::npos);
  std::string out;
  REQUIRE(Run({DEPOTCTL_PATH, "--socket", d.socket(), "status"}, &out) == 0);
  CHECK(out.find(device ? "in retired chunks clients still map"
                        : "in retired segments clients still map") != std::string::npos);

  if (killed) {
    ::kill(idle, SIGKILL);
    Wait(idle);
  } else {
    to_child.Send("talk");
    REQUIRE(from_child.Receive() == "talked");
  }
  CHECK(WaitFor([&] { return held_bytes(c) == 0; }));
  if (!killed) CHECK(MappingsIn(idle, name, suffix) == 0);
  auto made = c.Create({seg + seg / 8}, o);
  INFO(made.status().ToString());
  CHECK(made.ok());
  if (!killed) {
    ::kill(idle, SIGKILL);
    Wait(idle);
  }
}

// The backend numbers devices in its own list; with `devices` naming a subset the daemon's pool
// 1 is the backend's second GPU, and its memory must come from there (the stand-in names each
// chunk after the device it is on).
TEST_CASE("a device subset takes memory on the GPU it names", "[device]") {
  Daemon d = StandIn({"--devices", kGpu1.gpu});
  Client c = d.Connect();
  CreateOptions o;
  o.places = {kGpu1};
  auto draft = c.Create({1 << 20}, o);
  REQUIRE(draft.ok());
  CHECK(MappingOf(draft->frame(0).data()).find("depot-test-gpu1-chunk") != std::string::npos);
  REQUIRE(draft->Seal().ok());
  o.places = {kGpu0};
  CHECK(c.Create({4096}, o).status().IsInvalidArgument());  // not pooled
}

// What the stand-in can show of puts and seals from a thread that never touched a GPU (CUDA
// needs a current context for both; cuda_test checks that on a GPU).
TEST_CASE("a put and a seal of device frames from a fresh thread", "[device]") {
  Daemon d = StandIn();
  Client c = d.Connect();
  Result<Guid> put = Status::Unavailable("not run");
  Status sealed = Status::Unavailable("not run");
  std::optional<Guid> created;
  std::thread([&] {
    CreateOptions o;
    o.places = {kGpu0, kGpu1};
    put = c.Put(std::vector<std::span<const std::byte>>{Pattern(1 << 20, 7), Pattern(4096, 8)}, o);
    auto draft = c.Create({1 << 20}, o = CreateOptions{.places = {kGpu1}});
    if (!draft.ok()) return;
    auto bytes = Pattern(1 << 20, 9);
    std::memcpy(draft->frame(0).data(), bytes.data(), bytes.size());
    created = draft->guid();
    sealed = draft->Seal();
  }).join();
  REQUIRE(put.ok());
  REQUIRE(sealed.ok());
  Client reader = d.Connect();
  auto a = reader.Get(*put);
  auto b = reader.Get(*created);
  REQUIRE((a.ok() && b.ok()));
  CHECK(std::memcmp(a->frame(0).data(), Pattern(1 << 20, 7).data(), 1 << 20) == 0);
  CHECK(std::memcmp(a->frame(1).data(), Pattern(4096, 8).data(), 4096) == 0);
  CHECK(std::memcmp(b->frame(0).data(), Pattern(1 << 20, 9).data(), 1 << 20) == 0);
  CHECK(a->Populate().ok());  // device frames are skipped, host ones filled
}

// At boot the GPU's kernel modules may load after the daemon started: it looks for GPUs again
// on a thread of its own, 2 seconds after starting and less often after each look that finds
// none, and at once on SIGHUP.
TEST_CASE("a daemon that found no GPU finds them later", "[device]") {
  const bool on_hup = GENERATE(true, false);
  CAPTURE(on_hup);
  std::string gpus = TempDir() + "/gpus";
  auto set_gpus = [&](int n) { std::ofstream(gpus) << n << "\n"; };
  set_gpus(0);
  ::setenv("DEPOT_TEST_GPUS_FILE", gpus.c_str(), 1);
  Daemon d = StandIn();
  ::unsetenv("DEPOT_TEST_GPUS_FILE");
  CHECK(d.Log().find("device pools: unavailable (no stand-in GPUs") != std::string::npos);
  Client early = d.Connect();
  CHECK(early.DevicePools().status().IsUnavailable());
  set_gpus(2);
  if (on_hup) ::kill(d.pid(), SIGHUP);
  REQUIRE(WaitFor([&] { return d.Log().find("found on looking again") != std::string::npos; }));
  Client late = d.Connect();
  auto pools = late.DevicePools();
  REQUIRE(pools.ok());
  CHECK(pools->size() == 2);
  CHECK(d.Log().find("device pools: found on looking again: 2 GPUs (memfd-test)") !=
        std::string::npos);
  CreateOptions o;
  o.places = {kGpu1};
  auto id = late.Put(Pattern(1 << 20, 4), o);
  REQUIRE(id.ok());
  // A client connected before knows only the pools its hello listed; it reads host objects
  // as ever, and what others put on the GPUs it cannot map.
  CHECK(early.Put(Pattern(100, 1)).ok());
  CHECK(early.Create({4096}, o).status().IsUnavailable());
  auto st = late.GetStatus();
  REQUIRE(st.ok());
  CHECK(st->devices_unavailable.empty());
}

TEST_CASE("a slow look for GPUs keeps no client waiting", "[device]") {
  // Each look takes 3 s (a driver slow to initialise) and finds none, again and again.
  std::string gpus = TempDir() + "/gpus";
  std::ofstream(gpus) << "0 3000\n";
  ::setenv("DEPOT_TEST_GPUS_FILE", gpus.c_str(), 1);
  Daemon d = StandIn();
  ::unsetenv("DEPOT_TEST_GPUS_FILE");
  // Over 7 s, in which the daemon looks at least once more, every connect and ping is quick.
  auto longest = std::chrono::steady_clock::duration::zero();
  for (auto end = std::chrono::steady_clock::now() + 7s; std::chrono::steady_clock::now() < end;) {
    auto start = std::chrono::steady_clock::now();
    Client c = d.Connect();
    REQUIRE(c.Ping().ok());
    longest = std::max(longest, std::chrono::steady_clock::now() - start);
    std::this_thread::sleep_for(100ms);
  }
  CHECK(longest < 1500ms);
}

TEST_CASE("SIGHUP with GPUs already found does not look again", "[device]") {
  Daemon d = StandIn();
  ::kill(d.pid(), SIGHUP);
  REQUIRE(WaitFor([&] { return d.Log().find("not looking again") != std::string::npos; }));
  CHECK(d.Connect().DevicePools()->size() == 2);
}
