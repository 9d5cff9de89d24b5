#include "depot/gpu.h"

#include <string>

#ifdef DEPOT_HAVE_CUDA
#include "common/cuda_driver.h"
#endif

namespace depot {

Result<int> CudaOrdinal(std::string_view gpu) {
#ifdef DEPOT_HAVE_CUDA
  auto cu = LoadCudaDriver();
  if (!cu.ok()) return cu.status();
  int count = 0;
  if ((*cu)->DeviceGetCount(&count) == CUDA_SUCCESS) {
    for (int i = 0; i < count; ++i) {
      CUdevice device;
      if ((*cu)->DeviceGet(&device, i) != CUDA_SUCCESS) continue;
      auto uuid = DeviceUuid(**cu, device);
      if (uuid.ok() && *uuid == gpu) return i;
    }
  }
  return Status::Unavailable("GPU " + std::string(gpu) +
                             " is not visible to this process (see CUDA_VISIBLE_DEVICES)");
#else
  return Status::Unavailable("GPU " + std::string(gpu) +
                             " has no CUDA ordinal here: this depot is built without CUDA support");
#endif
}

}  // namespace depot
