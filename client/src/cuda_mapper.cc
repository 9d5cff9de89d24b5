#include "client/src/cuda_mapper.h"

#include <fmt/format.h>

#include <vector>

#ifdef DEPOT_HAVE_CUDA
#include "common/cuda_driver.h"
#endif

namespace depot::internal {

#ifdef DEPOT_HAVE_CUDA

namespace {

Status Failed(const CudaDriver& cu, CUresult r, const char* call) {
  return Status::Unavailable(cu.Error(r, call));
}

// Makes a context current in this thread while it lives, and then whatever was current before.
class ScopedContext {
 public:
  ScopedContext(const CudaDriver& cu, void* context)
      : cu_(cu), pushed_(cu.CtxPushCurrent(static_cast<CUcontext>(context))) {}
  ~ScopedContext() {
    CUcontext popped;
    if (pushed_ == CUDA_SUCCESS) cu_.CtxPopCurrent(&popped);
  }
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

  Status status() const {
    return pushed_ == CUDA_SUCCESS ? Status::OK() : Failed(cu_, pushed_, "cuCtxPushCurrent");
  }

 private:
  const CudaDriver& cu_;
  CUresult pushed_;
};

// The ordinal of the local GPU named `uuid`.
Result<int> OrdinalOf(const CudaDriver& cu, const std::string& uuid) {
  int count = 0;
  if (CUresult r = cu.DeviceGetCount(&count); r != CUDA_SUCCESS) {
    return Failed(cu, r, "cuDeviceGetCount");
  }
  for (int i = 0; i < count; ++i) {
    CUdevice dev;
    if (cu.DeviceGet(&dev, i) != CUDA_SUCCESS) continue;
    auto id = DeviceUuid(cu, dev);
    if (id.ok() && *id == uuid) return i;
  }
  return Status::Unavailable(
      fmt::format("{} is not visible to this process (CUDA_VISIBLE_DEVICES?)", uuid));
}

// Access to a range on GPU `ordinal`: for it first, then for every other GPU that can reach its
// memory (peer access).
std::vector<CUmemAccessDesc> AccessFor(const CudaDriver& cu, int ordinal, bool writable) {
  CUmemAccessDesc desc{};
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = ordinal;
  desc.flags = writable ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_READ;
  std::vector<CUmemAccessDesc> access{desc};
  int count = 0;
  CUdevice owner;
  if (cu.DeviceGetCount(&count) != CUDA_SUCCESS || cu.DeviceGet(&owner, ordinal) != CUDA_SUCCESS) {
    return access;
  }
  for (int i = 0; i < count; ++i) {
    CUdevice peer;
    int can = 0;
    if (i == ordinal || cu.DeviceGet(&peer, i) != CUDA_SUCCESS ||
        cu.DeviceCanAccessPeer(&can, peer, owner) != CUDA_SUCCESS || !can) {
      continue;
    }
    desc.location.id = i;
    access.push_back(desc);
  }
  return access;
}

}  // namespace

CudaMapper::~CudaMapper() {
  if (devices_.empty()) return;  // nothing retained: never load the driver just to go
  auto cu = LoadCudaDriver();
  if (!cu.ok()) return;
  for (const auto& [ordinal, device] : devices_) {
    CUdevice dev;
    if ((*cu)->DeviceGet(&dev, ordinal) == CUDA_SUCCESS) (*cu)->DevicePrimaryCtxRelease(dev);
  }
}

Result<CudaMapper::Device> CudaMapper::DeviceOf(uint32_t pool) {
  auto cu = LoadCudaDriver();
  if (!cu.ok()) return cu.status();
  auto ordinal = pool == 0 ? PinDevice() : OrdinalOf(**cu, pools_.PlaceOf(pool).gpu);
  if (!ordinal.ok()) return ordinal.status();
  return Retained(*ordinal);
}

Result<int> CudaMapper::PinDevice() {
  const CudaDriver& cu = **LoadCudaDriver();
  std::lock_guard lk(mu_);
  if (pin_device_) return *pin_device_;
  CUcontext current = nullptr;
  CUdevice dev = 0;
  if (CUresult r = cu.CtxGetCurrent(&current); r != CUDA_SUCCESS) {
    return Failed(cu, r, "cuCtxGetCurrent");
  }
  if (current != nullptr) {
    if (CUresult r = cu.CtxGetDevice(&dev); r != CUDA_SUCCESS) {
      return Failed(cu, r, "cuCtxGetDevice");
    }
  }
  pin_device_ = static_cast<int>(dev);  // a CUdevice is its ordinal
  return *pin_device_;
}

Result<CudaMapper::Device> CudaMapper::Retained(int ordinal) {
  auto cu = LoadCudaDriver();
  if (!cu.ok()) return cu.status();
  std::lock_guard lk(mu_);
  if (auto it = devices_.find(ordinal); it != devices_.end()) return it->second;
  CUdevice dev;
  if (CUresult r = (*cu)->DeviceGet(&dev, ordinal); r != CUDA_SUCCESS) {
    return Failed(**cu, r, "cuDeviceGet");
  }
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t granularity = 0;
  if (CUresult r =
          (*cu)->MemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
      r != CUDA_SUCCESS) {
    return Failed(**cu, r, "cuMemGetAllocationGranularity");
  }
  CUcontext ctx;
  if (CUresult r = (*cu)->DevicePrimaryCtxRetain(&ctx, dev); r != CUDA_SUCCESS) {
    return Failed(**cu, r, "cuDevicePrimaryCtxRetain");
  }
  Device d{ordinal, ctx, granularity};
  devices_.emplace(ordinal, d);
  return d;
}

Result<void*> CudaMapper::Map(int fd, uint64_t size, uint32_t pool, bool writable) {
  auto device = DeviceOf(pool);
  if (!device.ok()) return device.status();
  const CudaDriver& cu = **LoadCudaDriver();
  ScopedContext current(cu, device->context);
  if (Status st = current.status(); !st.ok()) return st;
  // Chunks are imported per mapping; the mapping keeps the memory alive after the handle goes.
  CUmemGenericAllocationHandle handle;
  CUresult r =
      cu.MemImportFromShareableHandle(&handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  if (r != CUDA_SUCCESS) return Failed(cu, r, "cuMemImportFromShareableHandle");
  CUdeviceptr ptr = 0;
  // The range is aligned to the device's granularity, as cuMemMap requires of its address.
  if (r = cu.MemAddressReserve(&ptr, size, device->granularity, 0, 0); r != CUDA_SUCCESS) {
    cu.MemRelease(handle);
    return Failed(cu, r, "cuMemAddressReserve");
  }
  r = cu.MemMap(ptr, size, 0, handle, 0);
  cu.MemRelease(handle);
  if (r != CUDA_SUCCESS) {
    cu.MemAddressFree(ptr, size);
    return Failed(cu, r, "cuMemMap");
  }
  // VMM mappings ignore peer access: each GPU that is to reach the range must be granted it.
  // Every GPU that can reach the pool's is (a worker of another GPU may read the frame in its
  // own kernels); if the driver refuses that, the pool's own GPU at least.
  std::vector<CUmemAccessDesc> access = AccessFor(cu, device->ordinal, writable);
  r = cu.MemSetAccess(ptr, size, access.data(), access.size());
  if (r != CUDA_SUCCESS && access.size() > 1) {
    access.resize(1);
    r = cu.MemSetAccess(ptr, size, access.data(), 1);
  }
  if (r != CUDA_SUCCESS) {
    cu.MemUnmap(ptr, size);
    cu.MemAddressFree(ptr, size);
    return Failed(cu, r, "cuMemSetAccess");
  }
  return reinterpret_cast<void*>(ptr);
}

Status CudaMapper::Unmap(void* base, uint64_t size) {
  // The virtual memory calls act on the process's address space and need no context. In a
  // forked child the driver is unavailable, and the mapping is left as the parent made it.
  auto loaded = LoadCudaDriver();
  if (!loaded.ok()) return loaded.status();
  const CudaDriver& cu = **loaded;
  // cuMemUnmap does not wait for the work that still reads the range: a consumer drops its
  // array (or DLPack calls the deleter) when its kernels are queued, not done. Unmapped under
  // them, a dedicated chunk faults them, and a shared one, reused, feeds them other bytes. So
  // first wait for the work of every GPU this process works on through its primary context
  // (CuPy's, PyTorch's, Numba's); work in contexts of its own is the caller's to finish. A
  // wait that fails leaves no work running (a context whose work faulted has stopped it all):
  // the range is unmapped anyway, and the failure returned.
  Status waited;
  {
    std::lock_guard lk(mu_);
    for (const auto& [ordinal, device] : devices_) {
      ScopedContext current(cu, device.context);
      CUresult r = current.status().ok() ? cu.CtxSynchronize() : CUDA_SUCCESS;
      if (!current.status().ok() && waited.ok()) waited = current.status();
      if (r != CUDA_SUCCESS && waited.ok()) waited = Failed(cu, r, "cuCtxSynchronize");
    }
  }
  auto ptr = reinterpret_cast<CUdeviceptr>(base);
  // Still mapped, the range stays reserved: freeing it would let the next reservation land on
  // memory that is still mapped.
  if (CUresult r = cu.MemUnmap(ptr, size); r != CUDA_SUCCESS) return Failed(cu, r, "cuMemUnmap");
  if (CUresult r = cu.MemAddressFree(ptr, size); r != CUDA_SUCCESS) {
    return Failed(cu, r, "cuMemAddressFree");
  }
  return waited;
}

Status CudaMapper::Load() const { return LoadCudaDriver().status(); }

Result<bool> CudaMapper::Pin(void* base, uint64_t size, bool read_only) {
  auto device = DeviceOf(0);
  if (!device.ok()) return device.status();
  const CudaDriver& cu = **LoadCudaDriver();  // DeviceOf loaded it
  ScopedContext current(cu, device->context);
  if (Status st = current.status(); !st.ok()) return st;
  unsigned flags = CU_MEMHOSTREGISTER_PORTABLE;
  if (read_only) {
    int supported = 0;
    CUresult r = cu.DeviceGetAttribute(
        &supported, CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, device->ordinal);
    if (r != CUDA_SUCCESS) return Failed(cu, r, "cuDeviceGetAttribute");
    if (supported) flags |= CU_MEMHOSTREGISTER_READ_ONLY;
  }
  CUresult r = cu.MemHostRegister(base, size, flags);
  if (r == CUDA_SUCCESS) return true;
  // Without the read-only flag a read-only mapping registers only where the GPU uses the host's
  // page tables; elsewhere it stays pageable, which costs speed, not correctness.
  if (read_only && (flags & CU_MEMHOSTREGISTER_READ_ONLY) == 0) return false;
  return Failed(cu, r, "cuMemHostRegister");
}

Status CudaMapper::Unpin(void* base) {
  // Only a pinned mapping is unpinned, and pinning chose and retained the device.
  auto device = DeviceOf(0);
  if (!device.ok()) return device.status();
  const CudaDriver& cu = **LoadCudaDriver();
  ScopedContext current(cu, device->context);
  if (Status st = current.status(); !st.ok()) return st;
  CUresult r = cu.MemHostUnregister(base);
  return r == CUDA_SUCCESS ? Status::OK() : Failed(cu, r, "cuMemHostUnregister");
}

Status CudaMapper::CopyIn(std::span<std::byte> dst, std::span<const std::byte> src, uint32_t pool) {
  auto device = DeviceOf(pool);
  if (!device.ok()) return device.status();
  const CudaDriver& cu = **LoadCudaDriver();  // DeviceOf loaded it
  ScopedContext current(cu, device->context);
  if (Status st = current.status(); !st.ok()) return st;
  CUresult r = cu.MemcpyHtoD(reinterpret_cast<CUdeviceptr>(dst.data()), src.data(), dst.size());
  return r == CUDA_SUCCESS ? Status::OK() : Failed(cu, r, "cuMemcpyHtoD");
}

Status CudaMapper::Sync(void* cuda_stream, std::span<const uint32_t> pools) {
  auto loaded = LoadCudaDriver();
  if (!loaded.ok()) return loaded.status();
  const CudaDriver& cu = **loaded;
  if (cuda_stream != nullptr) {
    // A stream belongs to one context: wait in that one, whichever is current here.
    auto stream = static_cast<CUstream>(cuda_stream);
    CUcontext ctx;
    if (CUresult r = cu.StreamGetCtx(stream, &ctx); r != CUDA_SUCCESS) {
      return Failed(cu, r, "cuStreamGetCtx");
    }
    ScopedContext current(cu, ctx);
    if (Status st = current.status(); !st.ok()) return st;
    CUresult r = cu.StreamSynchronize(stream);
    return r == CUDA_SUCCESS ? Status::OK() : Failed(cu, r, "cuStreamSynchronize");
  }
  for (uint32_t pool : pools) {
    auto device = DeviceOf(pool);
    if (!device.ok()) return device.status();
    ScopedContext current(cu, device->context);
    if (Status st = current.status(); !st.ok()) return st;
    if (CUresult r = cu.StreamSynchronize(nullptr); r != CUDA_SUCCESS) {
      return Failed(cu, r, "cuStreamSynchronize");
    }
  }
  return Status::OK();
}

#else  // !DEPOT_HAVE_CUDA

namespace {

Status NoCuda() { return Status::Unavailable("this libdepot is built without CUDA support"); }

}  // namespace

CudaMapper::~CudaMapper() = default;
Result<void*> CudaMapper::Map(int, uint64_t, uint32_t, bool) { return NoCuda(); }
Status CudaMapper::Unmap(void*, uint64_t) { return NoCuda(); }
Status CudaMapper::Load() const { return NoCuda(); }
Result<bool> CudaMapper::Pin(void*, uint64_t, bool) { return NoCuda(); }
Status CudaMapper::Unpin(void*) { return NoCuda(); }
Status CudaMapper::CopyIn(std::span<std::byte>, std::span<const std::byte>, uint32_t) {
  return NoCuda();
}
Status CudaMapper::Sync(void*, std::span<const uint32_t>) { return NoCuda(); }

#endif  // DEPOT_HAVE_CUDA

}  // namespace depot::internal
