#include "common/cuda_driver.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string_view>

#include "common/fork_generation.h"

namespace depot {
namespace {

constexpr uint64_t kNotLoaded = ~uint64_t{0};

// The toolkit version whose entry points (and PFN_* typedefs) this file asks for.
constexpr int kApiVersion = 12000;

Result<CudaDriver> Load() {
  const char* env = std::getenv("DEPOT_LIBCUDA");
  std::string path = env != nullptr && *env != '\0' ? env : "libcuda.so.1";
  void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr)
    return Status::Unavailable(fmt::format("cannot load {}: {}", path, ::dlerror()));
  // The handle stays open for the life of the process: the driver cannot be unloaded safely.
  auto get_proc =
      reinterpret_cast<PFN_cuGetProcAddress_v12000>(::dlsym(lib, "cuGetProcAddress_v2"));
  auto init = reinterpret_cast<PFN_cuInit_v2000>(::dlsym(lib, "cuInit"));
  if (get_proc == nullptr || init == nullptr) {
    return Status::Unavailable(
        fmt::format("{} has no cuGetProcAddress_v2 (a driver for CUDA 12 or "
                    "newer is needed)",
                    path));
  }
  if (CUresult r = init(0); r != CUDA_SUCCESS) {
    return Status::Unavailable(
        fmt::format("cuInit failed with error {} (no GPU, or the driver "
                    "and the kernel module disagree)",
                    static_cast<int>(r)));
  }
  CudaDriver d{};
  std::string missing;
  auto bind = [&](auto& fn, const char* name) {
    void* p = nullptr;
    CUdriverProcAddressQueryResult found{};
    if (get_proc(name, &p, kApiVersion, CU_GET_PROC_ADDRESS_DEFAULT, &found) != CUDA_SUCCESS ||
        p == nullptr) {
      missing += fmt::format("{}{}", missing.empty() ? "" : ", ", name);
      return;
    }
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  bind(d.GetErrorString, "cuGetErrorString");
  bind(d.DriverGetVersion, "cuDriverGetVersion");
  bind(d.DeviceGetCount, "cuDeviceGetCount");
  bind(d.DeviceGet, "cuDeviceGet");
  bind(d.DeviceGetName, "cuDeviceGetName");
  bind(d.DeviceGetUuid, "cuDeviceGetUuid");
  bind(d.DeviceTotalMem, "cuDeviceTotalMem");
  bind(d.DeviceGetAttribute, "cuDeviceGetAttribute");
  bind(d.DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  bind(d.DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease");
  bind(d.CtxSetCurrent, "cuCtxSetCurrent");
  bind(d.CtxPushCurrent, "cuCtxPushCurrent");
  bind(d.CtxPopCurrent, "cuCtxPopCurrent");
  bind(d.CtxGetCurrent, "cuCtxGetCurrent");
  bind(d.CtxGetDevice, "cuCtxGetDevice");
  bind(d.StreamGetCtx, "cuStreamGetCtx");
  bind(d.MemGetAllocationGranularity, "cuMemGetAllocationGranularity");
  bind(d.MemCreate, "cuMemCreate");
  bind(d.MemRelease, "cuMemRelease");
  bind(d.MemExportToShareableHandle, "cuMemExportToShareableHandle");
  bind(d.MemImportFromShareableHandle, "cuMemImportFromShareableHandle");
  bind(d.MemAddressReserve, "cuMemAddressReserve");
  bind(d.MemAddressFree, "cuMemAddressFree");
  bind(d.MemMap, "cuMemMap");
  bind(d.MemUnmap, "cuMemUnmap");
  bind(d.MemSetAccess, "cuMemSetAccess");
  bind(d.DeviceCanAccessPeer, "cuDeviceCanAccessPeer");
  bind(d.StreamSynchronize, "cuStreamSynchronize");
  bind(d.MemHostRegister, "cuMemHostRegister");
  bind(d.MemHostUnregister, "cuMemHostUnregister");
  bind(d.MemcpyHtoD, "cuMemcpyHtoD");
  bind(d.MemcpyDtoH, "cuMemcpyDtoH");
  bind(d.MemcpyDtoD, "cuMemcpyDtoD");
  bind(d.MemsetD32, "cuMemsetD32");
  bind(d.MemAlloc, "cuMemAlloc");
  bind(d.MemFree, "cuMemFree");
  bind(d.CtxSynchronize, "cuCtxSynchronize");
  bind(d.MemGetInfo, "cuMemGetInfo");
  bind(d.MemGetAccess, "cuMemGetAccess");
  bind(d.LaunchHostFunc, "cuLaunchHostFunc");
  bind(d.StreamCreate, "cuStreamCreate");
  bind(d.StreamDestroy, "cuStreamDestroy");
  bind(d.MemcpyDtoDAsync, "cuMemcpyDtoDAsync");
  bind(d.DevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState");
  if (!missing.empty()) {
    return Status::Unavailable(fmt::format("{} lacks {}", path, missing));
  }
  d.DriverGetVersion(&d.driver_version);
  return d;
}

}  // namespace

std::string CudaDriver::Error(CUresult r, const char* call) const {
  const char* text = nullptr;
  if (GetErrorString == nullptr || GetErrorString(r, &text) != CUDA_SUCCESS) text = "unknown error";
  return fmt::format("{}: error {} ({})", call, static_cast<int>(r), text);
}

Result<const CudaDriver*> LoadCudaDriver() {
  // Loaded once, and never unloaded: callers keep the pointer. Until it loads, each call tries.
  static std::mutex mu;
  static std::optional<CudaDriver> driver;
  // The generation that loaded it, read before the lock: in a child forked since, the lock may
  // be held by a thread of the parent's, and the driver is not the child's to use.
  static std::atomic<uint64_t> loaded_in{kNotLoaded};
  if (uint64_t in = loaded_in.load(std::memory_order_acquire);
      in != kNotLoaded && in != ForkGeneration()) {
    return Status::Unavailable(
        "CUDA was initialised in this process's parent before it forked, and CUDA does not "
        "work in such a child: start it with spawn (multiprocessing's 'spawn' or "
        "'forkserver') or exec, or fork before the first use of a GPU");
  }
  std::lock_guard lk(mu);
  if (!driver) {
    auto loaded = Load();
    if (!loaded.ok()) return loaded.status();
    driver = *loaded;
    loaded_in.store(ForkGeneration(), std::memory_order_release);
  }
  return &*driver;
}

std::string FormatGpuUuid(const CUuuid& uuid, bool mig) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  return fmt::format(
      "{}-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}"
      "{:02x}{:02x}",
      mig ? "MIG" : "GPU", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
      b[12], b[13], b[14], b[15]);
}

Result<std::string> DeviceUuid(const CudaDriver& cu, CUdevice dev) {
  CUuuid uuid;
  if (CUresult r = cu.DeviceGetUuid(&uuid, dev); r != CUDA_SUCCESS) {
    return Status::Unavailable(cu.Error(r, "cuDeviceGetUuid"));
  }
  char name[256] = {};
  if (CUresult r = cu.DeviceGetName(name, sizeof name - 1, dev); r != CUDA_SUCCESS) {
    return Status::Unavailable(cu.Error(r, "cuDeviceGetName"));
  }
  return FormatGpuUuid(uuid, std::string_view(name).find(" MIG ") != std::string_view::npos);
}

}  // namespace depot
