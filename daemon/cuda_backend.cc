// The CUDA device backend: chunks from the virtual memory management API (cuMemCreate with
// POSIX-fd handles), each exported once (cuMemExportToShareableHandle).
#include "daemon/device_backend.h"

#ifdef DEPOT_HAVE_CUDA

#include <fmt/format.h>
#include <spdlog/spdlog.h>

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
    // Found again from scratch each time (the set asks again while it has none).
    devices_.clear();
    std::vector<DeviceInfo> out;
    std::string skipped;
    for (int i = 0; i < count; ++i) {
      CUdevice dev;
      auto info = Describe(i, dev);
      if (!info.ok()) {
        skipped +=
            fmt::format("{}GPU {}: {}", skipped.empty() ? "" : "; ", i, info.status().message());
        continue;
      }
      devices_.push_back(dev);
      out.push_back(std::move(*info));
    }
    if (out.empty()) return Status::Unavailable(skipped);
    if (!skipped.empty()) spdlog::warn("GPUs left out of device pools: {}", skipped);
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

  Result<DeviceChunk> AdoptChunk(size_t, UniqueFd fd, uint64_t size) override {
    // Nothing to ask the driver: the descriptor is the reference (CUDA frees an allocation once
    // no handle and no shareable handle to it is left).
    if (!fd.valid()) return Status::InvalidArgument("no descriptor");
    return DeviceChunk{std::move(fd), 0, size, UniqueFd()};
  }

  void ReleaseChunk(size_t, DeviceChunk& chunk) override {
    if (chunk.handle != 0) cu_->MemRelease(static_cast<CUmemGenericAllocationHandle>(chunk.handle));
    chunk.fd = UniqueFd();
  }

 private:
  // Device `ordinal` (its handle in `dev`), when device pools can use it; otherwise why not, naming
  // the call that failed or what the device lacks. Every answer of the driver is checked: a failed
  // read must not become a garbage UUID or size.
  Result<DeviceInfo> Describe(int ordinal, CUdevice& dev) {
    if (CUresult r = cu_->DeviceGet(&dev, ordinal); r != CUDA_SUCCESS) {
      return Status::Unavailable(cu_->Error(r, "cuDeviceGet"));
    }
    auto uuid = DeviceUuid(*cu_, dev);
    if (!uuid.ok()) return uuid.status();
    auto attribute = [&](CUdevice_attribute a, const char* what) -> Result<int> {
      int value = 0;
      if (CUresult r = cu_->DeviceGetAttribute(&value, a, dev); r != CUDA_SUCCESS) {
        return Status::Unavailable(fmt::format("{}: {}", *uuid, cu_->Error(r, what)));
      }
      return value;
    };
    auto vmm = attribute(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                         "cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)");
    auto posix_fd = attribute(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                              "cuDeviceGetAttribute(HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED)");
    auto mode = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, "cuDeviceGetAttribute(COMPUTE_MODE)");
    for (const auto* a : {&vmm, &posix_fd, &mode}) {
      if (!a->ok()) return a->status();
    }
    if (!*vmm) return Status::Unavailable(*uuid + " lacks virtual memory management");
    if (!*posix_fd) return Status::Unavailable(*uuid + " lacks POSIX fd handles");
    if (*mode == CU_COMPUTEMODE_PROHIBITED) {
      return Status::Unavailable(*uuid + " is in the prohibited compute mode");
    }
    char name[256] = {};
    size_t memory = 0;
    if (CUresult r = cu_->DeviceGetName(name, sizeof name - 1, dev); r != CUDA_SUCCESS) {
      return Status::Unavailable(fmt::format("{}: {}", *uuid, cu_->Error(r, "cuDeviceGetName")));
    }
    if (CUresult r = cu_->DeviceTotalMem(&memory, dev); r != CUDA_SUCCESS) {
      return Status::Unavailable(fmt::format("{}: {}", *uuid, cu_->Error(r, "cuDeviceTotalMem")));
    }
    CUmemAllocationProp prop = Prop(dev);
    size_t granularity = 0;
    if (CUresult r = cu_->MemGetAllocationGranularity(&granularity, &prop,
                                                      CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
        r != CUDA_SUCCESS) {
      return Status::Unavailable(
          fmt::format("{}: {}", *uuid, cu_->Error(r, "cuMemGetAllocationGranularity")));
    }
    DeviceInfo info{*uuid, name, memory, granularity, {}};
    if (*mode == CU_COMPUTEMODE_EXCLUSIVE_PROCESS) {
      // Pooled all the same: a node may run one GPU process at a time on purpose.
      info.caveat =
          "in the exclusive-process compute mode: one process at a time may use it, so a "
          "client cannot map its frames while another process has a context on it "
          "(`nvidia-smi -c DEFAULT` lets processes share it)";
      spdlog::warn("{} is {}", *uuid, info.caveat);
    }
    return info;
  }

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
