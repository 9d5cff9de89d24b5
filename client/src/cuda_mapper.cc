#include "client/src/cuda_mapper.h"

#include <fmt/format.h>

#ifdef DEPOT_HAVE_CUDA
#include "common/cuda_driver.h"
#endif

namespace depot::internal {

#ifdef DEPOT_HAVE_CUDA

namespace {

// The local CUDA device of the GPU with this UUID.
Result<int> LocalDevice(const CudaDriver& cu, const Place& place) {
  int count = 0;
  cu.DeviceGetCount(&count);
  for (int i = 0; i < count; ++i) {
    CUdevice dev;
    CUuuid uuid;
    if (cu.DeviceGet(&dev, i) != CUDA_SUCCESS || cu.DeviceGetUuid(&uuid, dev) != CUDA_SUCCESS) {
      continue;
    }
    if (FormatGpuUuid(uuid) != place.gpu) continue;
    // The runtime API works in the primary context: make sure it exists for this device.
    CUcontext ctx;
    cu.DevicePrimaryCtxRetain(&ctx, dev);
    return static_cast<int>(dev);
  }
  return Status::Unavailable(
      fmt::format("{} is not visible to this process (CUDA_VISIBLE_DEVICES?)", place.gpu));
}

}  // namespace

Result<void*> CudaMapper::Map(int fd, uint64_t size, uint32_t pool, bool writable) {
  auto cu = LoadCudaDriver();
  if (!cu.ok()) return cu.status();
  auto device = LocalDevice(**cu, pools_.PlaceOf(pool));
  if (!device.ok()) return device.status();
  // Chunks are imported per mapping; the mapping keeps the memory alive after the handle goes.
  CUmemGenericAllocationHandle handle;
  CUresult r = (*cu)->MemImportFromShareableHandle(
      &handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  if (r != CUDA_SUCCESS) {
    return Status::Unavailable((*cu)->Error(r, "cuMemImportFromShareableHandle"));
  }
  CUdeviceptr ptr = 0;
  r = (*cu)->MemAddressReserve(&ptr, size, 0, 0, 0);
  if (r == CUDA_SUCCESS) r = (*cu)->MemMap(ptr, size, 0, handle, 0);
  (*cu)->MemRelease(handle);
  if (r != CUDA_SUCCESS) {
    if (ptr != 0) (*cu)->MemAddressFree(ptr, size);
    return Status::Unavailable((*cu)->Error(r, "cuMemMap"));
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = *device;
  access.flags = writable ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_READ;
  if (r = (*cu)->MemSetAccess(ptr, size, &access, 1); r != CUDA_SUCCESS) {
    (*cu)->MemUnmap(ptr, size);
    (*cu)->MemAddressFree(ptr, size);
    return Status::Unavailable((*cu)->Error(r, "cuMemSetAccess"));
  }
  return reinterpret_cast<void*>(ptr);
}

void CudaMapper::Unmap(void* base, uint64_t size) {
  auto cu = LoadCudaDriver();
  if (!cu.ok()) return;
  (*cu)->MemUnmap(reinterpret_cast<CUdeviceptr>(base), size);
  (*cu)->MemAddressFree(reinterpret_cast<CUdeviceptr>(base), size);
}

Status CudaMapper::Load() const { return LoadCudaDriver().status(); }

Status CudaMapper::Pin(void* base, uint64_t size, bool read_only) const {
  auto cu = LoadCudaDriver();
  if (!cu.ok()) return cu.status();
  unsigned flags = read_only ? CU_MEMHOSTREGISTER_READ_ONLY : 0;
  if (CUresult r = (*cu)->MemHostRegister(base, size, flags); r != CUDA_SUCCESS) {
    return Status::Unavailable((*cu)->Error(r, "cuMemHostRegister"));
  }
  return Status::OK();
}

// Only a pinned mapping is unpinned, and pinning loaded the driver.
void CudaMapper::Unpin(void* base) const { (*LoadCudaDriver())->MemHostUnregister(base); }

Status CudaMapper::CopyIn(std::span<std::byte> dst, std::span<const std::byte> src) const {
  auto cu = LoadCudaDriver();
  if (!cu.ok()) return cu.status();
  CUresult r = (*cu)->MemcpyHtoD(reinterpret_cast<CUdeviceptr>(dst.data()), src.data(), dst.size());
  if (r != CUDA_SUCCESS) return Status::Unavailable((*cu)->Error(r, "cuMemcpyHtoD"));
  return Status::OK();
}

Status CudaMapper::Sync(void* cuda_stream) const {
  auto cu = LoadCudaDriver();
  if (!cu.ok()) return cu.status();
  CUresult r = (*cu)->StreamSynchronize(static_cast<CUstream>(cuda_stream));
  if (r != CUDA_SUCCESS) return Status::Unavailable((*cu)->Error(r, "cuStreamSynchronize"));
  return Status::OK();
}

#else  // !DEPOT_HAVE_CUDA

namespace {

Status NoCuda() { return Status::Unavailable("this libdepot is built without CUDA support"); }

}  // namespace

Result<void*> CudaMapper::Map(int, uint64_t, uint32_t, bool) { return NoCuda(); }
void CudaMapper::Unmap(void*, uint64_t) {}
Status CudaMapper::Load() const { return NoCuda(); }
Status CudaMapper::Pin(void*, uint64_t, bool) const { return NoCuda(); }
void CudaMapper::Unpin(void*) const {}
Status CudaMapper::CopyIn(std::span<std::byte>, std::span<const std::byte>) const {
  return NoCuda();
}
Status CudaMapper::Sync(void*) const { return NoCuda(); }

#endif  // DEPOT_HAVE_CUDA

}  // namespace depot::internal
