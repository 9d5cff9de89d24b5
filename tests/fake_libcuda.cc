// A stand-in for libcuda.so.1, for tests on machines without a GPU: loaded by the client
// library and the Python package in place of the driver ($DEPOT_LIBCUDA), it shows two GPUs whose
// UUIDs are those of the memfd stand-in daemon's pools (tests/memfd_backend.cc), and whose
// "device memory" is host memory. Not GPU coverage: it models only the rules of the driver that
// depot's device path must follow, the ones a test here can catch being broken:
//  - a call without a context current in the calling thread fails with
//    CUDA_ERROR_INVALID_CONTEXT, as the real driver does in a thread where nothing made one
//    current;
//  - cuMemcpy returns before its bytes move (the real one does for device-to-device copies):
//    they move when the context's legacy stream is synchronized;
//  - a stream's queued writes (fake_cuda_defer_fill) happen when the stream is synchronized, and
//    a stream can be made to fail (fake_cuda_fail_stream), so an ignored result shows.
// Pointer ranges registered with fake_cuda_register answer cuPointerGetAttribute's device ordinal.
// The virtual memory calls map a chunk's fd (a memfd) into reserved host address space, and
// fake_cuda_fail_next makes the next call of a name fail, so that a result the caller ignores
// shows. The compute mode the devices report is $FAKE_CUDA_COMPUTE_MODE (default 0).
//
// The C++ loader (common/cuda_driver.cc) looks entry points up with cuGetProcAddress_v2; every
// name this file does not model answers CUDA_ERROR_NOT_SUPPORTED when called.
#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace {

using CUresult = int;
constexpr CUresult kSuccess = 0;
constexpr CUresult kInvalidValue = 1;
constexpr CUresult kInvalidDevice = 101;
constexpr CUresult kInvalidContext = 201;
constexpr CUresult kNotSupported = 801;
constexpr int kGpus = 2;
constexpr int kPointerAttributeDeviceOrdinal = 9;

struct Context {
  int device;
  std::vector<std::function<void()>> legacy;  // work queued on its legacy default stream
};
struct Stream {
  Context* context;
  std::vector<std::function<void()>> queued;
  CUresult error = kSuccess;
};
struct Range {
  uintptr_t base;
  size_t size;
  int ordinal;
};

std::mutex mu;
Context primary[kGpus] = {{0, {}}, {1, {}}};
std::string fail_name;  // fake_cuda_fail_next
CUresult fail_code = kSuccess;
std::vector<Range> ranges;
std::string log;
thread_local std::vector<Context*> current;

void Record(const std::string& line) {
  std::lock_guard lk(mu);
  log += line + "\n";
}

// Whether the call `name` is to fail now (fake_cuda_fail_next), with what.
CUresult Failing(const char* name) {
  std::lock_guard lk(mu);
  if (fail_name != name) return kSuccess;
  fail_name.clear();
  return fail_code;
}

void Run(std::vector<std::function<void()>>& work) {
  for (auto& w : work) w();
  work.clear();
}

// The legacy (0), legacy (1) and per-thread (2) default streams: the current context's.
bool IsDefault(void* stream) { return reinterpret_cast<uintptr_t>(stream) <= 2; }

}  // namespace

extern "C" {

CUresult cuInit(unsigned) { return kSuccess; }
CUresult cuDriverGetVersion(int* v) {
  *v = 13000;
  return kSuccess;
}
CUresult cuGetErrorString(CUresult r, const char** text) {
  *text = r == kInvalidContext ? "invalid device context" : "fake driver error";
  return kSuccess;
}
CUresult cuDeviceGetCount(int* n) {
  *n = kGpus;
  return kSuccess;
}
CUresult cuDeviceGet(int* dev, int ordinal) {
  if (ordinal < 0 || ordinal >= kGpus) return kInvalidDevice;
  *dev = ordinal;
  return kSuccess;
}
CUresult cuDeviceGetName(char* name, int len, int dev) {
  std::snprintf(name, len, "Fake GPU %d", dev);
  return kSuccess;
}
// GPU-00000000-0000-4000-8000-00000000000N, N = ordinal + 1: the memfd stand-ins' UUIDs.
CUresult cuDeviceGetUuid_v2(unsigned char* uuid, int dev) {
  if (dev < 0 || dev >= kGpus) return kInvalidDevice;
  const unsigned char bytes[16] = {0,    0, 0, 0, 0, 0, 0x40, 0,
                                   0x80, 0, 0, 0, 0, 0, 0,    static_cast<unsigned char>(dev + 1)};
  std::memcpy(uuid, bytes, 16);
  return kSuccess;
}
CUresult cuDeviceGetUuid(unsigned char* uuid, int dev) { return cuDeviceGetUuid_v2(uuid, dev); }
CUresult cuDevicePrimaryCtxRetain(void** ctx, int dev) {
  if (dev < 0 || dev >= kGpus) return kInvalidDevice;
  Record("cuDevicePrimaryCtxRetain device=" + std::to_string(dev));
  *ctx = &primary[dev];
  return kSuccess;
}
CUresult cuDevicePrimaryCtxRelease_v2(int) { return kSuccess; }
CUresult cuCtxPushCurrent_v2(void* ctx) {
  current.push_back(static_cast<Context*>(ctx));
  return kSuccess;
}
CUresult cuCtxPopCurrent_v2(void** ctx) {
  if (current.empty()) return kInvalidContext;
  if (ctx != nullptr) *ctx = current.back();
  current.pop_back();
  return kSuccess;
}
CUresult cuCtxGetCurrent(void** ctx) {
  *ctx = current.empty() ? nullptr : current.back();
  return kSuccess;
}
CUresult cuCtxGetDevice(int* dev) {
  if (current.empty()) return kInvalidContext;
  *dev = current.back()->device;
  return kSuccess;
}
CUresult cuDeviceGetAttribute(int* value, int attribute, int dev) {
  constexpr int kComputeMode = 20, kVmm = 102, kPosixFd = 103;
  if (dev < 0 || dev >= kGpus) return kInvalidDevice;
  const char* mode = std::getenv("FAKE_CUDA_COMPUTE_MODE");
  switch (attribute) {
    case kComputeMode:
      *value = mode != nullptr ? std::atoi(mode) : 0;
      return kSuccess;
    case kVmm:
    case kPosixFd:
      *value = 1;
      return kSuccess;
    default:
      *value = 0;
      return kSuccess;
  }
}
CUresult cuDeviceTotalMem_v2(size_t* bytes, int dev) {
  if (dev < 0 || dev >= kGpus) return kInvalidDevice;
  *bytes = size_t{1} << 30;
  return kSuccess;
}
CUresult cuMemGetAllocationGranularity(size_t* granularity, const void*, int) {
  *granularity = 2 << 20;
  return kSuccess;
}
CUresult cuMemHostRegister_v2(void* p, size_t, unsigned) {
  if (current.empty()) return kInvalidContext;
  Record("cuMemHostRegister device=" + std::to_string(current.back()->device));
  (void)p;
  return Failing("cuMemHostRegister");
}
CUresult cuMemHostUnregister(void*) {
  if (current.empty()) return kInvalidContext;
  Record("cuMemHostUnregister device=" + std::to_string(current.back()->device));
  return Failing("cuMemHostUnregister");
}
// A chunk's handle is its fd; a reserved range is host address space with no access.
CUresult cuMemImportFromShareableHandle(uint64_t* handle, void* fd, int) {
  *handle = reinterpret_cast<uintptr_t>(fd);
  return Failing("cuMemImportFromShareableHandle");
}
CUresult cuMemRelease(uint64_t) { return kSuccess; }
CUresult cuMemAddressReserve(uintptr_t* ptr, size_t size, size_t, uintptr_t, uint64_t) {
  void* p = ::mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return kInvalidValue;
  *ptr = reinterpret_cast<uintptr_t>(p);
  return kSuccess;
}
CUresult cuMemMap(uintptr_t ptr, size_t size, size_t offset, uint64_t handle, uint64_t) {
  void* p = ::mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED,
                   static_cast<int>(handle), static_cast<off_t>(offset));
  return p == MAP_FAILED ? kInvalidValue : kSuccess;
}
CUresult cuMemSetAccess(uintptr_t ptr, size_t size, const void*, size_t) {
  return ::mprotect(reinterpret_cast<void*>(ptr), size, PROT_READ) == 0 ? kSuccess : kInvalidValue;
}
CUresult cuDeviceCanAccessPeer(int* can, int, int) {
  *can = 0;
  return kSuccess;
}
CUresult cuMemUnmap(uintptr_t ptr, size_t size) {
  Record("cuMemUnmap");
  if (CUresult r = Failing("cuMemUnmap"); r != kSuccess) return r;
  void* p = ::mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  return p == MAP_FAILED ? kInvalidValue : kSuccess;
}
CUresult cuMemAddressFree(uintptr_t ptr, size_t size) {
  Record("cuMemAddressFree");
  return ::munmap(reinterpret_cast<void*>(ptr), size) == 0 ? kSuccess : kInvalidValue;
}
CUresult cuCtxSynchronize() {
  if (current.empty()) return kInvalidContext;
  std::lock_guard lk(mu);
  Run(current.back()->legacy);
  return kSuccess;
}
CUresult cuStreamCreate(void** stream, unsigned) {
  if (current.empty()) return kInvalidContext;
  *stream = new Stream{current.back(), {}};
  return kSuccess;
}
CUresult cuStreamGetCtx(void* stream, void** ctx) {
  if (IsDefault(stream)) {
    if (current.empty()) return kInvalidContext;
    *ctx = current.back();
  } else {
    *ctx = static_cast<Stream*>(stream)->context;
  }
  return kSuccess;
}
CUresult cuStreamSynchronize(void* stream) {
  if (IsDefault(stream)) {
    if (current.empty()) return kInvalidContext;
    Record("cuStreamSynchronize default device=" + std::to_string(current.back()->device));
    std::lock_guard lk(mu);
    Run(current.back()->legacy);
    return kSuccess;
  }
  auto* s = static_cast<Stream*>(stream);
  Record("cuStreamSynchronize stream");
  std::lock_guard lk(mu);
  if (s->error != kSuccess) return s->error;
  Run(s->queued);
  return kSuccess;
}
CUresult cuMemcpy(uintptr_t dst, uintptr_t src, size_t size) {
  if (current.empty()) return kInvalidContext;
  Record("cuMemcpy device=" + std::to_string(current.back()->device));
  std::lock_guard lk(mu);
  current.back()->legacy.push_back([=] {
    std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), size);
  });
  return kSuccess;
}
CUresult cuPointerGetAttribute(void* data, int attribute, uintptr_t ptr) {
  if (attribute != kPointerAttributeDeviceOrdinal) return kNotSupported;
  std::lock_guard lk(mu);
  for (const Range& r : ranges) {
    if (ptr >= r.base && ptr < r.base + r.size) {
      *static_cast<int*>(data) = r.ordinal;
      return kSuccess;
    }
  }
  return kInvalidValue;  // as for host memory the driver does not know
}

static CUresult NotSupported() { return kNotSupported; }

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int, uint64_t, int* status) {
  struct Entry {
    const char* name;
    void* fn;
  };
  static const Entry kEntries[] = {
      {"cuGetErrorString", reinterpret_cast<void*>(cuGetErrorString)},
      {"cuDriverGetVersion", reinterpret_cast<void*>(cuDriverGetVersion)},
      {"cuDeviceGetCount", reinterpret_cast<void*>(cuDeviceGetCount)},
      {"cuDeviceGet", reinterpret_cast<void*>(cuDeviceGet)},
      {"cuDeviceGetName", reinterpret_cast<void*>(cuDeviceGetName)},
      {"cuDeviceGetUuid", reinterpret_cast<void*>(cuDeviceGetUuid_v2)},
      {"cuDevicePrimaryCtxRetain", reinterpret_cast<void*>(cuDevicePrimaryCtxRetain)},
      {"cuDevicePrimaryCtxRelease", reinterpret_cast<void*>(cuDevicePrimaryCtxRelease_v2)},
      {"cuCtxPushCurrent", reinterpret_cast<void*>(cuCtxPushCurrent_v2)},
      {"cuCtxPopCurrent", reinterpret_cast<void*>(cuCtxPopCurrent_v2)},
      {"cuCtxSynchronize", reinterpret_cast<void*>(cuCtxSynchronize)},
      {"cuCtxGetCurrent", reinterpret_cast<void*>(cuCtxGetCurrent)},
      {"cuCtxGetDevice", reinterpret_cast<void*>(cuCtxGetDevice)},
      {"cuDeviceGetAttribute", reinterpret_cast<void*>(cuDeviceGetAttribute)},
      {"cuDeviceTotalMem", reinterpret_cast<void*>(cuDeviceTotalMem_v2)},
      {"cuMemGetAllocationGranularity", reinterpret_cast<void*>(cuMemGetAllocationGranularity)},
      {"cuMemHostRegister", reinterpret_cast<void*>(cuMemHostRegister_v2)},
      {"cuMemHostUnregister", reinterpret_cast<void*>(cuMemHostUnregister)},
      {"cuMemImportFromShareableHandle", reinterpret_cast<void*>(cuMemImportFromShareableHandle)},
      {"cuMemRelease", reinterpret_cast<void*>(cuMemRelease)},
      {"cuMemAddressReserve", reinterpret_cast<void*>(cuMemAddressReserve)},
      {"cuMemMap", reinterpret_cast<void*>(cuMemMap)},
      {"cuMemSetAccess", reinterpret_cast<void*>(cuMemSetAccess)},
      {"cuDeviceCanAccessPeer", reinterpret_cast<void*>(cuDeviceCanAccessPeer)},
      {"cuMemUnmap", reinterpret_cast<void*>(cuMemUnmap)},
      {"cuMemAddressFree", reinterpret_cast<void*>(cuMemAddressFree)},
      {"cuStreamGetCtx", reinterpret_cast<void*>(cuStreamGetCtx)},
      {"cuStreamSynchronize", reinterpret_cast<void*>(cuStreamSynchronize)},
  };
  *pfn = reinterpret_cast<void*>(NotSupported);
  for (const Entry& e : kEntries) {
    if (std::strcmp(e.name, symbol) == 0) *pfn = e.fn;
  }
  if (status != nullptr) *status = 0;  // CU_GET_PROC_ADDRESS_SUCCESS
  return kSuccess;
}

// Test controls.
void fake_cuda_register(uintptr_t base, size_t size, int ordinal) {
  std::lock_guard lk(mu);
  ranges.push_back({base, size, ordinal});
}
void fake_cuda_defer_fill(void* stream, uintptr_t ptr, int byte, size_t size) {
  std::lock_guard lk(mu);
  static_cast<Stream*>(stream)->queued.push_back(
      [=] { std::memset(reinterpret_cast<void*>(ptr), byte, size); });
}
void fake_cuda_fail_stream(void* stream, CUresult error) {
  std::lock_guard lk(mu);
  static_cast<Stream*>(stream)->error = error;
}
// The next call of `name` (one this file models and says it can fail) returns `code`.
void fake_cuda_fail_next(const char* name, CUresult code) {
  std::lock_guard lk(mu);
  fail_name = name;
  fail_code = code;
}
// Every call recorded so far, one a line.
const char* fake_cuda_log() {
  static thread_local std::string copy;
  std::lock_guard lk(mu);
  copy = log;
  return copy.c_str();
}

}  // extern "C"
