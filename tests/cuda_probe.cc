// cuda_probe: facts about a machine's CUDA driver that depot depends on and no test can fake,
// for the GPU kit (scripts/gpu-kit) to record on a GPU machine. It talks to libcuda directly
// (dlopen + dlsym), not through common/cuda_driver, so that what it sees is the driver's own
// behaviour. Each command prints what it found and exits 0 (as expected), 1 (not as expected)
// or 77 (nothing to probe: no driver, no GPU, or a kernel without the feature).
//
//   cuda_probe info          driver version; per GPU its UUID, memory, compute mode and the
//                            attributes device pools need; which GPUs reach which (peer access)
//   cuda_probe cuinit-retry  cuInit made to fail (every device hidden), then called again with
//                            them visible in the same process: does the second call succeed?
//                            (depot's loader retries a failed load, for late kernel modules)
//   cuda_probe mdwe          the daemon's calls (cuInit, a chunk made and exported as an fd)
//                            with PR_SET_MDWE set, the kernel's MemoryDenyWriteExecute=yes
//   cuda_probe load          the same calls without it (run under systemd-run -p
//                            MemoryDenyWriteExecute=yes by the kit)
#include <cuda.h>
#include <dlfcn.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

void* lib = nullptr;

template <typename F>
F Sym(const char* name) {
  void* p = ::dlsym(lib, name);
  if (p == nullptr) {
    std::printf("libcuda.so.1 has no %s\n", name);
    std::exit(1);
  }
  return reinterpret_cast<F>(p);
}

std::string Error(CUresult r) {
  const char* text = nullptr;
  auto get =
      reinterpret_cast<CUresult (*)(CUresult, const char**)>(::dlsym(lib, "cuGetErrorString"));
  if (get == nullptr || get(r, &text) != CUDA_SUCCESS || text == nullptr) text = "?";
  return std::to_string(static_cast<int>(r)) + " (" + text + ")";
}

int Load() {
  lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::printf("no CUDA driver: %s\n", ::dlerror());
    return 77;
  }
  return 0;
}

int Info() {
  auto init = Sym<CUresult (*)(unsigned)>("cuInit");
  if (CUresult r = init(0); r != CUDA_SUCCESS) {
    std::printf("cuInit: %s\n", Error(r).c_str());
    return 77;
  }
  int version = 0, count = 0;
  Sym<CUresult (*)(int*)>("cuDriverGetVersion")(&version);
  Sym<CUresult (*)(int*)>("cuDeviceGetCount")(&count);
  std::printf("driver API version %d, %d GPU(s)\n", version, count);
  auto get = Sym<CUresult (*)(CUdevice*, int)>("cuDeviceGet");
  auto name = Sym<CUresult (*)(char*, int, CUdevice)>("cuDeviceGetName");
  auto uuid = Sym<CUresult (*)(CUuuid*, CUdevice)>("cuDeviceGetUuid_v2");
  auto total = Sym<CUresult (*)(size_t*, CUdevice)>("cuDeviceTotalMem_v2");
  auto attr = Sym<CUresult (*)(int*, CUdevice_attribute, CUdevice)>("cuDeviceGetAttribute");
  auto peer = Sym<CUresult (*)(int*, CUdevice, CUdevice)>("cuDeviceCanAccessPeer");
  static const char* kModes[] = {"default", "exclusive-thread", "prohibited", "exclusive-process"};
  for (int i = 0; i < count; ++i) {
    CUdevice dev;
    get(&dev, i);
    char n[256] = {};
    CUuuid id{};
    size_t bytes = 0;
    name(n, sizeof n - 1, dev);
    uuid(&id, dev);
    total(&bytes, dev);
    int mode = 0, vmm = 0, fd = 0, ro = 0;
    attr(&mode, CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, dev);
    attr(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
    attr(&fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev);
    attr(&ro, CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, dev);
    const auto* b = reinterpret_cast<const unsigned char*>(id.bytes);
    std::printf(
        "  %d: %s GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x, "
        "%zu MiB, compute mode %s, VMM %d, POSIX fd handles %d, read-only host register %d\n",
        i, n, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
        b[13], b[14], b[15], bytes >> 20, mode >= 0 && mode < 4 ? kModes[mode] : "?", vmm, fd, ro);
    if (mode == CU_COMPUTEMODE_EXCLUSIVE_PROCESS || mode == CU_COMPUTEMODE_PROHIBITED) {
      std::printf(
          "     (this compute mode lets only one process, or none, use the GPU: the "
          "daemon and its clients cannot share it)\n");
    }
    for (int j = 0; j < count; ++j) {
      CUdevice other;
      int can = 0;
      if (j == i || get(&other, j) != CUDA_SUCCESS) continue;
      peer(&can, dev, other);
      std::printf("     reaches GPU %d's memory (peer access): %s\n", j, can ? "yes" : "no");
    }
  }
  return count > 0 ? 0 : 77;
}

int CuInitRetry() {
  // Hidden before the first call: the driver reads CUDA_VISIBLE_DEVICES at cuInit.
  ::setenv("CUDA_VISIBLE_DEVICES", "-1", 1);
  if (Load() != 0) return 77;
  auto init = Sym<CUresult (*)(unsigned)>("cuInit");
  CUresult first = init(0);
  std::printf("cuInit with every device hidden: %s\n", Error(first).c_str());
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  CUresult second = init(0);
  int count = 0;
  if (second == CUDA_SUCCESS) Sym<CUresult (*)(int*)>("cuDeviceGetCount")(&count);
  std::printf("cuInit again, devices visible: %s, %d GPU(s)\n", Error(second).c_str(), count);
  if (first == CUDA_SUCCESS) {
    std::printf("the first call did not fail: nothing shown\n");
    return 77;
  }
  std::printf(second == CUDA_SUCCESS && count > 0
                  ? "a failed cuInit can be retried in one process\n"
                  : "a failed cuInit sticks: the process must restart to find GPUs\n");
  return 0;  // a fact either way, not a failure
}

// What depotd does with a device: initialise, make a chunk, export it as an fd.
int DaemonCalls() {
  auto init = Sym<CUresult (*)(unsigned)>("cuInit");
  if (CUresult r = init(0); r != CUDA_SUCCESS) {
    std::printf("cuInit: %s\n", Error(r).c_str());
    return 77;
  }
  CUdevice dev;
  Sym<CUresult (*)(CUdevice*, int)>("cuDeviceGet")(&dev, 0);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t granularity = 0;
  CUresult r =
      Sym<CUresult (*)(size_t*, const CUmemAllocationProp*, CUmemAllocationGranularity_flags)>(
          "cuMemGetAllocationGranularity")(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r != CUDA_SUCCESS) {
    std::printf("cuMemGetAllocationGranularity: %s\n", Error(r).c_str());
    return 1;
  }
  CUmemGenericAllocationHandle handle;
  r = Sym<CUresult (*)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                       unsigned long long)>("cuMemCreate")(&handle, granularity, &prop, 0);
  if (r != CUDA_SUCCESS) {
    std::printf("cuMemCreate: %s\n", Error(r).c_str());
    return 1;
  }
  int fd = -1;
  r = Sym<CUresult (*)(void*, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                       unsigned long long)>("cuMemExportToShareableHandle")(
      &fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  Sym<CUresult (*)(CUmemGenericAllocationHandle)>("cuMemRelease")(handle);
  if (r != CUDA_SUCCESS) {
    std::printf("cuMemExportToShareableHandle: %s\n", Error(r).c_str());
    return 1;
  }
  ::close(fd);
  std::printf("cuInit, cuMemCreate and cuMemExportToShareableHandle work\n");
  return 0;
}

int Mdwe() {
  constexpr int kSetMdwe = 65;         // PR_SET_MDWE (Linux 6.3)
  constexpr long kRefuseExecGain = 1;  // PR_MDWE_REFUSE_EXEC_GAIN
  if (::prctl(kSetMdwe, kRefuseExecGain, 0L, 0L, 0L) != 0) {
    std::printf("PR_SET_MDWE: %s (kernel older than 6.3?): not probed this way\n",
                std::strerror(errno));
    return 77;
  }
  std::printf("PR_SET_MDWE set (as MemoryDenyWriteExecute=yes)\n");
  if (Load() != 0) {
    // Missing is nothing to probe; present but refused is the answer.
    return ::access("/dev/nvidiactl", F_OK) == 0 ? 1 : 77;
  }
  return DaemonCalls();
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "info") return Load() != 0 ? 77 : Info();
  if (cmd == "cuinit-retry") return CuInitRetry();
  if (cmd == "mdwe") return Mdwe();
  if (cmd == "load") return Load() != 0 ? 77 : DaemonCalls();
  std::fprintf(stderr, "usage: cuda_probe info|cuinit-retry|mdwe|load\n");
  return 2;
}
