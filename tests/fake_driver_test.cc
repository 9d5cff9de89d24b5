// The client's CUDA calls (client/src/cuda_mapper) and the daemon's listing of GPUs against the
// stand-in driver (tests/fake_libcuda.cc, through $DEPOT_LIBCUDA), for the rules a test without
// a GPU can catch being broken: a mapping the driver does not unmap keeps its address range,
// pinning makes no context on a GPU the process does not use, a forked child uses none of its
// parent's driver, and a GPU in the exclusive-process compute mode is reported. Not GPU
// coverage: cuda_test is, on a machine with one.
#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>
#include <thread>

#include "client/src/cuda_mapper.h"
#include "common/cuda_driver.h"
#include "common/unique_fd.h"
#include "tests/daemon_fixture.h"

using namespace depot;
using namespace depot::test;

namespace {

// The stand-in driver, loaded as the client library loads it, and its test controls.
struct Fake {
  Fake() {
    ::setenv("DEPOT_LIBCUDA", FAKE_LIBCUDA_PATH, 1);
    auto loaded = LoadCudaDriver();
    REQUIRE(loaded.ok());
    cu = *loaded;
    void* lib = ::dlopen(FAKE_LIBCUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
    REQUIRE(lib != nullptr);
    log = reinterpret_cast<const char* (*)()>(::dlsym(lib, "fake_cuda_log"));
    fail_next = reinterpret_cast<void (*)(const char*, int)>(::dlsym(lib, "fake_cuda_fail_next"));
    REQUIRE(log != nullptr);
    REQUIRE(fail_next != nullptr);
  }
  // What the driver was asked since `from` (a length of an earlier Log()).
  std::string Since(size_t from) const { return std::string(log()).substr(from); }
  size_t Mark() const { return std::string(log()).size(); }

  const CudaDriver* cu = nullptr;
  const char* (*log)() = nullptr;
  void (*fail_next)(const char*, int) = nullptr;
};

UniqueFd Chunk(size_t size) {
  UniqueFd fd(::memfd_create("chunk", MFD_CLOEXEC));
  REQUIRE(fd.valid());
  REQUIRE(::ftruncate(fd.get(), static_cast<off_t>(size)) == 0);
  return fd;
}

constexpr size_t kChunk = 2 << 20;

// A chunk mapped read-only on GPU 0 through the stand-in driver.
struct MappedChunk {
  MappedChunk() {
    auto mapped = mapper.Map(fd.get(), kChunk, 0, false);
    REQUIRE(mapped.ok());
    base = *mapped;
  }
  Fake fake;
  internal::Pools pools;
  internal::CudaMapper mapper{pools};
  UniqueFd fd = Chunk(kChunk);
  void* base = nullptr;
};

}  // namespace

TEST_CASE("a device mapping the driver does not unmap keeps its address range, and says why",
          "[fake_driver]") {
  MappedChunk m;
  Fake& fake = m.fake;
  internal::CudaMapper& mapper = m.mapper;
  size_t mark = fake.Mark();
  fake.fail_next("cuMemUnmap", 1);
  Status st = mapper.Unmap(m.base, kChunk);
  CHECK(st.IsUnavailable());
  CHECK(st.message().find("cuMemUnmap") != std::string::npos);
  // Freed while still mapped, the range could be reserved again over live memory.
  CHECK(fake.Since(mark).find("cuMemAddressFree") == std::string::npos);
  CHECK(mapper.Unmap(m.base, kChunk).ok());
  CHECK(fake.Since(mark).find("cuMemAddressFree") != std::string::npos);
}

TEST_CASE("host memory is pinned in the context of the GPU the process works on", "[fake_driver]") {
  Fake fake;
  internal::Pools pools;
  internal::CudaMapper mapper(pools);
  void* first = ::mmap(nullptr, 1 << 20, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  void* second = ::mmap(nullptr, 1 << 20, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(first != MAP_FAILED);
  REQUIRE(second != MAP_FAILED);
  size_t mark = fake.Mark();
  // This thread works on GPU 1, as a worker does after cudaSetDevice(1).
  CUdevice dev;
  CUcontext ctx;
  REQUIRE(fake.cu->DeviceGet(&dev, 1) == CUDA_SUCCESS);
  REQUIRE(fake.cu->DevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS);
  REQUIRE(fake.cu->CtxPushCurrent(ctx) == CUDA_SUCCESS);
  auto pinned = mapper.Pin(first, 1 << 20, true);
  CUcontext popped;
  REQUIRE(fake.cu->CtxPopCurrent(&popped) == CUDA_SUCCESS);
  REQUIRE(pinned.ok());
  // Later segments are pinned by whichever thread maps them, often one with no context: the
  // same GPU's.
  Result<bool> later = Status::Unavailable("not run");
  std::thread([&] { later = mapper.Pin(second, 1 << 20, true); }).join();
  REQUIRE(later.ok());
  CHECK(mapper.Unpin(first).ok());
  std::string asked = fake.Since(mark);
  INFO(asked);
  CHECK(asked.find("cuMemHostRegister device=1\ncuMemHostRegister device=1\n") !=
        std::string::npos);
  CHECK(asked.find("cuMemHostUnregister device=1") != std::string::npos);
  // A context on GPU 0 costs that GPU hundreds of MiB in every process that pins.
  CHECK(asked.find("device=0") == std::string::npos);
}

TEST_CASE("a child forked after the driver was loaded uses none of it", "[fake_driver]") {
  MappedChunk m;
  Fake& fake = m.fake;
  internal::CudaMapper& mapper = m.mapper;
  int rc = RunChild([&] {
    size_t mark = fake.Mark();
    auto loaded = LoadCudaDriver();
    if (loaded.ok() || loaded.status().message().find("forked") == std::string::npos) return 1;
    if (mapper.Unmap(m.base, kChunk).ok()) return 2;  // the parent's mapping, left as it is
    if (!fake.Since(mark).empty()) return 3;          // and the driver not called at all
    return 0;
  });
  CHECK(rc == 0);
  CHECK(mapper.Unmap(m.base, kChunk).ok());
}

TEST_CASE("a GPU in the exclusive-process compute mode is pooled and reported", "[fake_driver]") {
  ::setenv("DEPOT_LIBCUDA", FAKE_LIBCUDA_PATH, 1);
  ::setenv("FAKE_CUDA_COMPUTE_MODE", "3", 1);  // CU_COMPUTEMODE_EXCLUSIVE_PROCESS
  Daemon d;
  ::unsetenv("FAKE_CUDA_COMPUTE_MODE");
  std::string log = d.Log();
  INFO(log);
  CHECK(log.find("device pools: 2 GPUs (cuda)") != std::string::npos);
  CHECK(log.find("GPU-00000000-0000-4000-8000-000000000001 is in the exclusive-process compute "
                 "mode") != std::string::npos);
  CHECK(log.find("GPU-00000000-0000-4000-8000-000000000002 Fake GPU 1, capacity 920.0 MiB, in the "
                 "exclusive-process compute mode") != std::string::npos);
}
