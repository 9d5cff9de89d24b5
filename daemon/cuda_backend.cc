// The CUDA device backend: chunks from the virtual memory management API (cuMemCreate with
// POSIX-fd handles), each exported once (cuMemExportToShareableHandle).
#include "daemon/device_backend.h"

#ifdef DEPOT_HAVE_CUDA

#include <fmt/format.h>

#include "common/cuda_driver.h"

namespace depot {
namespace {

class CudaBackend : public DeviceBackend {
 public:
  std::string kind() const override { return "cuda"; }

  Result<std::vector<DeviceInfo>> Devices() override {
    auto driver = LoadCudaDriver();
    if (!driver.ok()) return driver.status();
    cu_ = *driver;
    int count = 0;
    if (CUresult r = cu_->DeviceGetCount(&count); r != CUDA_SUCCESS) {
      return Status::Unavailable(cu_->Error(r, "cuDeviceGetCount"));
    }
    if (count == 0) return Status::Unavailable("the CUDA driver sees no GPU");
    std::vector<DeviceInfo> out;
    std::string skipped;
    for (int i = 0; i < count; ++i) {
      CUdevice dev;
      if (cu_->DeviceGet(&dev, i) != CUDA_SUCCESS) continue;
      int vmm = 0, posix_fd = 0;
      cu_->DeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
      cu_->DeviceGetAttribute(&posix_fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                              dev);
      CUuuid uuid;
      char name[256] = {};
      size_t memory = 0;
      cu_->DeviceGetUuid(&uuid, dev);
      cu_->DeviceGetName(name, sizeof name - 1, dev);
      cu_->DeviceTotalMem(&memory, dev);
      if (!vmm || !posix_fd) {
        skipped += fmt::format("{}{} lacks {}", skipped.empty() ? "" : "; ", FormatGpuUuid(uuid),
                               !vmm ? "virtual memory management" : "POSIX fd handles");
        continue;
      }
      CUmemAllocationProp prop = Prop(dev);
      size_t granularity = 0;
      if (CUresult r = cu_->MemGetAllocationGranularity(&granularity, &prop,
                                                        CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
          r != CUDA_SUCCESS) {
        return Status::Unavailable(cu_->Error(r, "cuMemGetAllocationGranularity"));
      }
      devices_.push_back(dev);
      out.push_back({FormatGpuUuid(uuid), name, memory, granularity});
    }
    if (out.empty()) return Status::Unavailable(skipped);
    return out;
  }

  Result<DeviceChunk> CreateChunk(size_t index, uint64_t size) override {
    CUmemAllocationProp prop = Prop(devices_.at(index));
    CUmemGenericAllocationHandle handle;
    if (CUresult r = cu_->MemCreate(&handle, size, &prop, 0); r != CUDA_SUCCESS) {
      std::string why = cu_->Error(r, "cuMemCreate");
      return r == CUDA_ERROR_OUT_OF_MEMORY ? Status::StoreFull(why) : Status::Unavailable(why);
    }
    int fd = -1;
    if (CUresult r = cu_->MemExportToShareableHandle(&fd, handle,
                                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        r != CUDA_SUCCESS) {
      cu_->MemRelease(handle);
      return Status::Unavailable(cu_->Error(r, "cuMemExportToShareableHandle"));
    }
    return DeviceChunk{UniqueFd(fd), handle, size, UniqueFd()};
  }

  void ReleaseChunk(size_t, DeviceChunk& chunk) override {
    cu_->MemRelease(static_cast<CUmemGenericAllocationHandle>(chunk.handle));
    chunk.fd = UniqueFd();
  }

 private:
  static CUmemAllocationProp Prop(CUdevice dev) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return prop;
  }

  const CudaDriver* cu_ = nullptr;
  std::vector<CUdevice> devices_;
};

}  // namespace

std::unique_ptr<DeviceBackend> MakeCudaBackend(std::string*) {
  return std::make_unique<CudaBackend>();
}

}  // namespace depot

#else

namespace depot {

std::unique_ptr<DeviceBackend> MakeCudaBackend(std::string* why) {
  *why = "this depotd is built without CUDA support";
  return nullptr;
}

}  // namespace depot

#endif
