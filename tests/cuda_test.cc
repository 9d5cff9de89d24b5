// Device objects on a real GPU, with the real depotd (CUDA backend). Tagged [cuda]: where there
// is no driver or no GPU each test exits 77, which ctest reports as skipped, with the reason.
//
// CUDA does not survive fork(): the test process itself never initialises it; every process
// that touches the GPU (the capability check included) is a child.
#include <fmt/format.h>
#include <signal.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "common/cuda_driver.h"
#include "common/unique_fd.h"
#include "proto/fd_passing.h"
#include "tests/daemon_fixture.h"
#include "tests/fd_store_stand_in.h"
#include "tests/kept_service.h"

using namespace depot;
using namespace depot::test;

namespace {

// Skips the test unless a child process finds `gpus` GPUs (at least) with what device pools need.
void NeedGpu(int gpus = 1) {
  Channel why;
  int rc = RunChild([&] {
    auto cu = LoadCudaDriver();
    if (!cu.ok()) {
      why.Send(cu.status().message());
      return 77;
    }
    int count = 0;
    if (CUresult r = (*cu)->DeviceGetCount(&count); r != CUDA_SUCCESS) {
      why.Send((*cu)->Error(r, "cuDeviceGetCount"));
      return 77;
    }
    why.Send(count >= gpus ? ""
                           : fmt::format("the CUDA driver sees {} GPU(s), not {}", count, gpus));
    return count >= gpus ? 0 : 77;
  });
  std::string reason = why.Receive();
  if (rc == 77) Skip(fmt::format("needs {} CUDA GPU(s): {}", gpus, reason));
  REQUIRE(rc == 0);
}

// The UUID of GPU `ordinal`, read in a child (this process never initialises CUDA).
std::string UuidOf(int ordinal) {
  Channel uuid;
  int rc = RunChild([&] {
    const CudaDriver& cu = **LoadCudaDriver();
    CUdevice dev;
    if (cu.DeviceGet(&dev, ordinal) != CUDA_SUCCESS) return 1;
    auto id = DeviceUuid(cu, dev);
    uuid.Send(id.ok() ? *id : "");
    return id.ok() ? 0 : 2;
  });
  REQUIRE(rc == 0);
  return uuid.Receive();
}

// Makes device `ordinal`'s primary context current in this thread (of a child process).
const CudaDriver& Cuda(int ordinal = 0) {
  const CudaDriver* cu = *LoadCudaDriver();
  CUdevice dev;
  CUcontext ctx;
  cu->DeviceGet(&dev, ordinal);
  cu->DevicePrimaryCtxRetain(&ctx, dev);
  cu->CtxSetCurrent(ctx);
  return *cu;
}

// Free bytes on GPU `ordinal`, from a child.
uint64_t FreeOn(int ordinal) {
  Channel bytes;
  int rc = RunChild([&] {
    const CudaDriver& cu = Cuda(ordinal);
    size_t free = 0, total = 0;
    if (cu.MemGetInfo(&free, &total) != CUDA_SUCCESS) return 1;
    bytes.Send(std::to_string(free));
    return 0;
  });
  REQUIRE(rc == 0);
  return std::stoull(bytes.Receive());
}

CUdeviceptr Ptr(std::span<const std::byte> frame) {
  return reinterpret_cast<CUdeviceptr>(frame.data());
}

// Every 32-bit word of `frame` is `value`.
bool AllWords(const CudaDriver& cu, std::span<const std::byte> frame, uint32_t value) {
  std::vector<uint32_t> host(frame.size() / 4);
  if (cu.MemcpyDtoH(host.data(), Ptr(frame), host.size() * 4) != CUDA_SUCCESS) return false;
  return std::all_of(host.begin(), host.end(), [&](uint32_t w) { return w == value; });
}

// Holds `stream` for 300 ms: queued work behind this runs no sooner, so a wait that returns
// earlier waited for nothing.
void Hold(const CudaDriver& cu, CUstream stream) {
  REQUIRE(cu.LaunchHostFunc(
              stream, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(300)); },
              nullptr) == CUDA_SUCCESS);
}

Daemon CudaDaemon() { return Daemon({"--capacity", "256MiB", "--device-chunk-size", "256MiB"}); }

Place FirstGpu(const Daemon& d) {
  auto pools = d.Connect().DevicePools();
  REQUIRE(pools.ok());
  REQUIRE(!pools->empty());
  return Place::Gpu((*pools)[0].uuid);
}

}  // namespace

TEST_CASE("cuda: capabilities of the driver and the GPUs", "[cuda]") {
  NeedGpu();
  int rc = RunChild([] {
    const CudaDriver& cu = **LoadCudaDriver();
    int count = 0;
    cu.DeviceGetCount(&count);
    std::printf("driver version %d, %d GPU(s)\n", cu.driver_version, count);
    int usable = 0;
    for (int i = 0; i < count; ++i) {
      CUdevice dev;
      cu.DeviceGet(&dev, i);
      char name[256] = {};
      CUuuid uuid;
      int vmm = 0, fd = 0;
      cu.DeviceGetName(name, sizeof name - 1, dev);
      cu.DeviceGetUuid(&uuid, dev);
      cu.DeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
      cu.DeviceGetAttribute(&fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                            dev);
      CUmemAllocationProp prop{};
      prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
      prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      prop.location.id = dev;
      prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
      size_t granularity = 0;
      cu.MemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
      std::printf("  %d: %s %s, VMM %s, POSIX fd handles %s, granularity %zu bytes\n", i,
                  FormatGpuUuid(uuid).c_str(), name, vmm ? "yes" : "no", fd ? "yes" : "no",
                  granularity);
      usable += vmm && fd;
    }
    return usable > 0 ? 0 : 1;
  });
  CHECK(rc == 0);
  Daemon d = CudaDaemon();
  auto pools = d.Connect().DevicePools();
  REQUIRE(pools.ok());
  CHECK((*pools)[0].kind == "cuda");
  std::printf("%s\n", d.Log().c_str());
}

TEST_CASE("cuda: device frames written by one process are read by another", "[cuda]") {
  NeedGpu();
  Daemon d = CudaDaemon();
  Place gpu = FirstGpu(d);
  std::mt19937_64 rng(Catch::rngSeed());
  std::vector<uint64_t> sizes;
  for (int i = 0; i < 24; ++i)
    sizes.push_back(4 * (1 + rng() % ((i % 3 == 0 ? 16u << 20 : 64u << 10) / 4)));
  sizes.push_back(200 << 20);  // larger than half a chunk: a chunk of its own
  Channel guids;
  int producer = RunChild([&] {
    const CudaDriver& cu = Cuda();
    Client c = d.Connect();
    CreateOptions o;
    o.places = {gpu};
    for (size_t i = 0; i < sizes.size(); ++i) {
      auto draft = c.Create({sizes[i]}, o);
      if (!draft.ok()) return 1;
      // Queued on the legacy default stream; Seal waits for it.
      if (cu.MemsetD32(Ptr(draft->frame(0)), 0xD0000000u + static_cast<uint32_t>(i),
                       sizes[i] / 4) != CUDA_SUCCESS) {
        return 2;
      }
      if (!draft->Seal().ok()) return 3;
      guids.Send(draft->guid().ToString());
    }
    return 0;
  });
  REQUIRE(producer == 0);
  std::vector<Guid> made;
  for (size_t i = 0; i < sizes.size(); ++i) made.push_back(*Guid::Parse(guids.Receive()));
  int consumer = RunChild([&] {
    const CudaDriver& cu = Cuda();
    Client c = d.Connect();
    for (size_t i = 0; i < made.size(); ++i) {
      auto obj = c.Get(made[i]);
      if (!obj.ok() || obj->place(0) != gpu || obj->frame(0).size() != sizes[i]) return 1;
      if (!AllWords(cu, obj->frame(0), 0xD0000000u + static_cast<uint32_t>(i))) return 2;
    }
    return 0;
  });
  CHECK(consumer == 0);
}

TEST_CASE("cuda: a mixed object and objects sharing one chunk import it once", "[cuda]") {
  NeedGpu();
  Daemon d = CudaDaemon();
  Place gpu = FirstGpu(d);
  Client c = d.Connect();
  int rc = RunChild([&] {
    const CudaDriver& cu = Cuda();
    Client k = d.Connect();
    CreateOptions o;
    o.places = {Place::Host(), gpu, gpu, gpu};
    std::vector<Guid> guids;
    for (int n = 0; n < 10; ++n) {
      auto draft = k.Create({64, 1 << 20, 2 << 20, 4 << 10}, o);
      if (!draft.ok()) return 1;
      std::memset(draft->frame(0).data(), n, 64);
      for (size_t f = 1; f < 4; ++f)
        cu.MemsetD32(Ptr(draft->frame(f)), n * 10 + f, draft->frame(f).size() / 4);
      guids.push_back(draft->guid());
      if (!draft->Seal().ok()) return 2;
    }
    Client reader = d.Connect();
    CUdeviceptr first = 0;
    uint64_t first_offset = 0;
    for (int n = 0; n < 10; ++n) {
      auto obj = reader.Get(guids[n]);
      if (!obj.ok() || !obj->place(0).host() || obj->place(1) != gpu) return 3;
      if (static_cast<int>(obj->frame(0)[0]) != n) return 4;
      for (size_t f = 1; f < 4; ++f) {
        if (!AllWords(cu, obj->frame(f), n * 10 + f)) return 5;
      }
      // One import per chunk: every frame's address is the same base plus its offset.
      auto info = reader.Stat(guids[n]);
      if (n == 0) {
        first = Ptr(obj->frame(1));
        first_offset = info->frames[1].offset;
      } else if (Ptr(obj->frame(1)) - first != info->frames[1].offset - first_offset) {
        return 6;
      }
    }
    return 0;
  });
  CHECK(rc == 0);
}

TEST_CASE("cuda: a killed holder's device memory is reclaimed", "[cuda]") {
  NeedGpu();
  Daemon d = CudaDaemon();
  Place gpu = FirstGpu(d);
  Client c = d.Connect();
  uint64_t free_before = FreeOn(0);  // before any chunk is made
  Channel ready;
  pid_t victim = Spawn([&] {
    Cuda();
    Client k = d.Connect();
    CreateOptions o;
    o.places = {gpu};
    auto sealed = k.Put(std::vector<std::byte>(8 << 20), o);
    auto draft = k.Create({16 << 20}, o);
    auto held = sealed.ok() ? k.Get(*sealed) : sealed.status();
    if (sealed.ok() && !k.Delete(*sealed).ok()) held = Status::Unavailable("delete failed");
    ready.Send(draft.ok() && held.ok() ? "ready" : "failed");
    ::pause();
    return 0;
  });
  REQUIRE(ready.Receive() == "ready");
  auto used = [&] { return c.GetStatus()->device_pools.at(0).used; };
  CHECK(used() >= (24u << 20));
  ::kill(victim, SIGKILL);
  Wait(victim);
  CHECK(WaitFor([&] { return used() == 0; }));
  // The counters are the daemon's word; the GPU's free memory is the driver's: all that is
  // gone is what the daemon still keeps in chunks (a spare), give or take a context's worth.
  uint64_t free_after = FreeOn(0);
  uint64_t kept = c.GetStatus()->device_pools.at(0).reserved;
  std::printf("free before %llu, after %llu, kept in chunks %llu\n",
              static_cast<unsigned long long>(free_before),
              static_cast<unsigned long long>(free_after), static_cast<unsigned long long>(kept));
  CHECK(free_after + kept + (64ull << 20) >= free_before);
}

TEST_CASE("cuda: a deleted range is not reused while a consumer holds it", "[cuda]") {
  NeedGpu();
  Daemon d = CudaDaemon();
  Place gpu = FirstGpu(d);
  int rc = RunChild([&] {
    const CudaDriver& cu = Cuda();
    Client producer = d.Connect();
    Client reader = d.Connect();
    CreateOptions o;
    o.places = {gpu};
    auto a = producer.Create({1 << 20}, o);
    cu.MemsetD32(Ptr(a->frame(0)), 0xA, (1 << 20) / 4);
    Guid ga = a->guid();
    if (!a->Seal().ok()) return 1;
    auto view = reader.Get(ga);
    uint64_t offset = producer.Stat(ga)->frames[0].offset;
    if (!producer.Delete(ga).ok()) return 2;
    auto b = producer.Create({1 << 20}, o);
    if (!b.ok()) return 3;
    cu.MemsetD32(Ptr(b->frame(0)), 0xB, (1 << 20) / 4);
    if (!b->Seal().ok()) return 4;
    if (producer.Stat(b->guid())->frames[0].offset == offset) return 5;
    return AllWords(cu, view->frame(0), 0xA) ? 0 : 6;
  });
  CHECK(rc == 0);
}

// A thread that never touched CUDA has no current context; the client makes the device's own
// current around each call that needs one. Seal with the default stream must wait for the
// frame's GPU even when the sealing thread has no context (or another GPU's) current.
TEST_CASE("cuda: a put and a seal from a fresh thread with no context", "[cuda]") {
  NeedGpu();
  Daemon d = CudaDaemon();
  Place gpu = FirstGpu(d);
  int rc = RunChild([&] {
    Client c = d.Connect();
    CreateOptions o;
    o.places = {gpu};
    auto bytes = std::vector<std::byte>(8 << 20, std::byte{0x5A});
    Result<Guid> put = Status::Unavailable("not run");
    std::thread([&] { put = c.Put(bytes, o); }).join();  // cuMemcpyHtoD without a context
    if (!put.ok()) {
      std::printf("put: %s\n", put.status().ToString().c_str());
      return 1;
    }
    // The writes are queued in this thread, on the legacy default stream of the GPU's primary
    // context; the seal comes from a thread with no context at all.
    const CudaDriver& cu = Cuda();
    auto draft = c.Create({64 << 20}, o);
    if (!draft.ok()) return 2;
    Hold(cu, nullptr);  // the memset runs 300 ms from now: a seal that waits takes as long
    if (cu.MemsetD32(Ptr(draft->frame(0)), 0xC0FFEE, (64 << 20) / 4) != CUDA_SUCCESS) return 3;
    Guid g = draft->guid();
    Status sealed = Status::Unavailable("not run");
    auto start = std::chrono::steady_clock::now();
    std::thread([&] { sealed = draft->Seal(); }).join();
    auto waited = std::chrono::steady_clock::now() - start;
    if (!sealed.ok()) {
      std::printf("seal: %s\n", sealed.ToString().c_str());
      return 4;
    }
    // The reads below go through the same legacy stream, which would wait for the memset by
    // itself: only the time the seal took shows that it waited.
    if (waited < std::chrono::milliseconds(250)) {
      std::printf("the seal returned in %lld ms, before the writes it must wait for\n",
                  static_cast<long long>(
                      std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()));
      return 9;
    }
    Client reader = d.Connect();
    auto a = reader.Get(*put);
    auto b = reader.Get(g);
    if (!a.ok() || !b.ok()) return 5;
    if (!AllWords(cu, a->frame(0), 0x5A5A5A5A)) return 6;
    if (!AllWords(cu, b->frame(0), 0xC0FFEE)) return 7;
    return b->Populate().ok() ? 0 : 8;  // device frames are not host memory: skipped
  });
  CHECK(rc == 0);
}

TEST_CASE("cuda: with two GPUs and a subset configured, memory comes from the GPU named",
          "[cuda]") {
  NeedGpu(2);
  std::string second = UuidOf(1);
  Daemon d({"--capacity", "256MiB", "--device-chunk-size", "1GiB", "--devices", second});
  auto pools = d.Connect().DevicePools();
  REQUIRE(pools.ok());
  REQUIRE(pools->size() == 1);
  CHECK((*pools)[0].uuid == second);
  uint64_t free0 = FreeOn(0), free1 = FreeOn(1);
  // The chunk is mapped by a child that holds it: mapping it here would initialise CUDA in this
  // process, and the children forked after (FreeOn) would find it unusable.
  Channel ready;
  pid_t holder = Spawn([&] {
    Client c = d.Connect();
    CreateOptions o;
    o.places = {Place::Gpu(second)};
    auto draft = c.Create({512 << 20}, o);  // one chunk of 1 GiB
    ready.Send(draft.ok() ? "ready" : draft.status().ToString());
    ::pause();
    return 0;
  });
  REQUIRE(ready.Receive() == "ready");
  uint64_t now0 = FreeOn(0), now1 = FreeOn(1);
  ::kill(holder, SIGKILL);
  Wait(holder);
  std::printf("free before/after: GPU 0 %llu/%llu, GPU 1 %llu/%llu\n",
              static_cast<unsigned long long>(free0), static_cast<unsigned long long>(now0),
              static_cast<unsigned long long>(free1), static_cast<unsigned long long>(now1));
  CHECK(free1 - now1 >= (1ull << 30));
  CHECK(now0 + (256ull << 20) > free0);  // GPU 0 lost no chunk (contexts cost a little)
}

// A consumer whose own work is on another GPU reads a frame through the copy engines (peer
// access where the GPUs have it).
TEST_CASE("cuda: a consumer on another GPU than the producer", "[cuda]") {
  NeedGpu(2);
  Daemon d({"--capacity", "256MiB", "--device-chunk-size", "256MiB", "--devices", UuidOf(0)});
  Place gpu0 = FirstGpu(d);
  Channel guid;
  int producer = RunChild([&] {
    const CudaDriver& cu = Cuda(0);
    Client c = d.Connect();
    auto draft = c.Create({16 << 20}, CreateOptions{.places = {gpu0}});
    if (!draft.ok() || cu.MemsetD32(Ptr(draft->frame(0)), 0xAB, (16 << 20) / 4) != CUDA_SUCCESS) {
      return 1;
    }
    guid.Send(draft->guid().ToString());
    return draft->Seal().ok() ? 0 : 2;
  });
  REQUIRE(producer == 0);
  Guid g = *Guid::Parse(guid.Receive());
  int consumer = RunChild([&] {
    const CudaDriver& cu = Cuda(1);  // this process works on GPU 1
    Client c = d.Connect();
    auto obj = c.Get(g);
    if (!obj.ok()) {
      std::printf("get: %s\n", obj.status().ToString().c_str());
      return 1;
    }
    CUdeviceptr local = 0;
    if (cu.MemAlloc(&local, 16 << 20) != CUDA_SUCCESS) return 2;
    CUresult r = cu.MemcpyDtoD(local, Ptr(obj->frame(0)), 16 << 20);
    if (r != CUDA_SUCCESS) {
      std::printf("%s\n", cu.Error(r, "cuMemcpyDtoD (GPU 0 frame to GPU 1)").c_str());
      return 3;
    }
    std::vector<uint32_t> host((16 << 20) / 4);
    if (cu.MemcpyDtoH(host.data(), local, 16 << 20) != CUDA_SUCCESS) return 4;
    cu.MemFree(local);
    return std::all_of(host.begin(), host.end(), [](uint32_t w) { return w == 0xAB; }) ? 0 : 5;
  });
  CHECK(consumer == 0);
}

// cuMemUnmap does not wait for queued work: a consumer that drops its handle on a frame while
// its kernels (here a copy held back 300 ms) still read it must not have the range unmapped
// under them. The object is deleted and its chunk (of its own) retired, so today's client
// unmaps it at the reader's next request.
TEST_CASE("cuda: a frame is not unmapped under work still reading it", "[cuda]") {
  NeedGpu();
  Daemon d = CudaDaemon();
  Place gpu = FirstGpu(d);
  int rc = RunChild([&] {
    const CudaDriver& cu = Cuda();
    Client producer = d.Connect();
    Client reader = d.Connect();
    constexpr uint64_t kSize = 200 << 20;  // more than half a chunk: a chunk of its own
    CreateOptions o;
    o.places = {gpu};
    auto draft = producer.Create({kSize}, o);
    if (!draft.ok() || cu.MemsetD32(Ptr(draft->frame(0)), 0x3C, kSize / 4) != CUDA_SUCCESS) {
      return 1;
    }
    Guid g = draft->guid();
    if (!draft->Seal().ok()) return 2;
    CUdeviceptr local = 0;
    CUstream stream = nullptr;
    if (cu.MemAlloc(&local, kSize) != CUDA_SUCCESS || cu.StreamCreate(&stream, 1) != CUDA_SUCCESS) {
      return 3;
    }
    {
      auto obj = reader.Get(g);
      if (!obj.ok()) return 4;
      Hold(cu, stream);
      if (cu.MemcpyDtoDAsync(local, Ptr(obj->frame(0)), kSize, stream) != CUDA_SUCCESS) return 5;
    }  // the reader lets go while the copy is queued
    if (!producer.Delete(g).ok()) return 6;
    (void)reader.GetStatus();  // the retired chunk is let go of here
    if (CUresult r = cu.StreamSynchronize(stream); r != CUDA_SUCCESS) {
      std::printf("%s\n", cu.Error(r, "the copy from the dropped frame").c_str());
      return 7;
    }
    return AllWords(cu, {reinterpret_cast<const std::byte*>(local), kSize}, 0x3C) ? 0 : 8;
  });
  CHECK(rc == 0);
}

// VMM mappings ignore peer access: unless each GPU is granted access, a worker whose kernels
// run on another GPU cannot read a frame it got. Every GPU that can reach the pool's is granted.
TEST_CASE("cuda: every GPU that can reach a frame's GPU is granted access to it", "[cuda]") {
  NeedGpu(2);
  Daemon d({"--capacity", "256MiB", "--device-chunk-size", "256MiB", "--devices", UuidOf(0)});
  Place gpu0 = FirstGpu(d);
  int rc = RunChild([&] {
    const CudaDriver& cu = Cuda(1);
    CUdevice dev0, dev1;
    int can = 0;
    cu.DeviceGet(&dev0, 0);
    cu.DeviceGet(&dev1, 1);
    if (cu.DeviceCanAccessPeer(&can, dev1, dev0) != CUDA_SUCCESS || !can) {
      std::printf("GPU 1 cannot reach GPU 0's memory: nothing to grant\n");
      return 77;
    }
    Client c = d.Connect();
    CreateOptions o;
    o.places = {gpu0};
    auto guid = c.Put(std::vector<std::byte>(1 << 20), o);
    auto obj = guid.ok() ? c.Get(*guid) : guid.status();
    if (!obj.ok()) return 1;
    CUmemLocation peer{};
    peer.type = CU_MEM_LOCATION_TYPE_DEVICE;
    peer.id = 1;
    unsigned long long flags = 0;
    if (CUresult r = cu.MemGetAccess(&flags, &peer, Ptr(obj->frame(0))); r != CUDA_SUCCESS) {
      std::printf("%s\n", cu.Error(r, "cuMemGetAccess").c_str());
      return 2;
    }
    return flags == CU_MEM_ACCESS_FLAGS_PROT_READ ? 0 : 3;
  });
  if (rc == 77) Skip("GPU 1 cannot reach GPU 0's memory (no peer access)");
  CHECK(rc == 0);
}

// Pinning registers host memory in a context: made on GPU 0 in a process that works on GPU 1, it
// would cost GPU 0 hundreds of MiB in every such process.
TEST_CASE("cuda: pinning makes no context on a GPU the process does not use", "[cuda]") {
  NeedGpu(2);
  Daemon d = CudaDaemon();
  int rc = RunChild([&] {
    const CudaDriver& cu = Cuda(1);  // this process works on GPU 1
    Client c = d.Connect();
    if (!c.PinHostMemory().ok()) return 1;
    auto id = c.Put(Pattern(1 << 20, 3));
    if (!id.ok() || !c.Get(*id).ok()) return 2;  // a host segment mapped, and pinned
    CUdevice gpu0;
    unsigned flags = 0;
    int active = 0;
    if (cu.DeviceGet(&gpu0, 0) != CUDA_SUCCESS ||
        cu.DevicePrimaryCtxGetState(gpu0, &flags, &active) != CUDA_SUCCESS) {
      return 3;
    }
    if (active != 0) {
      std::printf("GPU 0's primary context is active in a process that works on GPU 1\n");
      return 4;
    }
    return 0;
  });
  CHECK(rc == 0);
}

// What keeping device memory across a restart of depotd would rest on (docs/design.md, "Memory
// kept across restarts": device chunks are not kept yet): a chunk's exported descriptor, held by
// another process as systemd's descriptor store would hold it, keeps the chunk's memory and bytes
// after the process that made it was killed while still mapping it, a process started later
// imports it from that descriptor, and the memory goes back to the GPU once the descriptor closes.
TEST_CASE("cuda: a chunk's exported descriptor keeps its bytes after its maker is killed",
          "[cuda]") {
  NeedGpu();
  constexpr uint32_t kWord = 0x5eed0001;
  uint64_t free_before = FreeOn(0);
  int pair[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == 0);
  UniqueFd ours(pair[0]), theirs(pair[1]);
  Channel made;
  pid_t maker = Spawn([&] {
    const CudaDriver& cu = Cuda();
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t granularity = 0;
    CUmemGenericAllocationHandle handle;
    CUdeviceptr ptr = 0;
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    int fd = -1;
    if (cu.MemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) !=
        CUDA_SUCCESS) {
      made.Send("failed: cuMemGetAllocationGranularity");
      return 1;
    }
    uint64_t size = (uint64_t{64} << 20) / granularity * granularity;
    if (cu.MemCreate(&handle, size, &prop, 0) != CUDA_SUCCESS ||
        cu.MemAddressReserve(&ptr, size, granularity, 0, 0) != CUDA_SUCCESS ||
        cu.MemMap(ptr, size, 0, handle, 0) != CUDA_SUCCESS ||
        cu.MemSetAccess(ptr, size, &access, 1) != CUDA_SUCCESS ||
        cu.MemsetD32(ptr, kWord, size / 4) != CUDA_SUCCESS || cu.CtxSynchronize() != CUDA_SUCCESS ||
        cu.MemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) !=
            CUDA_SUCCESS) {
      made.Send("failed: making, filling or exporting the chunk");
      return 2;
    }
    const uint8_t byte = 1;
    if (proto::SendWithFds(theirs.get(), {&byte, 1}, std::span(&fd, 1), 0) != 1) {
      made.Send("failed: sending its descriptor");
      return 3;
    }
    made.Send(std::to_string(size) + " " + std::to_string(granularity));
    ::pause();  // killed while it maps the chunk and holds its handle, as a crashed depotd
    return 0;
  });
  std::string said = made.Receive();
  INFO("the maker said: " << said);
  REQUIRE(said.find("failed") == std::string::npos);
  uint64_t size = 0, granularity = 0;
  REQUIRE(std::sscanf(said.c_str(), "%" SCNu64 " %" SCNu64, &size, &granularity) == 2);
  std::vector<UniqueFd> fds;
  uint8_t byte = 0;
  REQUIRE(proto::RecvWithFds(ours.get(), {&byte, 1}, fds, 0) == 1);
  REQUIRE(fds.size() == 1);
  ::kill(maker, SIGKILL);
  Wait(maker);
  // Started after the maker died: it has only the descriptor this process kept.
  Channel read;
  int reader = RunChild([&] {
    const CudaDriver& cu = Cuda();
    CUmemGenericAllocationHandle handle;
    CUdeviceptr ptr = 0;
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CUresult r = cu.MemImportFromShareableHandle(
        &handle, reinterpret_cast<void*>(static_cast<intptr_t>(fds[0].get())),
        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS) {
      read.Send(cu.Error(r, "cuMemImportFromShareableHandle"));
      return 1;
    }
    if (cu.MemAddressReserve(&ptr, size, granularity, 0, 0) != CUDA_SUCCESS ||
        cu.MemMap(ptr, size, 0, handle, 0) != CUDA_SUCCESS ||
        cu.MemSetAccess(ptr, size, &access, 1) != CUDA_SUCCESS) {
      read.Send("imported, but it could not be mapped");
      return 2;
    }
    bool same = AllWords(
        cu, std::span(reinterpret_cast<const std::byte*>(static_cast<uintptr_t>(ptr)), size),
        kWord);
    read.Send(same ? "the same words" : "other words");
    cu.MemUnmap(ptr, size);
    cu.MemAddressFree(ptr, size);
    cu.MemRelease(handle);
    return same ? 0 : 3;
  });
  std::string outcome = read.Receive();
  INFO("the reader found: " << outcome);
  CHECK(reader == 0);
  uint64_t free_held = FreeOn(0);
  std::printf("free before %llu, with the kept descriptor %llu (chunk %llu)\n",
              static_cast<unsigned long long>(free_before),
              static_cast<unsigned long long>(free_held), static_cast<unsigned long long>(size));
  CHECK(free_held + size / 2 <= free_before);  // the chunk still takes its memory
  fds.clear();
  CHECK(WaitFor([&] { return FreeOn(0) + (size / 2) >= free_before; }));
}

// The whole path on a GPU: a device object sealed under a depotd that is then killed with SIGKILL
// is served by the next depotd (the descriptor store played by the test, as in kept_memory_test)
// from the chunk the first one made, on the same GPU, with the same words.
TEST_CASE("cuda: a device object is served again after a kill -9, from the kept chunk", "[cuda]") {
  NeedGpu();
  std::string dir = TempDir();
  FdStoreStandIn store(dir + "/notify");
  const Place gpu = Place::Gpu(UuidOf(0));
  const std::vector<std::string> args{"--device-chunk-size", "256MiB"};
  constexpr uint32_t kWord = 0xCAFE0001;
  constexpr uint64_t kSize = 8 << 20;
  Channel made;
  {
    Service first(dir, store, args);
    int producer = RunChild([&] {
      const CudaDriver& cu = Cuda();
      Client c = first.Connect();
      CreateOptions o;
      o.places = {gpu};
      auto draft = c.Create({kSize}, o);
      if (!draft.ok()) return 1;
      if (cu.MemsetD32(Ptr(draft->frame(0)), kWord, kSize / 4) != CUDA_SUCCESS) return 2;
      if (!draft->Seal().ok()) return 3;
      made.Send(draft->guid().ToString());
      return 0;
    });
    REQUIRE(producer == 0);
    store.Drain(1s);
    CHECK(store.Count("depot.dev.") >= 1);
    first.Kill();
  }
  Guid guid = *Guid::Parse(made.Receive());
  store.Drain();
  Service second(dir, store, args);
  int consumer = RunChild([&] {
    const CudaDriver& cu = Cuda();
    Client c = second.Connect();
    auto obj = c.Get(guid);
    if (!obj.ok()) return 1;
    if (obj->place(0) != gpu || obj->frame(0).size() != kSize) return 2;
    return AllWords(cu, obj->frame(0), kWord) ? 0 : 3;
  });
  CHECK(consumer == 0);
  Client c = second.Connect();
  auto st = StatusOf(c);
  INFO(second.Log());
  CHECK(st.adopted_objects == 1);
  CHECK(st.adoption_dropped == 0);
  std::filesystem::remove_all(dir);
}
